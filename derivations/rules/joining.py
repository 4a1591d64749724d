"""Range joining: pieces of one computation over adjacent ranges become one scope.

Programs written in chunks (to bound memory, or by a library) compute one function in
pieces: ``torch.cat`` of per-chunk results, or a sum of per-chunk partial sums. Both show up
as a scope adding up reads of sub-scopes::

    O[t] = A[t] + B[t - 8]                      A, B over 0:8: a cat along t
    O[t] = A[t] + B[t]     A = sum[s in 0:8] F(s),  B = sum[s in 0:8] F(s + 8)

When the pieces are the same function shifted (compared on their canonical form, after
inlining the re-indexings they read, such as strided windows), and their ranges are
adjacent, they are one scope over the union::

    O[t] = J[t],  J over 0:16 (cat)        J = sum[s in 0:16] F(s)  (chunked sums)

Adjacent, never overlapping or apart: a gap would be 0 in the pieces but not in the union,
an overlap counted twice. Other dims must cover the same range in both pieces. Two terms
are joined at a time; the e-graph joins more by repeating.
"""
from __future__ import annotations

import sympy

from ir.canonical import fingerprint
from ir.nodes import (
    Access, Binary, BinOp, Const, Expr, Iter, Reduce, Scope, affine_terms, iterator_symbol,
)
from derivations.index_rules import fresh_name, scope_like, substitute
from derivations.rules.merging import inline_read

__all__ = ["join_ranges"]

INLINE_ROUNDS = 8  # re-indexings nest (pad -> contiguous -> window): inline a few deep


def join_ranges(scope: Scope) -> list[Scope]:
    """``scope`` with two added reads of pieces of one computation joined (one result per
    pair that joins)."""
    if scope.summation or scope.reduce is not Reduce.SUM:
        return []
    terms = _terms(scope.body)
    if terms is None or len(terms) < 2:
        return []
    out = []
    for m in range(len(terms)):
        for n in range(m + 1, len(terms)):
            joined = _join(scope, terms[m], terms[n])
            if joined is not None:
                rest = [t for k, t in enumerate(terms) if k not in (m, n)]
                body = joined
                for t in rest:
                    body = Binary(BinOp.ADD, body, t)
                out.append(scope_like(scope, scope.traversal, (), body))
    return out


def _terms(e: Expr) -> list[Expr] | None:
    """The added terms of ``e`` (None if it subtracts: a sign would have to travel)."""
    if isinstance(e, Binary) and e.op is BinOp.ADD:
        a, b = _terms(e.lhs), _terms(e.rhs)
        return None if a is None or b is None else a + b
    if isinstance(e, Binary) and e.op is BinOp.SUB:
        return None
    return [e]


def _join(scope: Scope, a: Expr, b: Expr) -> Access | None:
    if not all(isinstance(x, Access) and isinstance(x.source, Scope) for x in (a, b)):
        return None
    a, b = _through_copies(a), _through_copies(b)
    pa, pb = _in_reader_coordinates(scope, a), _in_reader_coordinates(scope, b)
    if pa is None or pb is None or pa.reduce is not pb.reduce or pa.rank != pb.rank:
        return None
    ra, rb = pa.bounds(), pb.bounds()
    differ = [k for k in range(pa.rank) if ra[k] != rb[k]]
    if len(differ) == 1:  # a cat: pieces along one traversal dim
        k = differ[0]
        union = _adjacent(ra[k], rb[k])
        if union is None:
            return None
        ja, jb = _with_range(pa, "traversal", k, union), _with_range(pb, "traversal", k, union)
        if fingerprint(ja) != fingerprint(jb):
            return None
        return _read(scope, a, _fresh_traversal(ja))
    if not differ and pa.reduce is Reduce.SUM:  # chunked sums
        joined = _join_sums(pa, pb)
        return None if joined is None else _read(scope, a, joined)
    return None


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


def _in_reader_coordinates(scope: Scope, read: Access) -> Scope | None:
    """The read scope as a function of the reader's iterators: ``P[t + c]`` -> ``Q[t]`` with
    ``Q(t) = P(t + c)`` over the shifted ranges, its re-indexings inlined. None unless each
    index is a distinct reader traversal iterator plus a constant."""
    src: Scope = read.source
    names = [it.name for it in scope.traversal]
    sub, traversal, used = {}, [], set()
    for it, idx in zip(src.traversal, read.indices):
        terms = affine_terms(sympy.sympify(idx))
        if terms is None:
            return None
        coeffs, c = terms
        if len(coeffs) != 1:
            return None
        (name, coeff), = coeffs.items()
        if coeff != 1 or name not in names or name in used:
            return None
        used.add(name)
        new = Iter(fresh_name(it.name, "shift", c), it.lo - c, it.hi - c)
        sub[it.name] = new.symbol + c
        traversal.append(new)
    shifted = scope_like(src, traversal, src.summation, substitute(src.body, sub))
    return _inline_layouts(shifted)


def _inline_layouts(s: Scope) -> Scope:
    """``s`` with the pure re-indexings it reads (scopes without summation whose body is
    one read) inlined, so that pieces reading shifted windows compare equal."""
    for _ in range(INLINE_ROUNDS):
        reads = [r for r in _reads(s.body)
                 if not r.source.summation and isinstance(r.source.body, (Access, Const))]
        if not reads:
            return s
        inlined = inline_read(s, reads[0])
        if inlined is None:
            return s
        s = inlined
    return s


def _reads(e: Expr) -> list[Access]:
    if isinstance(e, Access):
        return [e] if isinstance(e.source, Scope) else []
    if isinstance(e, Binary):
        return _reads(e.lhs) + _reads(e.rhs)
    return _reads(e.x) if hasattr(e, "x") else []


def _adjacent(r1: tuple[int, int], r2: tuple[int, int]) -> tuple[int, int] | None:
    if r1[1] == r2[0]:
        return r1[0], r2[1]
    if r2[1] == r1[0]:
        return r2[0], r1[1]
    return None


def _with_range(s: Scope, part: str, k: int, rng: tuple[int, int]) -> Scope:
    its = list(getattr(s, part))
    its[k] = Iter(its[k].name, *rng)
    traversal = tuple(its) if part == "traversal" else s.traversal
    summation = tuple(its) if part == "summation" else s.summation
    return scope_like(s, traversal, summation, s.body)


def _fresh_traversal(s: Scope) -> Scope:
    """``s`` with traversal iterators named for their (joined) ranges."""
    new = {it.name: Iter(fresh_name(it.name, "joined", it.lo, it.hi), it.lo, it.hi)
           for it in s.traversal}
    sub = {n: it.symbol for n, it in new.items()}
    return scope_like(s, tuple(new[it.name] for it in s.traversal), s.summation,
                      substitute(s.body, sub))


def _join_sums(pa: Scope, pb: Scope) -> Scope | None:
    """``sum[s in A] F(s) + sum[s' in B] F(s' + c)`` as one sum over the union, if some
    summation iterator pair and offset ``c`` (read off equal sources) make them one."""
    if len(pa.summation) != len(pb.summation) or not pa.summation:
        return None
    # b's traversal renamed to a's: the pieces cover the same points
    sub = {ib.name: ia.symbol for ia, ib in zip(pa.traversal, pb.traversal)}
    body_b = substitute(pb.body, sub)
    for sa in pa.summation:
        for sb in pb.summation:
            for c in _offsets(pa.body, body_b, sa.name, sb.name):
                union = _adjacent((sa.lo, sa.hi), (sb.lo + c, sb.hi + c))
                if union is None:
                    continue
                wide = Iter(fresh_name(sa.name, "joined", *union), *union)
                a_sums = tuple(wide if s is sa else s for s in pa.summation)
                b_sums = tuple(wide if s is sb else s for s in pb.summation)
                ja = scope_like(pa, pa.traversal, a_sums,
                                substitute(pa.body, {sa.name: wide.symbol}))
                jb = scope_like(pa, pa.traversal, b_sums,
                                substitute(body_b, {sb.name: wide.symbol - c}))
                if fingerprint(ja) == fingerprint(jb):
                    return _fresh_traversal(ja)
    return None


def _offsets(body_a: Expr, body_b: Expr, sa: str, sb: str) -> list[int]:
    """Offsets ``c`` with ``a*(s + c) + rest_a == a*s' + rest_b`` for some source read in
    both bodies at a dim where ``sa`` and ``sb`` have the same coefficient."""
    found = []
    reads_b = _all_reads(body_b)
    for x in _all_reads(body_a):
        for y in reads_b:
            if x.source != y.source:
                continue
            for ix, iy in zip(x.indices, y.indices):
                ta, tb = affine_terms(sympy.sympify(ix)), affine_terms(sympy.sympify(iy))
                if ta is None or tb is None:
                    continue
                ca, cb = ta[0].get(sa, 0), tb[0].get(sb, 0)
                if ca == 0 or ca != cb:
                    continue
                rest_a = {n: v for n, v in ta[0].items() if n != sa}
                rest_b = {n: v for n, v in tb[0].items() if n != sb}
                diff = tb[1] - ta[1]
                if rest_a == rest_b and diff % ca == 0 and diff // ca not in found:
                    found.append(diff // ca)
    return found


def _all_reads(e: Expr) -> list[Access]:
    if isinstance(e, Access):
        return [e]
    if isinstance(e, Binary):
        return _all_reads(e.lhs) + _all_reads(e.rhs)
    return _all_reads(e.x) if hasattr(e, "x") else []


def _read(scope: Scope, like: Access, joined: Scope) -> Access:
    """``joined`` read at the reader's iterators (its dims are in reader coordinates)."""
    del scope
    names = [next(iter(affine_terms(sympy.sympify(idx))[0])) for idx in like.indices]
    return Access(joined, tuple(iterator_symbol(n) for n in names))
