"""What generated launchers call besides torch and triton: dtypes and device checks.

``namespace(interpreted)`` is the set of helpers a launcher's source sees: ``_types``
(compute dtype, ``tl.dot`` operand dtype and precision for the inputs' dtype), ``_device``
(where a kernel without inputs runs) and ``_launch`` (the tuner's launch).
"""
from __future__ import annotations

import torch
import triton.language as tl

from codegen.triton.tuning import TUNER

DOT_DTYPES = {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16,
              torch.float32: tl.float32, torch.float64: tl.float64}


def types(ref: torch.Tensor, interpreted: bool, chain: bool = False):
    """``(ACC, DOT_DTYPE, DOT_PRECISION)`` for inputs like ``ref``: accumulate in fp32 (fp64
    for fp64); tl.dot on the inputs' dtype, fp32 as TF32 only where torch allows it. A
    ``chain`` of kernels on float16 / bfloat16 inputs keeps its intermediates in float32
    (:func:`intermediate`), so its products take float32 operands too."""
    if ref.dtype not in DOT_DTYPES:
        raise TypeError(f"the triton backend computes on floating-point tensors, got {ref.dtype}")
    if ref.device.type != "cuda" and not interpreted:
        raise RuntimeError(
            f"generated Triton kernels run on CUDA tensors, got a {ref.device.type} tensor; "
            "to run them on the CPU set TRITON_INTERPRET=1 before lowering (slow, for tests)")
    acc = tl.float64 if ref.dtype == torch.float64 else tl.float32
    dtype = torch.float32 if chain and ref.dtype in LOW else ref.dtype
    tf32 = dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32
    return acc, DOT_DTYPES[dtype], "tf32" if tf32 else "ieee"


LOW = (torch.float16, torch.bfloat16)


def intermediate(ref: torch.Tensor) -> torch.dtype:
    """The dtype of an intermediate buffer: float32 for float16 / bfloat16 inputs (a
    reassociated chain stays in range where eager's order did), else the inputs' dtype."""
    return torch.float32 if ref.dtype in LOW else ref.dtype


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


MODULE = "ollie_generated_triton"  # __name__ of generated modules: Triton's JIT reads
#                                   the module of every @triton.jit function it calls


def namespace(interpreted: bool) -> dict:
    return {"__name__": MODULE, "_types": lambda ref, chain=False: types(ref, interpreted, chain),
            "_intermediate": intermediate, "_device": device, "_launch": TUNER.launch}
