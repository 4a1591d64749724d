"""Capture: trace a torch function to a torch.fx graph of torch-level operations.

We trace with ``torch.fx.symbolic_trace`` rather than to aten: at this level ``einsum``,
``conv2d`` and ``softmax`` are still single nodes that map one-to-one onto the operator
library, so the expressions handed to the e-graph are the user's operators, not their
decompositions. Tracing is shape-agnostic; shapes come from running the graph once on the
real arguments (``ShapeProp``), so each (shapes, dtypes) signature gets its own plan.
"""
from __future__ import annotations

import inspect
import operator
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


# Integer arithmetic on shapes: ``b, n, c = x.shape``, ``x.size(0) * 2``, ``x.dim() - 1``.
# Layout queries are as fixed once the inputs' layouts are part of the signature, which
# ``ollie.optimize`` makes them for a function that uses them (see ``uses_layout``).
LAYOUT_QUERIES = {"stride", "storage_offset"}
SHAPE_QUERIES = {"size", "dim", "numel"} | LAYOUT_QUERIES
INT_OPS = {operator.getitem, operator.add, operator.sub, operator.mul, operator.floordiv,
           operator.mod, operator.neg}


class _ShapeAndStaticProp(ShapeProp):
    """ShapeProp that also keeps the values of nodes computed from shapes alone (``static``):
    they are the same for every call with the same input shapes, i.e. for a whole plan."""

    def run_node(self, n: fx.Node):
        result = super().run_node(n)
        if _is_shape_arithmetic(n) and _is_int_data(result):
            n.meta["static_value"] = result
        if isinstance(result, torch.Tensor):  # the layout as_strided reads (ollie.frontend)
            n.meta["storage_offset"] = result.storage_offset()
            n.meta["contiguous"] = result.is_contiguous()
        return result


def _is_shape_arithmetic(n: fx.Node) -> bool:
    if n.op == "call_method":
        return n.target in SHAPE_QUERIES
    if n.op != "call_function":
        return False
    if n.target is getattr:
        return n.args[1] in ("shape", "ndim")
    inputs = n.all_input_nodes
    return n.target in INT_OPS and bool(inputs) and all("static_value" in a.meta for a in inputs)


def _is_int_data(v) -> bool:
    if isinstance(v, (tuple, list)):
        return all(_is_int_data(x) for x in v)
    return isinstance(v, int) and not isinstance(v, bool)


def propagate_shapes(gm: fx.GraphModule, args: tuple) -> None:
    """Run ``gm`` once on ``args``; record each node's tensor metadata in ``node.meta`` and,
    for shape arithmetic, its value (``node.meta["static_value"]``)."""
    with torch.no_grad():
        _ShapeAndStaticProp(gm).propagate(*args)


def uses_layout(gm: fx.GraphModule) -> bool:
    """Whether values in ``gm`` depend on memory layout (strides, storage offsets), not only
    on shapes: then a plan holds only for inputs laid out as at capture."""
    return any((n.op == "call_method" and n.target in LAYOUT_QUERIES | {"as_strided"})
               or (n.op == "call_function" and n.target is torch.as_strided)
               for n in gm.graph.nodes)


def static_value(node: fx.Node):
    """The value of a shape-arithmetic node, or None."""
    return node.meta.get("static_value")


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
