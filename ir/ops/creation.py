"""Tensors made from nothing: ``full``. A scope with a constant body and no inputs."""
from __future__ import annotations

from ir.nodes import Const

from ir.ops._util import OpError, axis_names, is_scalar, iters, scope

__all__ = ["full"]


def full(size, fill_value, *, dtype=None):
    """torch.full: a tensor of ``size`` holding ``fill_value``. ``dtype`` (a name such as
    ``"float32"``, or a torch dtype) defaults like torch's: bool for a bool, int64 for an int,
    float32 for a float. Values are held as numbers (the IR computes in floating point)."""
    if isinstance(size, int):
        size = (size,)
    size = tuple(size)
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in size):
        raise OpError("full", f"size must be non-negative ints, got {size!r}")
    if not (is_scalar(fill_value) or isinstance(fill_value, bool)):
        raise OpError("full", f"fill_value must be a Python number, got "
                              f"{type(fill_value).__name__}")
    if dtype is None:
        dtype = "bool" if isinstance(fill_value, bool) else \
            "int64" if isinstance(fill_value, int) else "float32"
    dtype = str(dtype).removeprefix("torch.")
    return scope("full", iters(axis_names(len(size)), size), (), Const(float(fill_value)),
                 dtype=dtype)
