"""The GPU suite's cases (EinNet's operators) and the roofline bound, checked on the CPU."""
import numpy as np
import pytest
import torch

from ir import Tensor, evaluate, ops
from ollie.cli import bench_gpu
from ollie.cli.bench_gpu import PEAKS, g2bmm_fn, gbmm_fn, gpu_cases, roofline_seconds


def test_the_suite_has_the_einnet_operator_cases():
    names = [c.name for c in gpu_cases()]
    assert len(names) == len(set(names)) == 31
    for model in ("infogan", "dcgan"):
        for batch in (1, 16):
            assert {f"{model}_convT{k}_b{batch}" for k in range(1, 6)} <= set(names)
    assert {"conv3x3_512_7x7", "fsrcnn_conv5x5_32to1", "fsrcnn_conv5x5_1to56",
            "longformer_g2bmm", "longformer_gbmm"} <= set(names)
    assert [n for n in names if n.startswith("csrnet")] == [f"csrnet_dilated{k}"
                                                          for k in range(1, 7)]


def test_output_shapes_follow_the_published_sizes():
    by = {c.name: c for c in gpu_cases()}
    assert by["dcgan_convT2_b16"].output_shape() == (16, 256, 8, 8)
    assert by["infogan_convT5_b1"].output_shape() == (1, 3, 32, 32)
    assert by["csrnet_dilated4"].output_shape() == (16, 256, 14, 14)
    assert by["fsrcnn_conv5x5_32to1"].output_shape() == (16, 1, 224, 224)
    assert by["longformer_g2bmm"].output_shape() == (8, 10000, 2001)
    assert by["longformer_gbmm"].output_shape() == (8, 10000, 64)
    for c in gpu_cases():
        assert c.flops > 0 and c.bytes() > 0 and c.source and len(c.shapes) == 2


def test_roofline_is_the_binding_limit():
    assert roofline_seconds(2e12, 1e9, 1e15, 1e12) == pytest.approx(2e-3)  # compute-bound
    assert roofline_seconds(1e9, 4e9, 1e15, 2e12) == pytest.approx(2e-3)   # memory-bound
    with pytest.raises(ValueError):
        roofline_seconds(1.0, 1.0, 0.0, 1.0)
    g2bmm = {c.name: c for c in gpu_cases()}["longformer_g2bmm"]
    # on tensor cores it is memory-bound: the H200's bandwidth shows
    assert g2bmm.roofline("h200", "tf32") < g2bmm.roofline("h100", "tf32")
    assert g2bmm.roofline("h200") == g2bmm.roofline("h100")  # fp32 FMA: compute-bound
    assert PEAKS["h100"]["bandwidth"] == 3.35e12 and PEAKS["h200"]["bandwidth"] == 4.8e12


@pytest.mark.parametrize("w,d", [(2, 1), (3, 2)])
def test_banded_baselines_match_the_ir_operators(w, d):
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((2, 15, 4)), rng.standard_normal((2, 15, 4))
    p = rng.standard_normal((2, 15, 2 * w + 1))
    want = evaluate(ops.g2bmm(Tensor("q", q.shape), Tensor("k", k.shape), w, d),
                    {"q": q, "k": k})
    got = g2bmm_fn(w, d, chunk=2)(torch.from_numpy(q), torch.from_numpy(k))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-10)
    want = evaluate(ops.gbmm(Tensor("p", p.shape), Tensor("v", k.shape), w, d),
                    {"p": p, "v": k})
    got = gbmm_fn(w, d, chunk=2)(torch.from_numpy(p), torch.from_numpy(k))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-10)


def test_inputs_are_reproducible():
    case = {c.name: c for c in gpu_cases()}["infogan_convT3_b1"]
    a, b = case.inputs("cpu"), case.inputs("cpu")
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert tuple(case.fn(*a).shape) == case.output_shape()


def test_suite_is_independent_of_codegen():
    source = open(bench_gpu.__file__).read()
    assert "codegen" not in source.split('"""', 2)[2]
