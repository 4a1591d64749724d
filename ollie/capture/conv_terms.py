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

A convolution's bias is carried through a rule by ``ollie.capture.biases``.
"""
from __future__ import annotations

import math
from functools import lru_cache

import sympy
import torch
import torch.fx as fx

from derivations.synthesis import graph_terms
from ollie.capture.slice_pieces import rank, shape_of

aten = torch.ops.aten
CONV = "conv"  # the binding of a match's convolutions: (kernel size, stride, padding, dilation)
CONV_OUT = "conv_out"  # ... and of their batch and output sizes


@lru_cache(maxsize=None)  # (asked for every rule at every node: the rules' terms are few)
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
    transposed (with a bias or without: ``ollie.capture.biases``); None for anything else."""
    if not isinstance(n, fx.Node) or n.op != "call_function" or \
            n.target != aten.convolution.default or n.kwargs or len(n.args) != 9:
        return None
    x, w, bias, stride, padding, dilation, transposed, output_padding, groups = n.args
    if transposed or groups != 1 or rank(w) < 3 or rank(x) != rank(w):
        return None
    return shape_of(w)[2:], *(tuple(map(_expr, v)) for v in (stride, padding, dilation))


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


def _expr(size):  # (a SymInt compared would add a guard)
    return size.node.expr if isinstance(size, torch.SymInt) else size

