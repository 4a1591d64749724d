"""Operator matching by iterator tables (EinNet's targets for guided derivation).

An *iterator table* lists, for each iterator of a scope, every place it indexes a source:
which access, which dim, with which coefficient (the affine stride), and whether it is a
traversal or a summation iterator. For ``C[i, j] = sum[k] A[i, k] * B[k, j]``::

    iterator   kind       extent  uses
    i          traversal       4  A#0[0]*1
    j          traversal       5  B#1[1]*1
    k          summation       6  A#0[1]*1, B#1[0]*1

An operator is a set of *roles* over such rows: Matmul needs iterators in the output and one
operand (m, n), in both operands and summed (k), optionally in everything (batch). A conv
input dim holding a traversal iterator with coefficient ``stride`` beside a summation iterator
with coefficient ``dilation`` is a window; a band iterator entering as ``i + d*(j - w)`` is a
G2BMM / GBMM. Matching is therefore by structure -- roles, coefficients and whole-dim reads --
never by scope names or particular sizes, and it is blind to dim order: each match records the
permutations ("layout repairs") that bring operands and output to the library's layout.

Each matcher returns a small frozen dataclass with everything a library call needs, or None;
``classify`` names the first that applies.
"""
from __future__ import annotations

import sympy

from ir.nodes import Access, Binary, Reduce, Scope, Unary, free_iterators, iterator_symbol
from ir.patterns.banded import BandedMatch, match_g2bmm, match_gbmm
from ir.patterns.conv import ConvMatch, match_conv
from ir.patterns.maps import (
    ElementwiseMatch, PrefixSumMatch, ReductionMatch, SoftmaxMatch, match_elementwise,
    match_prefix_sum, match_reduction, match_softmax,
)
from ir.patterns.matmul import MatmulMatch, match_matmul
from ir.patterns.table import Affine, IteratorTable, Row, Use, iterator_table, product_terms

__all__ = [
    "iterator_table", "IteratorTable", "Row", "Use", "Affine",
    "match_matmul", "MatmulMatch", "match_conv", "ConvMatch",
    "match_g2bmm", "match_gbmm", "BandedMatch",
    "match_elementwise", "ElementwiseMatch", "match_reduction", "ReductionMatch",
    "match_softmax", "SoftmaxMatch", "match_prefix_sum", "PrefixSumMatch", "classify",
    "CLASSES",
]

CLASSES = ("matmul", "batch_matmul", "conv", "g2bmm", "gbmm", "elementwise", "reduction",
           "contraction", "eoperator")


def classify(scope: Scope) -> str:
    """The operator class of one scope (its sources are classified separately):

    ``matmul`` / ``batch_matmul`` / ``conv`` / ``g2bmm`` / ``gbmm``: a library operator;
    ``elementwise``: arithmetic over plain reads; ``reduction``: sum/max/min of such a body;
    ``contraction``: any other sum of a product of two or more varying factors (an einsum);
    ``eoperator``: the memory-bound rest -- gathers, re-indexing, padding, layout copies,
    offset-reduces.

    A scope that is none of the library operators as it stands, but is one once its
    iterators over a single point are fixed at that point, is that operator (a view adds
    the unit dims): ``torch.mm`` of a row ``unsqueeze``d from a vector is a Matmul, and so
    is a stack of them batched along a loop index.
    """
    kind = _classify(scope)
    if kind in LIBRARY or not any(it.extent == 1 for it in scope.traversal + scope.summation):
        return kind
    point = _at_unit_points(scope)
    lifted = _classify(point) if point is not None else kind
    return lifted if lifted in LIBRARY else kind


LIBRARY = frozenset({"matmul", "batch_matmul", "conv", "g2bmm", "gbmm"})


def _at_unit_points(scope: Scope) -> Scope | None:
    """``scope`` with every iterator over one point replaced by that point (None if that
    leaves no traversal or summation, or no iterator is over one point)."""
    one = {it.name: sympy.Integer(it.lo) for it in scope.traversal + scope.summation
           if it.extent == 1}
    if not one:
        return None
    subs = {iterator_symbol(n): v for n, v in one.items()}

    def fix(e):
        if isinstance(e, Access):
            return Access(e.source, tuple(sympy.sympify(i).xreplace(subs) for i in e.indices))
        if isinstance(e, Binary):
            return Binary(e.op, fix(e.lhs), fix(e.rhs))
        if isinstance(e, Unary):
            return Unary(e.op, fix(e.x))
        return e

    traversal = tuple(it for it in scope.traversal if it.name not in one)
    summation = tuple(it for it in scope.summation if it.name not in one)
    if not traversal and not summation:
        return None
    return Scope(traversal, summation, fix(scope.body), scope.reduce, name=scope.name,
                 dtype=scope.dtype)


def _classify(scope: Scope) -> str:
    matmul = match_matmul(scope)
    if matmul is not None:
        return matmul.kind
    if match_conv(scope) is not None:
        return "conv"
    if match_g2bmm(scope) is not None:
        return "g2bmm"
    if match_gbmm(scope) is not None:
        return "gbmm"
    elementwise = match_elementwise(scope)
    if elementwise is not None:
        return "eoperator" if elementwise.layout_only else "elementwise"
    if match_reduction(scope) is not None:
        return "reduction"
    if scope.reduce is Reduce.SUM and scope.summation:
        reads, _, other = product_terms(scope.body)
        if sum(bool(free_iterators(f)) for f in reads + other) >= 2:
            return "contraction"
    return "eoperator"
