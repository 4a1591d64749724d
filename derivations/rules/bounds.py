"""Boundary tightening and relaxing: ranges shrunk to where reads are in bounds, or grown.

A read outside a tensor or scope is 0, so a range may change wherever the body is zero:

* tightening a **summation** iterator of a sum: ``sum[r in lo:hi] B = sum[r in lo':hi'] B``
  when ``B`` is zero for ``r`` outside ``lo':hi'`` (``ir``-level: ``zero_everywhere``);
* tightening a **source** scope's traversal, for one reader: ``W'`` = ``W`` on ``lo':hi'``,
  where ``lo':hi'`` keeps the values the reader reads *and* at which ``W``'s body may be
  nonzero; the reader reads ``W'`` at the same indices (values outside read 0, as before);
* relaxing is the converse: a summation range grown to a multiple of 2 or 3 (so iterator
  splitting applies: a 5×5 kernel as 2×2 blocks of 3×3), a source's range grown to cover all
  that its reader reads (the zero padding becomes part of ``W'``); only over values where
  the body is zero, so the grown points add or hold zeros.

Iterators whose range changes are renamed after their base name and new range
(``index_rules.renamed``), so tightening a relaxed range gives back the same iterator.
The root's traversal never changes: a rule on a scope keeps that scope's traversal.
"""
from __future__ import annotations

import sympy

from ir.nodes import Access, Binary, Reduce, Scope, Unary, walk
from derivations.index_rules import (
    index_bounds, live_range, rename_iters, renamed, scope_like, zero_everywhere,
)

__all__ = ["tighten", "relax"]

RELAX_MULTIPLES = (2, 3)  # summation extents grown to a multiple of these (when small)
RELAX_MAX_EXTENT = 16     # ... only for kernel-sized summation ranges


def _ranges(s: Scope) -> dict[str, tuple[int, int]]:
    return {it.name: (it.lo, it.hi) for it in s.traversal + s.summation}


def _names(s: Scope) -> set[str]:
    return {it.name for it in s.traversal + s.summation}


def _sources(s: Scope) -> list[Scope]:
    out: list[Scope] = []
    for a in walk(s.body):
        if isinstance(a, Access) and isinstance(a.source, Scope) and a.source not in out:
            out.append(a.source)
    return out


def _read_bounds(reader: Scope, src: Scope) -> list[tuple[int, int]]:
    """Per dim of ``src``: the hull of the values ``reader`` reads it at."""
    ranges, hull = _ranges(reader), [None] * src.rank
    for a in walk(reader.body):
        if isinstance(a, Access) and a.source is src:
            for d, i in enumerate(a.indices):
                lo, hi = index_bounds(sympy.sympify(i), ranges)
                if hi > lo:
                    hull[d] = (lo, hi) if hull[d] is None else (min(lo, hull[d][0]),
                                                                max(hi, hull[d][1]))
    return [h or (0, 0) for h in hull]


def _with_source(reader: Scope, old: Scope, new: Scope) -> Scope:
    def swap(e):
        if isinstance(e, Access):
            return Access(new, e.indices) if e.source is old else e
        return e
    return scope_like(reader, reader.traversal, reader.summation, _map_body(reader.body, swap))


def _map_body(e, f):
    if isinstance(e, Binary):
        return Binary(e.op, _map_body(e.lhs, f), _map_body(e.rhs, f))
    if isinstance(e, Unary):
        return Unary(e.op, _map_body(e.x, f))
    return f(e)


def _source_range(src: Scope, new_ranges: list[tuple[int, int]]) -> Scope | None:
    """``src`` with traversal ranges ``new_ranges`` (renamed where changed), or None."""
    taken = _names(src)
    new = {it.name: renamed(it, lo, hi, taken - {it.name})
           for it, (lo, hi) in zip(src.traversal, new_ranges) if (it.lo, it.hi) != (lo, hi)}
    return rename_iters(src, new) if new else None


def tighten(scope: Scope) -> list[Scope]:
    """Summation ranges of a sum, and each source's traversal, shrunk to the live values."""
    out = []
    ranges = _ranges(scope)
    if scope.reduce is Reduce.SUM and scope.summation:
        new = {}
        for it in scope.summation:
            lo, hi = live_range(scope.body, it, ranges)
            if (lo, hi) != (it.lo, it.hi):
                new[it.name] = renamed(it, lo, hi, _names(scope) - {it.name})
        if new:
            out.append(rename_iters(scope, new))
    for src in _sources(scope):
        reads, src_ranges = _read_bounds(scope, src), _ranges(src)
        shrunk = []
        for it, (rlo, rhi) in zip(src.traversal, reads):
            lo, hi = live_range(src.body, it, src_ranges)
            lo, hi = max(lo, rlo), min(hi, rhi)
            shrunk.append((lo, hi) if lo < hi else (it.lo, it.lo))
        smaller = _source_range(src, shrunk)
        if smaller is not None:
            out.append(_with_source(scope, src, smaller))
    return out


def relax(scope: Scope) -> list[Scope]:
    """Small summation ranges grown to multiples of 2 / 3, and sources grown to what their
    reader reads, wherever the grown points are zero."""
    out = []
    ranges = _ranges(scope)
    if scope.reduce is Reduce.SUM:
        for it in scope.summation:
            if it.extent > RELAX_MAX_EXTENT:
                continue
            for m in RELAX_MULTIPLES:
                hi = it.lo + -(-it.extent // m) * m
                if hi == it.hi or not zero_everywhere(scope.body, it.name, it.hi, hi, ranges):
                    continue
                new = renamed(it, it.lo, hi, _names(scope) - {it.name})
                out.append(rename_iters(scope, {it.name: new}))
    for src in _sources(scope):
        reads, src_ranges = _read_bounds(scope, src), _ranges(src)
        grown, ok = [], True
        for it, (rlo, rhi) in zip(src.traversal, reads):
            lo, hi = min(it.lo, rlo), max(it.hi, rhi) if rhi > rlo else it.hi
            wide = dict(src_ranges, **{it.name: (lo, hi)})
            ok &= zero_everywhere(src.body, it.name, lo, it.lo, wide) and \
                zero_everywhere(src.body, it.name, it.hi, hi, wide)
            grown.append((lo, hi))
        bigger = _source_range(src, grown) if ok else None
        if bigger is not None:
            out.append(_with_source(scope, src, bigger))
    return out

