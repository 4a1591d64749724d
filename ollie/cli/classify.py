"""Name the operator each scope of a program instantiates, from its structure alone.

A scope is classified by its iterator table, the way EinNet matches expressions to operators:

- ``matmul``: a sum of a product of two accesses with plain-iterator indices, where every
  summation iterator is read by both factors and every traversal iterator by at least one
  (batch iterators by both) — Matmul and BatchMatmul;
- ``contraction``: any other sum of a product of two or more accesses (a conv, a banded
  matmul, an einsum with more operands);
- ``reduction``: any other scope with summation iterators, or a max/min reduction;
- ``elementwise``: no summation, every access reads with plain iterators;
- ``gather``: no summation, some access reads at a shifted, strided or mixed index (layout
  changes, padding, unfold, im2col) — EinNet's memory-bound eOperators.
"""
from __future__ import annotations

import sympy

import ir
from ir.nodes import Access, Binary, BinOp, Reduce, Scope, accesses

KINDS = ("matmul", "contraction", "reduction", "elementwise", "gather")


def _factors(e) -> list:
    if isinstance(e, Binary) and e.op is BinOp.MUL:
        return _factors(e.lhs) + _factors(e.rhs)
    return [e]


def _plain(a: Access) -> bool:
    """Every index is a bare iterator, none repeated."""
    names = [i.name for i in a.indices if isinstance(i, sympy.Symbol)]
    return len(names) == len(a.indices) and len(set(names)) == len(names)


def _iters_of(a: Access) -> set[str]:
    return {s.name for i in a.indices for s in i.free_symbols}


def classify(scope: Scope) -> str:
    """One of ``KINDS`` for this scope's own computation (not the scopes it reads)."""
    reads = accesses(scope.body)
    if not scope.summation and scope.reduce is Reduce.SUM:
        return "elementwise" if all(_plain(a) for a in reads) else "gather"
    if scope.reduce is not Reduce.SUM:
        return "reduction"
    factors = [f for f in _factors(scope.body) if not isinstance(f, ir.Const)]
    if len(factors) < 2 or not all(isinstance(f, Access) for f in factors):
        return "reduction"
    if len(factors) == 2 and all(_plain(f) for f in factors):
        a, b = (_iters_of(f) for f in factors)
        summed = {it.name for it in scope.summation}
        if summed and summed <= (a & b) and (a | b) - summed == \
                {it.name for it in scope.traversal}:
            return "matmul"
    return "contraction"


def operators(program: Scope) -> list[str]:
    """The operator of each distinct scope of ``program``, dependencies first."""
    return [classify(s) for s in ir.sub_scopes(program)]


def describe(program: Scope) -> str:
    """``"matmul + gather"``-style summary, in program order."""
    return " + ".join(operators(program))
