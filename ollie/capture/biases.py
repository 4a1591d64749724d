"""The biases of a generated rule's contractions (``ollie.capture.generated_rules``): an
``addmm``'s (a linear layer's, one per output column, added to every row) and a
convolution's (one per output channel, added at every position).

A rule's side that adds, subtracts, scales and concatenates contractions along their outputs
(columns of matrices, channels of convolutions) is, with biases, its value without them plus
the biases put through the same arithmetic: one vector, which the other side's contraction at
its root adds as its own bias (an unbiased contraction's part of it: zeros). A matrix's bias
also goes through a product on the right, ``(Y + 1bᵀ)V = YV + 1(bᵀV)``: so two linear layers
with nothing between are one, ``x(W2W1)ᵀ + (W2b1 + b2)``, both folded from the weights. A bias
that would go through anything else (a product's right operand, a convolution, a transpose, a
slice, a concatenation of rows) gives no such vector, and the rule is not applied there.
"""
from __future__ import annotations

import torch
import torch.fx as fx

from ollie.capture import conv_terms
from ollie.capture.slice_pieces import rank, shape_of

aten = torch.ops.aten
AT = "at"  # binding key (AT, path): the node the source's operator at that path matched
REFUSED = "refused"  # biases that the other side cannot carry
CONTRACTIONS = ("mm", conv_terms.CONV)
OUTPUTS_CAT = {"matrix": "cat1", "feature": "cat0"}  # the concatenation of outputs


def bias(n) -> fx.Node | None:
    """The bias vector of ``n``, an addmm (without ``beta``/``alpha``) or a convolution; None
    for anything else, and where it has none."""
    if not isinstance(n, fx.Node) or n.op != "call_function":
        return None
    if n.target == aten.addmm.default:
        return n.args[0] if not n.kwargs and rank(n.args[0]) == 1 else None
    return n.args[2] if conv_terms.settings(n) is not None else None


def carried(target: tuple, binding: dict, terms: list[tuple], scale=None):
    """How the biases of the contractions that a rule's source matched add to its value, a plan
    of ``build``: ``("bias", vector)``, or ``add``, ``sub``, ``neg``, ``scale`` and ``cat`` of
    plans, and ``times`` (a bias through a product on the right). None where none has a bias;
    ``REFUSED`` where a bias goes elsewhere than sums, differences, scales, concatenations of
    outputs and products on the right, or ``target``'s root is no contraction. ``terms``: the
    source's terms matched (a sum's, else the source itself) with their paths; ``scale``:
    the number of the source's ``scale``."""
    try:
        plan = None
        for term, path in terms:
            plan = plus(plan, _plan(term, binding, path, scale))
    except ValueError:
        return REFUSED
    return plan if plan is None or target[0] in CONTRACTIONS else REFUSED


def _plan(pattern: tuple, binding: dict, path: tuple, scale):
    if pattern[0] == "var":
        return None
    below = [_plan(p, binding, path + (i,), scale) for i, p in enumerate(pattern[1:])]
    op = pattern[0]
    if op in CONTRACTIONS:
        vector = bias(binding[AT, path])
        own = vector and ("bias", vector)
        if not any(below):
            return own
        if op != "mm" or below[1] is not None:
            raise ValueError("a bias under a convolution, or under a product's right operand")
        # (Y + 1bᵀ)V = YV + 1(bᵀV): a bias on every row stays one through a product
        return plus(("times", below[0], _node(pattern[2], binding, path + (1,))), own)
    if not any(below):
        return None
    if op == "add":
        return plus(*below)
    if op == "sub":
        a, b = below
        return ("neg", b) if a is None else a if b is None else ("sub", a, b)
    if op == "scale":
        return ("scale", scale, below[0])
    if op == OUTPUTS_CAT.get(conv_terms.kind(pattern)):
        nodes = [_node(p, binding, path + (i,)) for i, p in enumerate(pattern[1:])]
        return ("cat", *(p or ("zeros", _outputs(n)) for p, n in zip(below, nodes)))
    raise ValueError(f"a bias under {op}")


def _node(pattern: tuple, binding: dict, path: tuple) -> fx.Node:
    """The node a source's operand ``pattern`` at ``path`` matched."""
    return binding[pattern[1]] if pattern[0] == "var" else binding[AT, path]


def _outputs(n: fx.Node) -> int:
    """The outputs (dim 1: columns, channels) of an unbiased part of a concatenation."""
    outputs = shape_of(n)[1]
    if not isinstance(outputs, int):
        raise ValueError("a concatenation's outputs are a size symbol")
    return outputs


def plus(a, b):
    """The plan of the sum of two plans."""
    return b if a is None else a if b is None else ("add", a, b)


def build(graph: fx.Graph, plan) -> fx.Node | None:
    """The bias vector of ``plan`` (``carried``), computed in ``graph`` (from weights alone
    in a model: folded once)."""
    if plan is None or plan[0] == "bias":
        return plan and plan[1]
    if plan[0] == "scale":
        (op, number), inner = plan[1:]
        return graph.call_function(op, (build(graph, inner), number))
    if plan[0] == "times":  # bᵀV, as a one-row product (Inductor lowers no ``mv``: its
        # decompositions take it apart before Ollie sees a graph)
        row = graph.call_function(aten.unsqueeze.default, (build(graph, plan[1]), 0))
        product = graph.call_function(aten.mm.default, (row, plan[2]))
        return graph.call_function(aten.squeeze.dim, (product, 0))
    if plan[0] == "neg":
        return graph.call_function(aten.neg.default, (build(graph, plan[1]),))
    if plan[0] == "cat":  # an unbiased part's zeros: of the other part's dtype and device
        built = [None if p[0] == "zeros" else build(graph, p) for p in plan[1:]]
        like = next(b for b in built if b is not None)
        parts = [graph.call_function(aten.new_zeros.default, (like, [p[1]])) if b is None
                 else b for b, p in zip(built, plan[1:])]
        return graph.call_function(aten.cat.default, (parts, 0))
    op = {"add": aten.add.Tensor, "sub": aten.sub.Tensor}[plan[0]]
    return graph.call_function(op, tuple(build(graph, p) for p in plan[1:]))
