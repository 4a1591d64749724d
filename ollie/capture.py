"""Capture: trace a torch function to a torch.fx graph of torch-level operations.

We trace with ``torch.fx.symbolic_trace`` rather than to aten: at this level ``einsum``,
``conv2d`` and ``softmax`` are still single nodes that map one-to-one onto the operator
library, so the expressions handed to the e-graph are the user's operators, not their
decompositions. Tracing is shape-agnostic; shapes come from running the graph once on the
real arguments (``ShapeProp``), so each (shapes, dtypes) signature gets its own plan.
"""
from __future__ import annotations

import inspect
from typing import Callable

import torch
import torch.fx as fx
from torch.fx.passes.shape_prop import ShapeProp


class CaptureError(Exception):
    """The function could not be traced; it will run eagerly."""


def trace(fn: Callable) -> fx.GraphModule:
    """Symbolically trace ``fn`` (a function or an ``nn.Module``) to a GraphModule."""
    try:
        return fx.symbolic_trace(fn)
    except Exception as e:  # fx raises many kinds (TraceError, TypeError, NotImplementedError)
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CaptureError(f"torch.fx could not trace {_name(fn)}: {first_line}") from e


def propagate_shapes(gm: fx.GraphModule, args: tuple) -> None:
    """Run ``gm`` once on ``args`` and record each node's tensor metadata in ``node.meta``."""
    with torch.no_grad():
        ShapeProp(gm).propagate(*args)


def tensor_meta(node: fx.Node):
    """(shape, dtype) of a node's value, or None if it is not a single tensor."""
    meta = node.meta.get("tensor_meta")
    if meta is None or not hasattr(meta, "shape"):
        return None
    return tuple(meta.shape), meta.dtype


def _name(fn) -> str:
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    try:
        file = inspect.getsourcefile(fn)
        line = inspect.getsourcelines(fn)[1]
        return f"{name} ({file}:{line})"
    except (TypeError, OSError):
        return name
