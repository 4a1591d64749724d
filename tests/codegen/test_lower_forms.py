"""Which torch form each scope lowers to, the kernel's calling convention, its call overhead."""
import statistics
import time

import numpy as np
import pytest
import torch

import codegen
from ir import Iter, Scope, Tensor, evaluate, iterator_symbol, ops
from ir.nodes import inputs as scope_inputs

from lowering_helpers import calls, check_lowering

i, j, k = (iterator_symbol(n) for n in "ijk")


def T(name, *shape):
    return Tensor(name, shape, "float64")


def test_matmul_lowers_to_a_matrix_product_without_gathers():
    kernel = check_lowering(ops.matmul(T("a", 64, 32), T("b", 32, 16)))
    assert kernel.forms == ("mm",)
    assert calls(kernel) == {"mm": 1} and not kernel.index_arrays


@pytest.mark.parametrize("build, form, called", [
    (lambda: ops.matmul(T("a", 8, 6), ops.transpose(T("b", 5, 6), 0, 1)), "mm",
     {"t": 1, "mm": 1}),
    (lambda: Scope((Iter("j", 0, 5), Iter("i", 0, 4)), (Iter("k", 0, 6),),
                   T("a", 4, 6)[i, k] * T("b", 6, 5)[k, j]), "mm", {"t": 2, "mm": 1}),
    (lambda: ops.bmm(T("a", 3, 4, 6), T("b", 3, 6, 5)), "bmm", {"bmm": 1}),
    (lambda: ops.matmul(T("a", 2, 3, 4, 6), T("b", 2, 3, 6, 5)), "matmul", {"matmul": 1}),
    (lambda: ops.mv(T("a", 4, 6), T("v", 6)), "mv", {"mv": 1}),
    (lambda: ops.dot(T("u", 6), T("v", 6)), "dot", {"dot": 1}),
    (lambda: ops.einsum("bij,bjk,bkl->bil", T("a", 2, 3, 4), T("b", 2, 4, 5), T("c", 2, 5, 6)),
     "einsum", {"einsum": 1}),
])
def test_contractions_pick_the_library_call(build, form, called):
    """One library call on views of the operands: no copies, no gathers."""
    scope = build()
    kernel = check_lowering(scope)
    assert kernel.forms[-1] == form
    assert calls(kernel) == called


def test_conv_lowers_to_the_library_conv():
    kernel = check_lowering(ops.conv2d(T("x", 1, 3, 8, 8), T("w", 4, 3, 3, 3), padding=1))
    assert kernel.forms == ("conv2d",)
    [conv] = [n for n in kernel.graph.nodes if n.op == "call_function"]
    assert conv.target is torch.conv2d and [a.name for a in conv.args] == ["x", "w"]
    assert conv.kwargs == {"padding": 1}


def test_a_window_sum_no_library_op_matches_is_a_strided_view_into_einsum():
    # a 3-D window (no conv3d form): the generic path reads it as a view, no gathers
    n, f, c = (iterator_symbol(v) for v in "nfc")
    h, w, d, r, s, t = (iterator_symbol(v) for v in "hwdrst")
    x, wt = T("x", 1, 2, 6, 6, 6), T("wt", 3, 2, 3, 3, 3)
    scope = Scope((Iter("n", 0, 1), Iter("f", 0, 3), Iter("h", 0, 6), Iter("w", 0, 6),
                   Iter("d", 0, 6)),
                  (Iter("c", 0, 2), Iter("r", 0, 3), Iter("s", 0, 3), Iter("t", 0, 3)),
                  x[n, c, h + r - 1, w + s - 1, d + t - 1] * wt[f, c, r, s, t])
    kernel = check_lowering(scope)
    assert kernel.forms == ("einsum",)
    [pad] = [n for n in kernel.graph.nodes if n.target is torch.nn.functional.pad]
    assert pad.args[1] == [1, 1, 1, 1, 1, 1] and calls(kernel)["as_strided"] == 1
    assert not kernel.index_arrays


def test_call_by_keyword_and_input_order():
    scope = ops.sub(T("b", 3), T("a", 3))
    kernel = codegen.lower(scope)
    assert kernel.input_names == ("a", "b")  # sorted by name
    a, b = torch.randn(3, dtype=torch.float64), torch.randn(3, dtype=torch.float64)
    want = evaluate(scope, {"a": a.numpy(), "b": b.numpy()})
    np.testing.assert_allclose(kernel(a, b).numpy(), want)
    np.testing.assert_allclose(kernel(b=b, a=a).numpy(), want)
    np.testing.assert_allclose(kernel(a, b=b).numpy(), want)
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'b'"):
        kernel(a)
    with pytest.raises(TypeError, match=r"missing input\(s\) \['b'\]"):
        kernel(a=a)
    with pytest.raises(TypeError, match="unexpected input 'c'"):
        kernel(a, b, c=a)


def test_input_names_that_are_not_identifiers():
    kernel = check_lowering(ops.add(T("x.1", 3), T("torch", 3)))
    assert kernel.input_names == ("torch", "x.1")


def test_unknown_backend_and_non_scope():
    with pytest.raises(ValueError, match="unknown codegen backend 'cuda'"):
        codegen.lower(ops.relu(T("x", 2)), backend="cuda")
    with pytest.raises(TypeError, match="takes an ir.Scope"):
        codegen.lower(T("x", 2))


def test_tracebacks_show_generated_lines():
    kernel = codegen.lower(ops.matmul(T("a", 2, 3), T("b", 3, 4)))
    with pytest.raises(RuntimeError) as info:
        kernel(torch.zeros(2, 3), torch.zeros(5, 4))
    assert "torch.mm(a, b)" in "".join(str(e.statement) for e in info.traceback)


def _call_overhead_us(kernel, direct, args, repeats=60, inner=10) -> float:
    """Median time of a ``kernel`` call minus that of ``direct``, timed side by side."""
    times = {kernel: [], direct: []}
    for _ in range(repeats):
        for fn in (direct, kernel):
            t0 = time.perf_counter()
            for _ in range(inner):
                fn(*args)
            times[fn].append((time.perf_counter() - t0) / inner)
    return (statistics.median(times[kernel]) - statistics.median(times[direct])) * 1e6


def test_call_overhead_over_torch_matmul_is_small():
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    kernel = codegen.lower(ops.matmul(Tensor("a", (64, 64)), Tensor("b", (64, 64))))
    for _ in range(20):
        kernel(a, b), torch.matmul(a, b)
    overheads = []
    for _ in range(5):  # the machine is noisy: one quiet round is enough
        overheads.append(_call_overhead_us(kernel, torch.matmul, (a, b)))
        if overheads[-1] < 20.0:
            break
    assert min(overheads) < 20.0, f"kernel call overhead {overheads} us over torch.matmul"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_kernels_run_on_cuda_like_on_cpu():
    scopes = [ops.conv_transpose2d(Tensor("x", (1, 2, 5, 5)), Tensor("w", (2, 3, 3, 3)), stride=2),
              ops.softmax(Tensor("x", (4, 9)), dim=1),
              ops.reshape(ops.matmul(Tensor("a", (4, 6)), Tensor("b", (6, 5))), 2, 10)]
    for scope in scopes:
        kernel = codegen.lower(scope)
        args = [torch.randn(*t.shape) for t in (scope_inputs(scope)[n] for n in kernel.input_names)]
        want = kernel(*args)
        got = kernel(*(a.cuda() for a in args))
        assert got.device.type == "cuda"
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)
