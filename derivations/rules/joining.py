"""Range joining: pieces of one computation over adjacent ranges become one scope.

Programs written in chunks (to bound memory, or by a library) compute one function in
pieces: ``torch.cat`` of per-chunk results, or a sum of per-chunk partial sums. Both show up
as a scope adding up reads of sub-scopes::

    O[t] = A[t] + B[t - 8]                      A, B over 0:8: a cat along t
    O[t] = A[t] + B[t]     A = sum[s in 0:8] F(s),  B = sum[s in 0:8] F(s + 8)

Each piece is put in *global coordinates*: its traversal in the reader's iterators (``B[t-8]``
is ``B'(t) = B(t - 8)`` over 8:16), each summation iterator shifted so that a reference read
has the same offset in every piece (``F(s + 8)`` over 0:8 is ``F(s)`` over 8:16), and the
re-indexings it reads (strided windows, padding) inlined. Pieces whose canonical forms then
agree, ranges aside, are one function; where their ranges tile one coordinate they become
one scope over the union::

    O[t] = J[t],  J over 0:16 (cat)        J = sum[s in 0:16] F(s)  (chunked sums)

Only exact tiling joins: a gap would be 0 in the pieces but not in the union, an overlap is
counted twice. All runs are joined in one step, so ``n`` chunks cost one result, not the
``n^2`` of joining pairs.

*One function of the loop index.* An unrolled loop (``torch.stack([f(x[i]) for i in
range(n)])``, which Dynamo hands over as ``n`` selects, ``n`` copies of ``f`` and a ``cat``)
leaves pieces one slot wide that differ only in constants: piece ``i`` reads ``x[i, ...]``.
On its slot the cat coordinate ``c`` *is* ``i``, so a constant that varies across the pieces
as ``a*i + b`` may be written ``a*c + b`` in each piece without changing it; once every
varying constant is, the pieces are one function and join as above::

    O[c, t] = P0[c, t] + P1[c - 1, t] + ...     Pi over c in 0:1 = f(x[i, t])
            = J[c, t],  J over 0:n = f(x[c, t])
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import sympy

from ir.canonical import fingerprint
from ir.nodes import (
    Access, Binary, BinOp, Const, Expr, Iter, Reduce, Scope, Unary, accesses, affine_terms,
    iterator_symbol,
)
from derivations.index_rules import fresh_name, scope_like, substitute
from derivations.rules.merging import inline_read, scope_reads

__all__ = ["join_ranges"]

INLINE_ROUNDS = 8  # re-indexings nest (pad -> contiguous -> window): inline a few deep
PLACEHOLDER = (0, 1)  # every range, when comparing pieces by their function alone


@dataclass(frozen=True)
class _Piece:
    term: int            # position among the reader's added terms
    names: tuple         # the reader iterator each traversal dim of the piece stands for
    scope: Scope         # the piece in global coordinates
    box: tuple           # its ranges: traversal dims, then summation iterators


def join_ranges(scope: Scope) -> list[Scope]:
    """``scope`` with every run of added pieces that tile one coordinate joined."""
    if scope.summation or scope.reduce is not Reduce.SUM:
        return []
    terms = _terms(scope.body)
    if terms is None:
        return []
    if len(terms) < 2:
        return _through_a_cat(scope)
    groups: dict[tuple, list[_Piece]] = defaultdict(list)
    for piece in _loop_indexed([p for n, t in enumerate(terms)
                                if (p := _piece(scope, n, t)) is not None]):
        groups[(piece.names, _function_key(piece.scope))].append(piece)
    replaced: dict[int, Expr | None] = {}
    for pieces in groups.values():
        for run, k in _runs(pieces):
            joined = _joined_read(run, k)
            if joined is not None:
                replaced[run[0].term] = joined
                replaced.update((p.term, None) for p in run[1:])
    if not replaced:
        return []
    kept = [replaced.get(n, t) for n, t in enumerate(terms)]
    kept = [t for t in kept if t is not None]
    body = kept[0]
    for t in kept[1:]:
        body = Binary(BinOp.ADD, body, t)
    out = scope_like(scope, scope.traversal, (), body)
    if len(kept) == 1 and not kept[0].source.summation:  # all joined: no copy left behind
        out = inline_read(out, kept[0]) or out
    return [out]


def _through_a_cat(scope: Scope) -> list[Scope]:
    """A scope that reads a cat (a scope adding up pieces) at other coordinates -- a stack
    is a cat of flat pieces read through a ``view``: ``R[i, j] = C[256*i + j]`` -- joins the
    pieces in its own coordinates, the cat inlined (one step, not one per piece inlined)."""
    for read in scope_reads(scope.body):
        src = read.source
        pieces = _terms(src.body) if not src.summation else None
        if pieces is None or len(pieces) < 2 or \
                not all(isinstance(p, Access) and isinstance(p.source, Scope) for p in pieces):
            continue
        inlined = inline_read(scope, read)
        if inlined is not None and len(_terms(inlined.body) or ()) >= 2:
            return join_ranges(inlined)
    return []


def _terms(e: Expr) -> list[Expr] | None:
    """The added terms of ``e`` (None if it subtracts: a sign would have to travel)."""
    if isinstance(e, Binary) and e.op is BinOp.ADD:
        a, b = _terms(e.lhs), _terms(e.rhs)
        return None if a is None or b is None else a + b
    if isinstance(e, Binary) and e.op is BinOp.SUB:
        return None
    return [e]


# -- pieces in global coordinates ---------------------------------------------------------------
def _piece(scope: Scope, n: int, term: Expr) -> _Piece | None:
    if not (isinstance(term, Access) and isinstance(term.source, Scope)):
        return None
    read = _through_copies(term)
    placed = _in_reader_coordinates(scope, read)
    if placed is None:
        return None
    names, q = placed
    q = _sums_anchored(_inline_layouts(q))
    box = tuple((it.lo, it.hi) for it in q.traversal + q.summation)
    return _Piece(n, names, q, box)


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
    constant, or a flattening of several (``P[256*i + j + c]``, see ``_digits``)."""
    src: Scope = read.source
    ranges = {it.name: (it.lo, it.hi) for it in scope.traversal}
    sub, traversal, used = {}, [], []
    for it, idx in zip(src.traversal, read.indices):
        terms = affine_terms(sympy.sympify(idx))
        if terms is None:
            return None
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
    return tuple(used), scope_like(src, traversal, src.summation, substitute(src.body, sub))


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


def _function_key(s: Scope) -> str:
    """What a piece computes, ranges aside."""
    its = lambda group: tuple(Iter(it.name, *PLACEHOLDER) for it in group)  # noqa: E731
    return fingerprint(scope_like(s, its(s.traversal), its(s.summation), s.body))


# -- one function of the loop index -------------------------------------------------------------
def _loop_indexed(pieces: list[_Piece]) -> list[_Piece]:
    """``pieces`` where those of one template (equal but for index constants, in the scopes
    they read too) that sit one slot wide along a coordinate ``d`` have each varying
    constant written as ``a*x_d + b`` (``x_d`` the piece's own iterator of ``d``, equal to
    its slot there): see the module doc."""
    templates: dict[tuple, list[int]] = defaultdict(list)
    for n, p in enumerate(pieces):
        templates[(p.names, _template(p.scope)[0])].append(n)
    out = list(pieces)
    for (_, key), members in templates.items():
        if len(members) < 2:
            continue
        group = [pieces[n] for n in members]
        consts = [_template(p.scope)[1] for p in group]
        for d in range(group[0].scope.rank):
            slots = [p.box[d][0] for p in group]
            if any(p.box[d][1] - p.box[d][0] != 1 for p in group) or len(set(slots)) < 2:
                continue
            fits = [_affine_fit(slots, [c[k] for c in consts]) for k in range(len(consts[0]))]
            if any(f is None for f in fits) or all(f[0] == 0 for f in fits):
                continue
            loop = (key, min(slots), max(slots) + 1)
            for n, p in zip(members, group):
                out[n] = _Piece(p.term, p.names, _with_loop_index(p.scope, d, fits, loop), p.box)
            break
    return out


def _template(s: Scope) -> tuple[str, tuple[int, ...]]:
    """(key of ``s`` with every index's constant term blanked -- in the scopes it reads too,
    as deep as they go -- and its own ranges, the constants in a fixed order)."""
    consts: list[int] = []
    memo: dict[int, Scope] = {}

    def blank_index(rest, c):
        consts.append(c)
        return rest

    def blank_source(src: Scope) -> Scope:
        if id(src) not in memo:
            memo[id(src)] = scope_like(src, src.traversal, src.summation,
                                       _recast(src.body, blank_index, blank_source))
        return memo[id(src)]

    body = _recast(s.body, blank_index, blank_source)
    its = lambda group: tuple(Iter(it.name, *PLACEHOLDER) for it in group)  # noqa: E731
    return fingerprint(scope_like(s, its(s.traversal), its(s.summation), body)), tuple(consts)


def _recast(e: Expr, index, source) -> Expr:
    """``e`` with every read's indices ``rest + c`` replaced by ``index(rest, c)`` and every
    scope it reads by ``source(scope)``, reads in ``accesses`` order (a scope's own reads
    when ``source`` first recasts it)."""
    def read(a: Access) -> Access:
        src = source(a.source) if isinstance(a.source, Scope) else a.source
        return Access(src, tuple(index(*_split_constant(i)) for i in a.indices))

    return _map_reads(e, read)


def _split_constant(i) -> tuple[sympy.Expr, int]:
    i = sympy.sympify(i)
    c, rest = i.as_coeff_Add()
    return (rest, int(c)) if c.is_Integer else (i, 0)


def _affine_fit(xs: list[int], ys: list[int]) -> tuple[int, int] | None:
    """Integers ``(a, b)`` with ``y = a*x + b`` for every pair, or None."""
    if len(set(ys)) == 1:
        return 0, ys[0]
    (x0, y0), (x1, y1) = (xs[0], ys[0]), next((x, y) for x, y in zip(xs, ys) if x != xs[0])
    if (y1 - y0) % (x1 - x0):
        return None
    a = (y1 - y0) // (x1 - x0)
    b = y0 - a * x0
    return (a, b) if all(y == a * x + b for x, y in zip(xs, ys)) else None


def _with_loop_index(s: Scope, d: int, fits: list[tuple[int, int]], loop: tuple) -> Scope:
    """``s`` with its ``k``-th index constant replaced by ``a*x + b`` (``fits[k]``), ``x`` the
    loop index: ``x_d`` in ``s`` itself. A scope it reads whose constants vary gets the loop
    index as a new first dim (``M_k[r, j]`` -> ``M[x, r, j]``, ``M[l, r, j]`` computing
    piece ``l``'s ``M_l``): the pieces then read one scope, the loop batched into it.
    ``loop``: (template key, first and last slot + 1) of the pieces, naming that dim."""
    k = iter(range(len(fits)))
    memo: dict[int, tuple[Scope, bool]] = {}

    def rebuild(e: Expr, x) -> tuple[Expr, bool]:
        varied = False

        def index(rest, c):
            nonlocal varied
            slope, offset = fits[next(k)]
            varied |= slope != 0
            return rest + slope * x + offset

        def source(src: Scope) -> Scope:
            if id(src) not in memo:
                it = Iter(fresh_name("l", "loop", _template(src)[0], *loop), loop[1], loop[2])
                body, inner = rebuild(src.body, it.symbol)
                batched = scope_like(src, (it,) + src.traversal, src.summation, body)
                memo[id(src)] = (batched, inner)
            return memo[id(src)][0] if memo[id(src)][1] else src

        def read(a: Access) -> Access:
            nonlocal varied
            src = source(a.source) if isinstance(a.source, Scope) else a.source
            idx = tuple(index(*_split_constant(i)) for i in a.indices)
            if src is not a.source:  # the batched scope, read at this piece's loop index
                varied, idx = True, (x,) + idx
            return Access(src, idx)

        return _map_reads(e, read), varied

    body, _ = rebuild(s.body, s.traversal[d].symbol)
    return scope_like(s, s.traversal, s.summation, body)


def _map_reads(e: Expr, fn) -> Expr:
    """``e`` with every access replaced by ``fn(access)``, in ``accesses`` order."""
    if isinstance(e, Access):
        return fn(e)
    if isinstance(e, Binary):
        return Binary(e.op, _map_reads(e.lhs, fn), _map_reads(e.rhs, fn))
    if isinstance(e, Unary):
        return Unary(e.op, _map_reads(e.x, fn))
    return e


# -- runs and their join --------------------------------------------------------------------
def _runs(pieces: list[_Piece]) -> list[tuple[list[_Piece], int]]:
    """Runs of two or more pieces that tile one coordinate ``k`` (all else equal)."""
    out, run, k = [], [], None
    for p in sorted(pieces, key=lambda p: p.box):
        step = _tiles(run[-1].box, p.box) if run else None
        if run and step is not None and k in (None, step):
            run.append(p)
            k = step
            continue
        if len(run) > 1:
            out.append((run, k))
        run, k = [p], None
    if len(run) > 1:
        out.append((run, k))
    return out


def _tiles(a: tuple, b: tuple) -> int | None:
    """The one coordinate along which box ``b`` continues box ``a``, if any."""
    differ = [k for k, (x, y) in enumerate(zip(a, b)) if x != y]
    if len(differ) == 1 and a[differ[0]][1] == b[differ[0]][0]:
        return differ[0]
    return None


def _joined_read(run: list[_Piece], k: int) -> Access | None:
    """One scope over the run's union along coordinate ``k``, read at the reader's
    iterators (its traversal is in reader coordinates)."""
    first = run[0].scope
    lo, hi = run[0].box[k][0], run[-1].box[k][1]
    its = list(first.traversal + first.summation)
    if k >= first.rank and first.reduce is not Reduce.SUM:
        return None  # only a sum splits into partial sums
    wide = Iter(fresh_name(its[k].name, "joined", lo, hi), lo, hi)
    body = substitute(first.body, {its[k].name: wide.symbol})
    its[k] = wide
    fresh = {it.name: Iter(fresh_name(it.name, "joined", it.lo, it.hi), it.lo, it.hi)
             for it in its[:first.rank] if it is not wide}
    body = substitute(body, {n: it.symbol for n, it in fresh.items()})
    traversal = [fresh.get(it.name, it) for it in its[:first.rank]]
    joined = scope_like(first, traversal, its[first.rank:], body)
    return Access(joined, tuple(iterator_symbol(n) for n in run[0].names))
