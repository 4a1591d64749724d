"""Every kind of generated Triton kernel computes what ``ir.evaluate`` says.

Each test runs under Triton's interpreter on the CPU (fp32, small shapes) and, marked
``gpu``, compiled on a CUDA device when there is one. ``forms`` pins which kernels the
planner chose (``Kernel.forms``), so a test also states how the scopes were grouped.
"""
import pytest
import torch

import codegen
from ir import Scope, Tensor, accesses, ops, parse

from triton_helpers import DEVICES, check_triton, use_device


@pytest.fixture(params=DEVICES)
def device(request, monkeypatch):
    use_device(monkeypatch, request.param)
    return request.param


# -- eOperators and fused memory-bound chains: map kernels ---------------------------------------
def test_nested_elementwise_scopes_become_one_map_kernel(device):
    x, y, z = Tensor("x", (3, 5, 7)), Tensor("y", (3, 5, 7)), Tensor("z", (5, 7))
    e = ops.relu(ops.add(ops.mul(x, y), ops.exp(z)))  # z broadcast along dim 0
    check_triton(e, device, forms=("map",))


def test_every_unary_and_binary_operator(device):
    e = parse("x: f32[4, 9]\ny: f32[4, 9]\n"
              "T[i,j] = tanh(x[i,j]) + sigmoid(y[i,j]) - abs(x[i,j]) * sqrt(y[i,j]) "
              "+ max(x[i,j], y[i,j]) / (2 + exp(min(x[i,j], y[i,j]))) + log(1 + abs(y[i,j])) "
              "+ recip(2 + relu(x[i,j])) - -y[i,j]")
    check_triton(e, device, forms=("map",))


def test_layout_transform_permute_reshape(device):
    e = ops.reshape(ops.permute(Tensor("x", (4, 6, 5)), (2, 0, 1)), 5, 24)
    check_triton(e, device, forms=("map",))


def test_zero_padding_and_slices_read_zero_out_of_bounds(device):
    x = Tensor("x", (3, 8))
    e = ops.add(ops.pad(ops.slice(x, 1, 2, 7), (2, 3)), 1.0)  # (3, 10): zeros around
    check_triton(e, device, forms=("map",))


def test_concatenation_by_shifted_reads(device):
    e = ops.cat([Tensor("a", (2, 3)), Tensor("b", (2, 4)), Tensor("c", (2, 1))], dim=1)
    check_triton(e, device, forms=("map",))


def test_floor_division_and_modulus_of_negative_numerators(device):
    # Triton's // and % truncate toward zero; the IR's are Python's (floor)
    e = parse("x: f32[6, 5]\nT[i,j] = x[(i-5)//2+3, (j-7)%5] + x[(i+j-4)%6, (2*j-3)//3] "
              "where i in 0:9, j in 0:8")
    check_triton(e, device, forms=("map",))


def test_gather_eoperator_upsample_with_floor_and_mod(device):
    # conv_transpose2d's zero-upsampling gather on its own
    up = ops.conv_transpose2d(Tensor("x", (2, 3, 4, 4)), Tensor("w", (3, 2, 2, 2)), stride=2)
    gather = next(a.source for a in accesses(up.body) if isinstance(a.source, Scope))
    check_triton(gather, device, forms=("map",))


def test_iterator_ranges_not_starting_at_zero(device):
    e = parse("x: f32[10]\nS[i] = x[i-3] * 2 where i in 3:9\nT[j] = S[j+2] + S[j+5] "
              "where j in 0:6")
    check_triton(e, device)


# -- reductions and offset-reductions: reduce kernels ---------------------------------------------
@pytest.mark.parametrize("make", [
    lambda x: ops.sum(ops.exp(x), dim=1),
    lambda x: ops.amax(x, dim=(0, 2)),
    lambda x: ops.amin(x, dim=2, keepdim=True),
    lambda x: ops.mean(x),
], ids=["sum_of_exp", "amax", "amin_keepdim", "mean_all"])
def test_reductions(device, make):
    check_triton(make(Tensor("x", (5, 7, 3))), device, forms=("reduce",))


def test_offset_reduction_with_zero_padding(device):
    # a 1-D stencil: sum over three shifted reads, out-of-bounds reads are 0
    e = parse("x: f32[2, 50]\nT[b,i] = sum[r] x[b,i+2*r-2] * 0.5 where i in 0:50, r in 0:3")
    check_triton(e, device, forms=("reduce",))


def test_reduction_with_an_elementwise_epilogue(device):
    x, b = Tensor("x", (5, 7, 3)), Tensor("b", (3,))
    check_triton(ops.relu(ops.add(ops.sum(x, dim=1), b)), device, forms=("reduce",))


def test_matrix_vector_product_is_a_reduction(device):
    check_triton(ops.mv(Tensor("a", (33, 20)), Tensor("v", (20,))), device, forms=("reduce",))


def test_long_reduction_loops_over_blocks(device):
    check_triton(ops.sum(Tensor("x", (3, 700)), dim=1), device, forms=("reduce",))


# -- fused row-wise chains: row kernels -----------------------------------------------------------
@pytest.mark.parametrize("dim", [-1, 0])
def test_softmax_is_one_row_kernel(device, dim):
    check_triton(ops.softmax(Tensor("x", (6, 33)), dim=dim), device, forms=("row",))


def test_log_softmax_of_an_elementwise_input(device):
    check_triton(ops.log_softmax(ops.tanh(Tensor("x", (4, 3, 20))), dim=2), device,
                 forms=("row",))


def test_layer_norm_like_chain_reads_its_row_once(device):
    e = parse("x: f32[5, 24]\nM[i] = sum[j] x[i,j] / 24\nD[i,j] = x[i,j] - M[i]\n"
              "V[i] = sum[j] D[i,j] * D[i,j] / 24\nT[i,j] = D[i,j] / sqrt(V[i] + 0.00001)")
    check_triton(e, device, forms=("row",))


def test_reduction_of_a_reduction_along_the_row(device):
    e = parse("x: f32[7, 40]\nM[i] = max[j] x[i,j]\nT[i] = sum[j] exp(x[i,j] - M[i])")
    check_triton(e, device, forms=("row",))


# -- contractions: the tl.dot template --------------------------------------------------------------
@pytest.mark.parametrize("make", [
    lambda: ops.matmul(Tensor("a", (37, 29)), Tensor("b", (29, 41))),
    lambda: ops.matmul(Tensor("a", (3, 20, 9)), Tensor("b", (3, 9, 17))),
    lambda: ops.matmul(ops.transpose(Tensor("a", (29, 37)), 0, 1), Tensor("b", (29, 18))),
    lambda: ops.einsum("bij,jkc->bikc", Tensor("a", (2, 6, 5)), Tensor("b", (5, 7, 3))),
    lambda: ops.einsum("ijk,jkl->il", Tensor("a", (9, 4, 6)), Tensor("b", (4, 6, 11))),
], ids=["mm", "bmm", "transposed_operand", "einsum_batch_free", "two_contracted"])
def test_contractions_use_tl_dot(device, make):
    check_triton(make(), device, forms=("dot",))


def test_linear_with_bias_fuses_the_bias_into_the_epilogue(device):
    e = ops.linear(Tensor("x", (21, 16)), Tensor("w", (12, 16)), Tensor("b", (12,)))
    check_triton(e, device, forms=("dot",))


def test_conv_bias_relu_is_an_implicit_gemm_with_epilogue(device):
    e = ops.relu(ops.conv2d(Tensor("x", (2, 3, 9, 9)), Tensor("w", (8, 3, 3, 3)),
                            Tensor("b", (8,)), padding=1))
    check_triton(e, device, forms=("dot",))


def test_strided_dilated_grouped_conv(device):
    e = ops.conv2d(Tensor("x", (1, 4, 11, 11)), Tensor("w", (8, 2, 3, 3)), stride=2,
                   padding=2, dilation=2, groups=2)
    check_triton(e, device)


def test_conv_transpose_reads_the_upsampling_gather_inside_the_gemm(device):
    e = ops.conv_transpose2d(Tensor("x", (1, 6, 4, 4)), Tensor("w", (6, 5, 4, 4)), stride=2,
                             padding=1)
    check_triton(e, device, forms=("dot",))


def test_attention_is_dot_row_dot(device):
    q, k, v = Tensor("q", (2, 16, 8)), Tensor("k", (2, 16, 8)), Tensor("v", (2, 16, 8))
    e = ops.matmul(ops.softmax(ops.matmul(q, ops.transpose(k, 1, 2)), dim=-1), v)
    check_triton(e, device, forms=("dot", "row", "dot"))


# -- banded products without the dense product ----------------------------------------------------
@pytest.mark.parametrize("w,d", [(2, 1), (3, 3)])
def test_g2bmm(device, w, d):
    e = ops.g2bmm(Tensor("q", (2, 23, 8)), Tensor("k", (2, 23, 8)), w, d)
    check_triton(e, device, forms=("g2bmm",))


@pytest.mark.parametrize("w,d", [(2, 1), (3, 3)])
def test_gbmm(device, w, d):
    e = ops.gbmm(Tensor("a", (2, 23, 2 * w + 1)), Tensor("v", (2, 23, 8)), w, d)
    check_triton(e, device, forms=("gbmm",))


def test_longformer_band_softmax_band(device):
    q, k, v = Tensor("q", (2, 20, 8)), Tensor("k", (2, 20, 8)), Tensor("v", (2, 20, 8))
    e = ops.gbmm(ops.softmax(ops.g2bmm(q, k, 3, 2), dim=-1), v, 3, 2)
    check_triton(e, device, forms=("g2bmm", "row", "gbmm"))


# -- planning -------------------------------------------------------------------------------------
def test_a_scope_read_by_two_kernels_is_materialised_once(device):
    x, w1, w2 = Tensor("x", (16, 16)), Tensor("w1", (16, 16)), Tensor("w2", (16, 16))
    h = ops.exp(x)  # read by both matmuls: one buffer, not recomputed
    e = ops.add(ops.matmul(h, w1), ops.matmul(h, w2))
    k = check_triton(e, device)
    assert k.forms.count("map") == 1 and k.forms.count("dot") == 2


def test_empty_range_gives_zeros(device):
    e = parse("x: f32[4]\nT[i] = sum[r] x[i+r] where i in 0:4, r in 0:0")
    check_triton(e, device, forms=("empty",))


def test_kernel_takes_inputs_by_name(device, monkeypatch):
    e = ops.add(Tensor("a", (4,)), Tensor("b", (4,)))
    k = codegen.lower(e, backend="triton")
    a, b = torch.arange(4.0, device=device), torch.ones(4, device=device)
    assert torch.equal(k(b=b, a=a).cpu(), torch.arange(1.0, 5.0))


# -- fp16 / bf16 on a GPU -------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("make", [
    lambda: ops.matmul(Tensor("a", (70, 64)), Tensor("b", (64, 50))),
    lambda: ops.softmax(Tensor("x", (8, 300)), dim=-1),
    lambda: ops.relu(ops.conv2d(Tensor("x", (2, 16, 12, 12)), Tensor("w", (32, 16, 3, 3)),
                                padding=1)),
    lambda: ops.g2bmm(Tensor("q", (2, 64, 32)), Tensor("k", (2, 64, 32)), 8, 2),
    lambda: ops.sum(Tensor("x", (9, 500)), dim=1),
], ids=["mm", "softmax", "conv", "g2bmm", "sum"])
def test_half_precision_on_gpu(monkeypatch, dtype, make):
    # tolerances: fp16 rel/abs 2e-2, bf16 5e-2 (fp32 accumulation, inputs rounded first)
    use_device(monkeypatch, "cuda")
    check_triton(make(), "cuda", dtype=dtype)


def test_interpreter_works_when_triton_was_imported_first(tmp_path):
    # Triton binds TRITON_INTERPRET when a @triton.jit function is defined; generated kernels
    # use only core builtins, so a process that imported triton before setting the variable
    # (as any test session may) still interprets them.
    import subprocess
    import sys
    script = tmp_path / "run.py"
    script.write_text(
        "import os, triton, triton.language, torch\n"
        "os.environ['TRITON_INTERPRET'] = '1'\n"
        "import codegen\nfrom ir import Tensor, ops\n"
        "e = ops.softmax(ops.tanh(ops.sigmoid(Tensor('x', (3, 5)))), dim=-1)\n"
        "y = codegen.lower(e, backend='triton')(torch.zeros(3, 5))\n"
        "assert torch.allclose(y, torch.full((3, 5), 0.2)), y\n")
    root = str(__import__("pathlib").Path(codegen.__file__).parents[1])
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env={**__import__("os").environ, "PYTHONPATH": root}, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]


def test_banded_products_in_any_layout_and_scaled(device):
    # ir.patterns matches the band whatever the dim order; a constant factor is matched too
    g2bmm_permuted = parse("q: f32[6, 2, 17]\nk: f32[17, 2, 6]\n"
                           "T[j,b,i] = sum[c] q[c,b,i] * k[i+2*j-4,b,c] where j in 0:5")
    check_triton(g2bmm_permuted, device, forms=("g2bmm",))
    scaled = parse("a: f32[2, 17, 5]\nv: f32[2, 17, 6]\n"
                   "T[b,i,c] = sum[j] a[b,i,j] * v[b,i+2*j-4,c] * 0.125")
    check_triton(scaled, device, forms=("gbmm",))


def test_a_scope_without_inputs(device):
    e = parse("T[i,j] = 1.5 * 2 where i in 0:3, j in 0:4")
    k = codegen.lower(e, backend="triton")
    assert k.forms == ("map",) and torch.equal(k().cpu(), torch.full((3, 4), 3.0))


def test_what_the_backend_cannot_lower_raises_not_implemented_naming_the_scope():
    huge = ops.exp(Tensor("big", (1 << 16, 1 << 16)))  # int32 offsets cannot address it
    with pytest.raises(NotImplementedError, match="big"):
        codegen.lower(huge, backend="triton")
