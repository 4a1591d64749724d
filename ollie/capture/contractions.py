"""The contractions an ATen graph runs: the nodes torch's flop formulas count (matrix
products, convolutions, attention), with their work (flops, two per multiply-add) and
operand layouts.

Readers: ``size_range`` compares the work of two forms as polynomials in the size symbols;
``graph_pass`` recognises a rewrite that leaves the contractions as they were (same operators,
work and layouts, but for a negligible share of the work: ``unchanged``) and only reorders the
memory-bound work around them, which Inductor fuses in either form; ``region`` skips such
candidates before measuring them.
"""
from __future__ import annotations

from collections import Counter

import sympy
import torch
import torch.fx as fx
from torch.utils.flop_counter import flop_registry


def _count(target, args, kwargs, out_val) -> int | torch.SymInt | None:
    """Torch's flop formula for one call (None: not a contraction)."""
    formula = flop_registry.get(getattr(target, "overloadpacket", None))
    return None if formula is None else formula(*args, **kwargs, out_val=out_val)


def _flops(target, args, kwargs, out_val) -> sympy.Expr | None:
    count = _count(target, args, kwargs, out_val)
    return None if count is None else _expr(count)


def _expr(count: int | torch.SymInt) -> sympy.Expr:
    return count.node.expr if isinstance(count, torch.SymInt) else sympy.Integer(count)


def flops(node: fx.Node) -> int | torch.SymInt | None:
    """Torch's flop count of one node's call, from ``meta["val"]`` (None: not a
    contraction; a SymInt where sizes are symbolic)."""
    args, kwargs = fx.map_arg((node.args, node.kwargs), lambda a: a.meta.get("val"))
    return _count(node.target, args, kwargs, node.meta.get("val"))


def counted(nodes) -> list[tuple[fx.Node, sympy.Expr]]:
    """``(node, flops)`` of each contraction among ``nodes`` (from ``meta["val"]``;
    a polynomial in the size symbols where sizes are symbolic)."""
    out = []
    for n in nodes:
        count = flops(n) if n.op == "call_function" else None
        if count is not None:
            out.append((n, _expr(count)))
    return out


def work(nodes) -> list[tuple[str, str]]:
    """The contractions' operators and flops, in a canonical order (no layouts; a product
    with its bias added is the product: ``WITH_BIAS``)."""
    names = ((str(n.target.overloadpacket), count) for n, count in counted(nodes))
    return sorted((WITH_BIAS.get(name, name), str(count)) for name, count in names)


def signature(nodes) -> list[tuple]:
    """The contractions as comparable data: operator, flops, and the shapes and
    strides of their tensor operands, in a canonical order."""
    calls = ((n.target, *fx.map_arg((n.args, n.kwargs), lambda a: a.meta.get("val")),
              n.meta.get("val")) for n in nodes if n.op == "call_function")
    return call_signature(calls)


# a product with its bias added in the same call: the product is the contraction, the
# addition is work around it (mm then add is the same contraction)
WITH_BIAS = {"aten.addmm": "aten.mm", "aten.baddbmm": "aten.bmm", "aten.addmv": "aten.mv"}
BIAS_LAST = {"aten.convolution"}  # (input, weight, bias): the bias is work around it too


def call_signature(calls) -> list[tuple]:
    """``signature`` of calls as they reached the dispatcher: ``(operator, args, kwargs,
    output)`` with tensor values (``ollie.cost.lowered.trace_calls``). Symbolic sizes are
    taken at their hints, the sizes the graph was compiled for: a graph with symbolic sizes
    then compares with a program traced at those sizes, and no comparison adds a guard."""
    from ollie.capture.samples import concrete

    def layout(v):
        return (tuple(map(concrete, v.shape)), tuple(map(concrete, v.stride())))

    out = []
    for target, args, kwargs, val in calls:
        count = _flops(target, args, kwargs, val)
        if count is None:
            continue
        name = str(target.overloadpacket)
        operands = [a for a in args if isinstance(a, torch.Tensor)]
        if name in WITH_BIAS:
            name, operands = WITH_BIAS[name], operands[1:]
        elif name in BIAS_LAST:
            operands = operands[:2]
        sizes = [d for a in operands for d in a.shape if isinstance(d, torch.SymInt)]
        if count.free_symbols and sizes:
            count = count.xreplace(sizes[0].node.shape_env.backed_var_to_val)
        out.append((name, str(count), tuple(layout(a) for a in operands)))
    return sorted(out)


def unchanged(original: list, mine: list | None, share: float) -> bool:
    """Whether ``mine`` runs the ``original`` contractions (both ``signature``s) as they are,
    but for ones carrying under ``share`` of the original's work on either side: whatever
    operator runs those, they are too little of the work to matter (a squeeze-excite block's
    two products on a pooled vector, next to its convolutions)."""
    if not mine:
        return False
    if mine == original:
        return True
    try:
        total = sum(float(flops) for _, flops, _ in original)
        changed = max(sum(float(flops) * k for (_, flops, _), k in (a - b).items())
                      for a, b in ((Counter(original), Counter(mine)),
                                   (Counter(mine), Counter(original))))
    except ValueError:  # work in size symbols: only an exact match counts
        return False
    return changed < share * total
