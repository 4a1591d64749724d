"""Reductions made smaller: what research code leaves behind when it reduces broadcast or
stacked tensors.

* ``broadcast``: a reduction whose body ignores some of its output iterators computes the
  same value along them; it is computed once and broadcast::

      T[i, j] = sum[k] X[i,k] * X[i,k]   =   T[i, j] = W[i],   W[i] = sum[k] X[i,k] * X[i,k]

  (the norms that distributing ``(x_i - y_j)^2`` leaves, ``x.sum(-1, keepdim=True)``
  expanded, ...). The split of sums and products reaches it only when some factor does not
  read the summation iterator.
* ``single_point``: a reduction over one point is its body there:
  ``sum[c in 2:3] f(c) = f(2)``, ``max[c in 2:3] f(c) = f(2)`` (what is left of a reduction
  over a stacked axis once each stacked piece's range is tightened to its one slot).
* ``merge_reductions``: ``max[r] M[e]`` with ``M[u] = max[q] f(u, q)`` read inside its range
  is ``max[r, q] f(e, q)`` (min alike; sums of sums merge by the egglog ``inline``).
* ``split_pieces``: a max/min over ``c`` of a sum of pieces that are non-zero on disjoint
  ranges of ``c`` tiling its whole range (a ``torch.cat``/``stack`` along ``c``) is the
  max/min of each piece over its own range: at every ``c`` exactly one piece is non-zero,
  the others are exact zeros::

      max[c in 0:3] (u'[c] + v'[c-1] + x'[c-2])  =  max(max[c in 0:1] u'[c], max(...))

All are exact: no value is computed in another order.
"""
from __future__ import annotations

import sympy

from ir.nodes import Access, Binary, BinOp, Expr, Reduce, Scope, free_iterators
from derivations.index_rules import (
    index_bounds, live_range, renamed, scope_like, substitute,
)

__all__ = ["broadcast", "single_point", "merge_reductions", "split_pieces"]

_EXTREMUM = {Reduce.MAX: BinOp.MAX, Reduce.MIN: BinOp.MIN}


def broadcast(scope: Scope) -> list[Scope]:
    if not scope.summation:
        return []
    read = free_iterators(scope.body)
    kept = tuple(it for it in scope.traversal if it.name in read or it.extent <= 1)
    if len(kept) == len(scope.traversal):
        return []
    once = Scope(kept, scope.summation, scope.body, scope.reduce,
                 name=f"{scope.name or 'S'}_once", dtype=scope.dtype)
    return [scope_like(scope, scope.traversal, (), once[tuple(it.symbol for it in kept)])]


def single_point(scope: Scope) -> list[Scope]:
    points = [it for it in scope.summation if it.extent == 1]
    if not points:
        return []
    body = substitute(scope.body, {it.name: sympy.Integer(it.lo) for it in points})
    rest = tuple(it for it in scope.summation if it.extent != 1)
    reduce = scope.reduce if rest else Reduce.SUM  # a map: no reduction left
    return [Scope(scope.traversal, rest, body, reduce, name=scope.name, dtype=scope.dtype)]


def merge_reductions(scope: Scope) -> list[Scope]:
    body = scope.body
    if scope.reduce not in _EXTREMUM or not isinstance(body, Access) or \
            not isinstance(body.source, Scope) or body.source.reduce is not scope.reduce:
        return []
    inner = body.source
    ranges = {it.name: (it.lo, it.hi) for it in scope.traversal + scope.summation}
    for it, idx in zip(inner.traversal, body.indices):
        lo, hi = index_bounds(sympy.sympify(idx), ranges)
        if lo < it.lo or hi > it.hi:  # read outside its range: 0 there, not max of nothing
            return []
    if any(it.extent == 0 for it in inner.summation + scope.summation):
        return []
    taken = set(ranges)
    sums = []
    for it in inner.summation:
        sums.append(renamed(it, it.lo, it.hi, taken | {s.name for s in sums}) if it.name in taken
                    else it)
        taken.add(sums[-1].name)
    new = substitute(inner.body, {**{it.name: s.symbol for it, s in zip(inner.summation, sums)},
                                  **{it.name: sympy.sympify(i)
                                     for it, i in zip(inner.traversal, body.indices)}})
    return [scope_like(scope, scope.traversal, scope.summation + tuple(sums), new)]


def _terms(e: Expr) -> list[Expr]:
    if isinstance(e, Binary) and e.op is BinOp.ADD:
        return _terms(e.lhs) + _terms(e.rhs)
    return [e]


def split_pieces(scope: Scope) -> list[Scope]:
    if scope.reduce not in _EXTREMUM or not scope.summation:
        return []
    terms = _terms(scope.body)
    if len(terms) < 2:
        return []
    ranges = {it.name: (it.lo, it.hi) for it in scope.traversal + scope.summation}
    out = []
    for c in scope.summation:
        if c.extent == 0:
            continue
        lives = sorted((live_range(t, c, ranges), n) for n, t in enumerate(terms))
        spans = [r for r, _ in lives]
        if spans[0][0] != c.lo or spans[-1][1] != c.hi or \
                any(a[1] != b[0] for a, b in zip(spans, spans[1:])) or \
                any(hi <= lo for lo, hi in spans):
            continue  # not a tiling: some c sees two pieces, or none
        parts = []
        for (lo, hi), n in lives:
            piece_c = renamed(c, lo, hi, set(ranges))
            sums = tuple(piece_c if it is c else it for it in scope.summation)
            body = substitute(terms[n], {c.name: piece_c.symbol}) if piece_c is not c \
                else terms[n]
            part = Scope(scope.traversal, sums, body, scope.reduce,
                         name=f"{scope.name or 'S'}_piece", dtype=scope.dtype)
            parts.append(part[tuple(it.symbol for it in scope.traversal)])
        value = parts[0]
        for p in parts[1:]:
            value = Binary(_EXTREMUM[scope.reduce], value, p)
        out.append(Scope(scope.traversal, (), value, Reduce.SUM, name=scope.name,
                         dtype=scope.dtype))  # a map: no reduction left
    return out
