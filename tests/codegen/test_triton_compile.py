"""Every kind of generated kernel compiles as GPU code for sm_90 (H100/H200), fp32 and fp16.

Triton's compiler runs without a GPU (``codegen.triton.aot``), so this checks on the CPU what
the interpreter cannot: typing, ``tl.dot`` shape rules, layouts, PTX. Skipped where Triton's
NVIDIA toolchain is missing.
"""
import pytest

from codegen.triton.aot import compile_kernels
from ir import Tensor, ops, parse


@pytest.fixture(scope="module")
def toolchain():
    try:
        compile_kernels(ops.relu(Tensor("x", (8,))))
    except Exception as e:  # no NVIDIA backend / ptxas in this environment
        pytest.skip(f"Triton cannot compile for sm_90 here: {type(e).__name__}: {e}")


CASES = {
    "map_gather": lambda: ops.reshape(ops.permute(ops.pad(Tensor("x", (4, 6, 5)), (1, 1)),
                                                  (2, 0, 1)), 7, 24),
    "reduce": lambda: ops.amax(ops.exp(Tensor("x", (5, 7, 3))), dim=(0, 2)),
    "row": lambda: ops.log_softmax(ops.tanh(Tensor("x", (6, 300))), dim=-1),
    "row_reduction_root": lambda: parse("x: f32[7, 40]\nM[i] = max[j] x[i,j]\n"
                                        "T[i] = sum[j] exp(x[i,j] - M[i])"),
    "dot_conv_epilogue": lambda: ops.relu(ops.conv2d(
        Tensor("x", (2, 8, 10, 10)), Tensor("w", (16, 8, 3, 3)), Tensor("b", (16,)), padding=1)),
    "dot_conv_transpose": lambda: ops.conv_transpose2d(
        Tensor("x", (1, 16, 4, 4)), Tensor("w", (16, 8, 4, 4)), stride=2, padding=1),
    "g2bmm": lambda: ops.g2bmm(Tensor("q", (2, 100, 64)), Tensor("k", (2, 100, 64)), 10, 4),
    "gbmm": lambda: ops.gbmm(Tensor("a", (2, 100, 21)), Tensor("v", (2, 100, 64)), 10, 4),
}


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_kernels_compile_for_sm90(toolchain, name, dtype):
    compiled = compile_kernels(CASES[name](), arch=90, dtype=dtype)
    assert compiled and all(k.asm.get("cubin") for k in compiled.values())
