"""Convolutions as the generated rules' ``conv`` (``derivations.synthesis.graph``): how
``ollie.capture.generated_rules`` reads, sizes and builds them in an ATen graph.

A rule's filters (``F``, ``G``, ``H``: out channels × in channels) are weights of
``aten.convolution`` (out, in, kernel sizes) and its images (``A``, ``B``, ``C``: channels ×
positions) its inputs (batch, channels, positions), of 1, 2 or 3 spatial dims.
``conv(F, A)`` is a convolution of groups 1, not transposed; every convolution of one match
has one kernel size, stride, padding and dilation (the rule's proof takes them equal), every
filter that kernel size and every image one batch and image size (else elementwise arithmetic
would broadcast). Concatenations and sums keep their kind (``graph_terms.kind``): an image's
or a convolution's channels are dim 1; a filter's rows are dim 0, its columns dim 1.

A convolution's bias is a constant per output channel added to ``conv(F, A)``: where a
rule's side adds, subtracts, scales and concatenates its convolutions (no product of them),
their biases go through the same arithmetic to one vector (``generated_rules._biases``),
which the other side's convolution adds as its bias.
"""
from __future__ import annotations

import math

import sympy
import torch
import torch.fx as fx

from derivations.synthesis import graph_terms
from ollie.capture.slice_pieces import rank, shape_of

aten = torch.ops.aten
CONV = "conv"  # the binding of a match's convolutions: (kernel size, stride, padding, dilation)
CONV_OUT = "conv_out"  # ... and of their batch and output sizes


def kind(pattern: tuple) -> str:
    """The kind of a rule's term (``matrix``, ``filter``, ``image`` or ``feature``)."""
    return graph_terms.kind(pattern) or "matrix"


def children(n: fx.Node, op: str, of: str) -> list | None:
    """The operands of ``n`` where it is ``op`` on terms of kind ``of`` (not a matrix):
    ``conv`` as [filter, image], ``cat0``/``cat1`` of two tensors along that kind's dim."""
    if op == CONV and settings(n) is not None:
        return [n.args[1], n.args[0]]
    if op in ("cat0", "cat1") and n.target == aten.cat.default and rank(n) >= 3 and \
            len(n.args[0]) == 2:
        dim = (n.args[1] if len(n.args) > 1 else 0) % rank(n)
        return list(n.args[0]) if dim == channel_dim(op, of) else None
    return None


def channel_dim(op: str, of: str) -> int:
    """The dim that ``op`` (a concatenation) cuts on a term of kind ``of``."""
    if of == "filter":
        return int(op[-1])
    return 1 if op == "cat0" else -1  # (an image's positions are not cut)


def settings(n) -> tuple | None:
    """(kernel size, stride, padding, dilation) of a convolution node of groups 1, not
    transposed (with a bias or without: ``bias``); None for anything else."""
    if not isinstance(n, fx.Node) or n.op != "call_function" or \
            n.target != aten.convolution.default or n.kwargs or len(n.args) != 9:
        return None
    x, w, bias, stride, padding, dilation, transposed, output_padding, groups = n.args
    if transposed or groups != 1 or rank(w) < 3 or rank(x) != rank(w):
        return None
    return shape_of(w)[2:], *(tuple(map(_expr, v)) for v in (stride, padding, dilation))


def bias(n) -> fx.Node | None:
    """The bias of the convolution ``n`` (``settings``), None where it has none."""
    return n.args[2] if settings(n) is not None else None


def operand_fits(name: str, node) -> bool:
    """Whether ``node`` can be the rule's operand ``name``: a tensor of spatial dims for a
    filter or an image, a matrix otherwise."""
    if not isinstance(node, fx.Node):
        return False
    return rank(node) >= 3 if is_convolution_operand(name) else rank(node) == 2


def is_convolution_operand(name: str) -> bool:
    return name in graph_terms.FILTERS | graph_terms.IMAGES


def agree(binding: dict) -> bool:
    """Whether the bound filters have the convolutions' kernel size and the bound images one
    batch and image size (and so one rank)."""
    filters = {shape_of(b)[2:] for v, b in binding.items() if v in graph_terms.FILTERS}
    images = {(shape_of(b)[0], *shape_of(b)[2:]) for v, b in binding.items()
              if v in graph_terms.IMAGES}
    if CONV in binding:
        filters.add(binding[CONV][0])
    return len(filters) <= 1 and len(images) <= 1


def matrix_shape(name: str, node) -> tuple:
    """The operand's two sizes as the rule reads them: (out, in) channels of a filter,
    (channels, the rest) of an image."""
    s = shape_of(node)
    return (s[1], (s[0], *s[2:])) if name in graph_terms.IMAGES else s[:2]


def cost_shape(name: str, node) -> tuple:
    """The operand's sizes for the costs: a filter's (out channels, in channels · kernel
    area), an image's (channels, batch · image area)."""
    s = shape_of(node)
    if name in graph_terms.FILTERS:
        return s[0], s[1] * math.prod(s[2:])
    return s[1], s[0] * math.prod(s[2:])


def output_sizes(n: fx.Node) -> tuple:
    """A convolution's batch and output image sizes: one for every convolution of a match."""
    s = shape_of(n)
    return (s[0], *s[2:])


def output_positions(binding: dict):
    """Batch · output positions of the match's convolutions. At symbolic sizes an output
    size is an expression of its input's (``s2 - s4 + 5``, a floor where strided): each
    becomes a symbol of its own, at least 0, so that a cost difference with no negative
    coefficient is one at every size (every convolution of a match has these sizes)."""
    return math.prod(d if isinstance(d, int) or d.is_Symbol else
                     sympy.Symbol(f"conv_out{i}", nonnegative=True)
                     for i, d in enumerate(binding[CONV_OUT]))


def build(graph: fx.Graph, op: str, args: list, of: str, binding: dict,
          bias: fx.Node | None = None) -> fx.Node:
    """The node of ``op`` (``conv``, adding ``bias``, or a concatenation) on ``args``, of
    kind ``of``."""
    if op == CONV:
        _, stride, padding, dilation = binding[CONV]
        return graph.call_function(aten.convolution.default, (
            args[1], args[0], bias, list(stride), list(padding), list(dilation), False,
            [0] * len(stride), 1))
    return graph.call_function(aten.cat.default, (args, channel_dim(op, of)))


# -- biases --------------------------------------------------------------------------------------
REFUSED = "refused"  # biases that a rule's other side cannot carry


def bias_plan(n, children, scaled):
    """How the biases of the convolutions under ``n`` (a matched node of kind feature) add to
    its value: ``("bias", vector)``, or ``add``, ``sub``, ``neg``, ``scale`` and ``cat`` of
    plans (an unbiased convolution's piece of a concatenation: ``("zeros", channels)``); None
    where none has a bias. ``children(n, op)`` and ``scaled(n)`` read ATen as the rules'
    operators. Raises ValueError where a bias goes through a product (it does not add
    through) or zeros would have a symbolic number of channels."""
    if settings(n) is not None:
        return None if bias(n) is None else ("bias", bias(n))
    if scaled(n) is not None:
        number, x = scaled(n)
        plan = bias_plan(x, children, scaled)
        return plan and ("scale", number, plan)
    for op in ("add", "sub", "cat0"):
        pieces = children(n, op)
        if pieces is not None:
            a, b = (bias_plan(p, children, scaled) for p in pieces)
            if op == "add":
                return plus(a, b)
            if op == "sub":
                return a if b is None else ("neg", b) if a is None else ("sub", a, b)
            if a is None and b is None:
                return None
            return ("cat", *(("zeros", _channels(p)) if plan is None else plan
                             for plan, p in zip((a, b), pieces)))
    if any(bias_plan(p, children, scaled) for p in children(n, "mul") or []):
        raise ValueError("a bias under a product")
    return None


def plus(a, b):
    """The plan of the sum of two plans."""
    return b if a is None else a if b is None else ("add", a, b)


def bias_node(graph: fx.Graph, plan) -> fx.Node | None:
    """The bias vector of ``plan`` (``bias_plan``), computed in ``graph`` (from weights
    alone in a model: folded once)."""
    if plan is None or plan[0] == "bias":
        return plan and plan[1]
    if plan[0] == "scale":
        (op, number), inner = plan[1:]
        return graph.call_function(op, (bias_node(graph, inner), number))
    if plan[0] == "neg":
        return graph.call_function(aten.neg.default, (bias_node(graph, plan[1]),))
    if plan[0] == "cat":  # an unbiased piece's zeros: of the other piece's dtype and device
        built = [None if p[0] == "zeros" else bias_node(graph, p) for p in plan[1:]]
        like = next(b for b in built if b is not None)
        parts = [graph.call_function(aten.new_zeros.default, (like, [p[1]])) if b is None
                 else b for b, p in zip(built, plan[1:])]
        return graph.call_function(aten.cat.default, (parts, 0))
    op = {"add": aten.add.Tensor, "sub": aten.sub.Tensor}[plan[0]]
    return graph.call_function(op, tuple(bias_node(graph, p) for p in plan[1:]))


def _channels(n: fx.Node) -> int:
    """The channels of a convolutions' value (dim 1), a number (a filter's rows)."""
    channels = shape_of(n)[1]
    if not isinstance(channels, int):
        raise ValueError("a concatenation's channels are a size symbol")
    return channels


def _expr(size):  # (a SymInt compared would add a guard)
    return size.node.expr if isinstance(size, torch.SymInt) else size

