"""The contractions an ATen graph runs: the nodes torch's flop formulas count (matrix
products, convolutions, attention), with their work (flops, two per multiply-add) and
operand layouts.

Two readers: ``size_range`` compares the work of two forms as polynomials in the size
symbols, and ``graph_pass`` recognises a rewrite that leaves every contraction as it was
(same operators, work and layouts) and only reorders the memory-bound work around them,
which Inductor fuses in either form.
"""
from __future__ import annotations

import sympy
import torch
import torch.fx as fx
from torch.utils.flop_counter import flop_registry


def counted(nodes) -> list[tuple[fx.Node, sympy.Expr]]:
    """``(node, flops)`` of each contraction among ``nodes`` (from ``meta["val"]``;
    a polynomial in the size symbols where sizes are symbolic)."""
    out = []
    for n in nodes:
        formula = flop_registry.get(getattr(n.target, "overloadpacket", None))
        if n.op != "call_function" or formula is None:
            continue
        args, kwargs = fx.map_arg((n.args, n.kwargs), lambda a: a.meta.get("val"))
        count = formula(*args, **kwargs, out_val=n.meta.get("val"))
        out.append((n, count.node.expr if isinstance(count, torch.SymInt)
                    else sympy.Integer(count)))
    return out


def work(nodes) -> list[tuple[str, str]]:
    """The contractions' operators and flops, in a canonical order (no layouts)."""
    return sorted((str(n.target.overloadpacket), str(count)) for n, count in counted(nodes))


def signature(nodes) -> list[tuple]:
    """The contractions as comparable data: operator, flops, and the shapes and
    strides of their tensor operands, in a canonical order."""
    def layout(a):
        v = a.meta.get("val") if isinstance(a, fx.Node) else None
        return (tuple(v.shape), tuple(v.stride())) if isinstance(v, torch.Tensor) else None

    return sorted((str(n.target.overloadpacket), str(count),
                   tuple(layout(a) for a in n.args if isinstance(a, fx.Node)))
                  for n, count in counted(nodes))
