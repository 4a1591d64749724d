"""One torch function at given shapes → one ``ir`` expression, through the backend's path.

``ollie derive --torch`` and the REPL turn a PyTorch expression into the expression the
e-graph starts from. They capture it exactly as the backend does: traced to core ATen with
the same decompositions (on fake tensors: no data is allocated, any shape works), translated
by the same table. Nodes used twice are composed into each reader as one shared scope, so
the expression is the whole computation (a DAG).
"""
from __future__ import annotations

import logging
from typing import Callable, Mapping

import torch
import torch.fx as fx

import ir
from ollie.capture import regions


class CaptureError(ValueError):
    """The function has no single expression: the message names the node that stopped it."""


def capture_expression(fn: Callable, shapes: Mapping[str, tuple[int, ...]],
                       dtype: torch.dtype = torch.float32) -> ir.Scope:
    """The expression ``fn`` computes from inputs named and shaped as ``shapes``."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    from ollie.capture.compilers import decompositions

    mode = FakeTensorMode()
    with mode:
        inputs = [torch.empty(tuple(s), dtype=dtype) for s in shapes.values()]
    quiet = logging.getLogger("torch._subclasses.fake_tensor")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # a shape error is the user's, reported in one line
    try:
        gm = make_fx(fn, decomposition_table=decompositions(), tracing_mode="fake")(*inputs)
    finally:
        quiet.setLevel(level)
    for node, name in zip([n for n in gm.graph.nodes if n.op == "placeholder"], shapes):
        node._rename(name)  # the user's names in the expression
    gm.graph.eliminate_dead_code()
    outputs = torch.utils._pytree.tree_leaves(gm.graph.output_node().args[0])
    if len(outputs) != 1 or not isinstance(outputs[0], fx.Node):
        raise CaptureError("the expression must compute one tensor")
    out = outputs[0]
    if out.op == "placeholder":
        raise CaptureError(f"the expression is just the input tensor {out.name!r}; "
                           "apply an operation to it")
    translation = regions.translate(gm, compose_shared=True)
    for region in translation.regions:
        if region.root is out:
            return region.expr
    stuck = next((f"{regions.describe(n)}: {why}" for n, why in translation.left.items()),
                 "no operator of the expression has a row in the ATen table")
    raise CaptureError(f"Ollie cannot express this as one expression ({stuck})")
