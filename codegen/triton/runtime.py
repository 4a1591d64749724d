"""What generated launchers call besides torch and triton, and how their modules load.

``namespace(interpreted)`` is the set of helpers a launcher's source sees: ``_types``
(compute dtype, ``tl.dot`` operand dtype and precision for the inputs' dtype), ``_device``
(where a kernel without inputs runs) and ``_launch`` (the tuner's launch). ``load`` imports a
generated source as a module from a file, as Triton's JIT needs (it reads its kernels'
source and module), and as Inductor loads its generated code.
"""
from __future__ import annotations

import hashlib
import importlib.util
import tempfile
from pathlib import Path
from typing import Callable

import torch
import triton.language as tl

from codegen.kernel import intermediate_dtype
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
    dtype = intermediate_dtype(ref.dtype) if chain else ref.dtype
    tf32 = dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32
    return acc, DOT_DTYPES[dtype], "tf32" if tf32 else "ieee"


def intermediate(ref: torch.Tensor) -> torch.dtype:
    return intermediate_dtype(ref.dtype)


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


MODULE = "ollie_generated_triton"  # __name__ of generated modules: Triton's JIT reads
#                                   the module of every @triton.jit function it calls


def namespace(interpreted: bool) -> dict:
    return {"__name__": MODULE, "_types": lambda ref, chain=False: types(ref, interpreted, chain),
            "_intermediate": intermediate, "_device": device, "_launch": TUNER.launch}


_SOURCES = tempfile.TemporaryDirectory(prefix="ollie-triton-")  # removed when the process exits


def load(source: str, name: str, interpreted: bool) -> Callable:
    """Function ``name`` of ``source`` imported as a new module that sees ``namespace``."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:20]
    path = Path(_SOURCES.name) / f"{MODULE}_{digest}.py"
    if not path.exists():
        path.write_text(source)
    spec = importlib.util.spec_from_file_location(MODULE, path)
    module = importlib.util.module_from_spec(spec)
    vars(module).update(namespace(interpreted))
    spec.loader.exec_module(module)
    return getattr(module, name)
