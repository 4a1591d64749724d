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

from ir.nodes import Reduce, Scope, free_iterators
from ir.patterns.banded import BandedMatch, match_g2bmm, match_gbmm
from ir.patterns.conv import ConvMatch, match_conv
from ir.patterns.maps import (
    ElementwiseMatch, ReductionMatch, SoftmaxMatch, match_elementwise, match_reduction,
    match_softmax,
)
from ir.patterns.matmul import MatmulMatch, match_matmul
from ir.patterns.table import Affine, IteratorTable, Row, Use, iterator_table, product_terms

__all__ = [
    "iterator_table", "IteratorTable", "Row", "Use", "Affine",
    "match_matmul", "MatmulMatch", "match_conv", "ConvMatch",
    "match_g2bmm", "match_gbmm", "BandedMatch",
    "match_elementwise", "ElementwiseMatch", "match_reduction", "ReductionMatch",
    "match_softmax", "SoftmaxMatch", "classify", "CLASSES",
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
    """
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
