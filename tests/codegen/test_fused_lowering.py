"""Lowering for a fusing compiler: a contraction without reuse becomes a product and a sum."""
import torch

import codegen
import ir

TRACE = "a: f32[16,16]\nb: f32[16,16]\nT[] = sum[i,k] a[i,k] * b[k,i]"
ROWS = "a: f32[16,8]\nb: f32[16,8]\nT[i] = sum[k] a[i,k] * b[i,k]"
MATMUL = "a: f32[16,8]\nb: f32[8,4]\nT[i,j] = sum[k] a[i,k] * b[k,j]"


def run(text, fused):
    kernel = codegen.lower(ir.parse(text), fused=fused)
    g = torch.Generator().manual_seed(0)
    tensors = {n: torch.randn(*t.shape, generator=g) for n, t in sorted(ir.inputs(
        ir.parse(text)).items())}
    return kernel, kernel(*[tensors[n] for n in kernel.input_names]), tensors


def test_a_trace_of_a_product_is_one_multiply_and_sum_when_fused():
    kernel, out, t = run(TRACE, fused=True)
    assert "dot" not in kernel.source and "reshape" not in kernel.source
    assert torch.allclose(out, torch.trace(t["a"] @ t["b"]), atol=1e-4)
    plain, _, _ = run(TRACE, fused=False)
    assert "dot" in plain.source  # without a fusing compiler the library call stays


def test_a_row_wise_dot_is_fused_and_correct():
    kernel, out, t = run(ROWS, fused=True)
    assert torch.allclose(out, (t["a"] * t["b"]).sum(1), atol=1e-5)
    assert "einsum" not in kernel.source and "bmm" not in kernel.source


def test_a_product_with_reuse_keeps_its_library_call():
    kernel, out, t = run(MATMUL, fused=True)
    assert "mm" in kernel.source
    assert torch.allclose(out, t["a"] @ t["b"], atol=1e-5)
