"""A term of a sum as a *piece* in the reader's coordinates (for :mod:`joining`).

A scope adding up reads of sub-scopes (a ``cat``, a sum of partial sums) holds pieces of one
computation when, put in *global coordinates*, they compute one function over adjacent
ranges. A piece's read ``B[t - 8]`` is ``B'(t) = B(t - 8)`` over 8:16; a read at a flattened
coordinate ``B[256*i + j]`` (a ``view`` of a cat) is ``B'(i, j)`` with one dim per reader
iterator, where the read is an exact flattening; each summation iterator is shifted so that
a reference read has the same offset in every piece (``F(s + 8)`` over 0:8 is ``F(s)`` over
8:16), and the re-indexings it reads (strided windows, padding) are inlined. Pieces whose
canonical forms then agree, ranges aside (``function_key``), are one function.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from ir.canonical import fingerprint
from ir.nodes import Access, Expr, Iter, Scope, accesses, affine_terms
from ir.index_math import simplify_index
from derivations.index_rules import fresh_name, map_indices, scope_like, substitute
from derivations.rules.merging import inline_read

__all__ = ["Piece", "piece", "function_key", "INLINE_ROUNDS", "PLACEHOLDER"]

INLINE_ROUNDS = 8  # re-indexings nest (pad -> contiguous -> window): inline a few deep
PLACEHOLDER = (0, 1)  # every range, when comparing pieces by their function alone


@dataclass(frozen=True)
class Piece:
    term: int            # position among the reader's added terms
    names: tuple         # the reader iterator each traversal dim of the piece stands for
    scope: Scope         # the piece in global coordinates
    box: tuple           # its ranges: traversal dims, then summation iterators


def piece(scope: Scope, n: int, term: Expr) -> Piece | None:
    if not (isinstance(term, Access) and isinstance(term.source, Scope)):
        return None
    read = _through_copies(term)
    placed = _in_reader_coordinates(scope, read)
    if placed is None:
        return None
    names, q = placed
    q = _simplified(_sums_anchored(_inline_layouts(_simplified(q))))
    box = tuple((it.lo, it.hi) for it in q.traversal + q.summation)
    return Piece(n, names, q, box)


def _simplified(s: Scope) -> Scope:
    """``s`` with the floors and mods of its reads removed where its ranges decide them (a
    flattened batch read at ``12*i + j`` and unflattened by ``b // 12, b % 12``)."""
    ranges = {it.name: (it.lo, it.hi) for it in s.traversal + s.summation}
    body = map_indices(s.body, lambda i: simplify_index(i, ranges)
                       if sympy.sympify(i).has(sympy.floor, sympy.Mod) else i)
    return s if body == s.body else scope_like(s, s.traversal, s.summation, body)


def _through_copies(read: Access) -> Access:
    """A read of a copy (``C[u] = X[u + c]`` over exactly ``X``'s shifted range, as a join
    leaves behind) as the read of what it copies."""
    for _ in range(INLINE_ROUNDS):
        src = read.source
        inner = src.body
        if src.summation or not isinstance(inner, Access) or \
                not isinstance(inner.source, Scope) or len(inner.indices) != src.rank:
            return read
        for it, idx, (lo, hi) in zip(src.traversal, inner.indices, inner.source.bounds()):
            terms = affine_terms(sympy.sympify(idx))
            if terms is None or terms[0] != {it.name: 1} or \
                    (it.lo + terms[1], it.hi + terms[1]) != (lo, hi):
                return read
        sub = {it.name: sympy.sympify(i) for it, i in zip(src.traversal, read.indices)}
        read = substitute(inner, sub)
    return read


def _in_reader_coordinates(scope: Scope, read: Access) -> tuple[tuple, Scope] | None:
    """``P[t + c]`` as ``Q(t) = P(t + c)`` over the shifted ranges, with the reader iterator
    each dim stands for; None unless each index is a distinct reader iterator plus a
    constant, a flattening of several (``P[256*i + j + c]``, see ``_digits``), or a constant
    inside the dim (``P[.., 0, ..]``: the piece is ``P`` at that point, one dim fewer)."""
    src: Scope = read.source
    ranges = {it.name: (it.lo, it.hi) for it in scope.traversal}
    sub, traversal, used = {}, [], []
    for it, idx in zip(src.traversal, read.indices):
        terms = affine_terms(sympy.sympify(idx))
        if terms is None:
            return None
        if not terms[0]:  # a point of the dim (outside it the read is 0: not a piece)
            if not it.lo <= terms[1] < it.hi:
                return None
            sub[it.name] = sympy.Integer(terms[1])
            continue
        digits = _digits(terms[0], ranges, it.lo - terms[1], it.hi - terms[1])
        if digits is None or any(name in used for name, _, _ in digits):
            return None
        flat = sympy.Integer(terms[1])
        for name, coeff, (lo, hi) in digits:
            used.append(name)
            why = ("shift", terms[1]) if len(digits) == 1 else ("digit", terms[1], coeff, lo, hi)
            new = Iter(fresh_name(it.name, *why), lo, hi)
            flat += coeff * new.symbol
            traversal.append(new)
        sub[it.name] = flat
    order = {it.name: n for n, it in enumerate(scope.traversal)}  # dims in the reader's order
    dims = sorted(zip(used, traversal), key=lambda d: order[d[0]])
    return tuple(n for n, _ in dims), scope_like(src, [it for _, it in dims], src.summation,
                                                 substitute(src.body, sub))


def _digits(coeffs: dict[str, int], ranges: dict, lo: int, hi: int) -> list | None:
    """How a piece's dim, read at ``sum(c_r * r) + const`` (reader iterators ``r``) over
    ``lo:hi`` once the constant is taken off, splits into one dim per reader iterator:
    ``[(r, c_r, range of r's digit)]``, most significant first. One iterator with
    coefficient 1 keeps the range; several must be the digits of a flattening: coefficients
    each a multiple of the next, the last 1, every lower digit's reader range inside its
    radix, and ``lo:hi`` whole multiples of the top coefficient (a stack seen through a
    ``view``: ``cat[256*i + j]`` reads piece ``i`` at ``j``). None otherwise."""
    if not coeffs or any(n not in ranges for n in coeffs):
        return None
    order = sorted(coeffs.items(), key=lambda kv: -kv[1])
    if order[-1][1] != 1 or order[0][1] <= 0:
        return None
    if len(order) == 1:
        return [(order[0][0], 1, (lo, hi))]
    top = order[0][1]
    if lo % top or hi % top:
        return None
    out = [(order[0][0], top, (lo // top, hi // top))]
    for (_, high), (name, c) in zip(order, order[1:]):
        if c <= 0 or high % c or not (0 <= ranges[name][0] and ranges[name][1] <= high // c):
            return None
        out.append((name, c, (0, high // c)))
    return out


def _sums_anchored(s: Scope) -> Scope:
    """Each summation iterator shifted so that its reference read (the least, by source name,
    dim and coefficient, of the reads it indexes) has an offset in ``0 : coefficient``."""
    summation, sub = [], {}
    for it in s.summation:
        c = _anchor_shift(s.body, it.name)
        if c == 0:
            summation.append(it)
            continue
        new = Iter(fresh_name(it.name, "anchored", it.lo + c, it.hi + c), it.lo + c, it.hi + c)
        sub[it.name] = new.symbol - c
        summation.append(new)
    if not sub:
        return s
    return scope_like(s, s.traversal, summation, substitute(s.body, sub))


def _anchor_shift(body: Expr, name: str) -> int:
    best = None
    for a in accesses(body):
        for dim, idx in enumerate(a.indices):
            terms = affine_terms(sympy.sympify(idx))
            if terms is None or not terms[0].get(name):
                continue
            coeff = terms[0][name]
            key = (_source_name(a.source), dim, coeff)
            if best is None or key < best[0]:
                best = (key, terms[1] // coeff)
    return 0 if best is None else int(best[1])


def _source_name(source) -> str:
    return getattr(source, "name", None) or ""


def _inline_layouts(s: Scope) -> Scope:
    """``s`` with the pure re-indexings it reads (scopes without summation whose body is
    one read) inlined, so that pieces reading shifted windows compare equal; and, for the
    pieces of an unrolled loop (``f(x[i])`` with ``f`` a chain of maps, or a reduction read
    whole), the maps and the one reduction its body is, so that the pieces are their whole
    function of ``x``."""
    for _ in range(INLINE_ROUNDS):
        reads = [r for r in accesses(s.body) if isinstance(r.source, Scope)
                 and (not r.source.summation or r is s.body and not s.summation)]
        if not reads:
            return s
        inlined = inline_read(s, reads[0])
        if inlined is None:
            return s
        s = inlined
    return s


def function_key(s: Scope) -> str:
    """What a piece computes, ranges aside."""
    its = lambda group: tuple(Iter(it.name, *PLACEHOLDER) for it in group)  # noqa: E731
    return fingerprint(scope_like(s, its(s.traversal), its(s.summation), s.body))
