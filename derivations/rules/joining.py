"""Range joining: pieces of one computation over adjacent ranges become one scope.

Programs written in chunks (to bound memory, or by a library) compute one function in
pieces: ``torch.cat`` of per-chunk results, or a sum of per-chunk partial sums. Both show up
as a scope adding up reads of sub-scopes::

    O[t] = A[t] + B[t - 8]                      A, B over 0:8: a cat along t
    O[t] = A[t] + B[t]     A = sum[s in 0:8] F(s),  B = sum[s in 0:8] F(s + 8)

Each piece is put in *global coordinates* (:mod:`derivations.rules.pieces`): its traversal
in the reader's iterators, its sums anchored, the re-indexings it reads inlined. Pieces that
then compute one function, ranges aside, and tile one coordinate become one scope over the
union::

    O[t] = J[t],  J over 0:16 (cat)        J = sum[s in 0:16] F(s)  (chunked sums)

Only exact tiling joins: a gap would be 0 in the pieces but not in the union, an overlap is
counted twice. All runs are joined in one step, so ``n`` chunks cost one result, not the
``n^2`` of joining pairs. The pieces of an unrolled loop differ in constants that vary with
the loop index: :mod:`derivations.rules.loop_index` writes them as one function first.
"""
from __future__ import annotations

from collections import defaultdict

import sympy

from ir.nodes import Access, Binary, BinOp, Expr, Iter, Reduce, Scope, iterator_symbol
from derivations.index_rules import fresh_name, scope_like, substitute
from derivations.rules.loop_index import loop_indexed
from derivations.rules.merging import inline_read, scope_reads
from derivations.rules.pieces import INLINE_ROUNDS, Piece, function_key, piece

__all__ = ["join_ranges"]


def join_ranges(scope: Scope) -> list[Scope]:
    """``scope`` with every run of added pieces that tile one coordinate joined."""
    if scope.summation or scope.reduce is not Reduce.SUM:
        return []
    joined = _join(scope)
    if joined is None:
        spliced = _spliced(scope)
        joined = _join(spliced) if spliced is not None else None
    return [] if joined is None else [joined]


def _join(scope: Scope) -> Scope | None:
    terms = _terms(scope.body)
    if terms is None or len(terms) < 2:
        return None
    groups: dict[tuple, list[Piece]] = defaultdict(list)
    for p in loop_indexed([p for n, t in enumerate(terms)
                           if (p := piece(scope, n, t)) is not None]):
        groups[(p.names, function_key(p.scope))].append(p)
    _adopt(groups)
    replaced: dict[int, Expr | None] = {}
    for pieces in groups.values():
        for run, k in _runs(pieces):
            joined = _joined_read(run, k)
            if joined is not None:
                replaced[run[0].term] = joined
                replaced.update((p.term, None) for p in run[1:])
    if not replaced:
        return None
    kept = [replaced.get(n, t) for n, t in enumerate(terms)]
    kept = [t for t in kept if t is not None]
    body = kept[0]
    for t in kept[1:]:
        body = Binary(BinOp.ADD, body, t)
    out = scope_like(scope, scope.traversal, (), body)
    if len(kept) == 1:  # all joined: no copy of the joined scope left behind
        out = inline_read(out, kept[0]) or out
    return out


def _spliced(scope: Scope) -> Scope | None:
    """``scope`` with the reads among its terms of scopes that add up pieces themselves
    inlined, so that all the pieces are terms of one sum: a stack is a cat read through a
    ``view`` (``R[i, j] = C[256*i + j]``), a loop of partial sums adds the last one to the sum
    of the others (``T = add + part``). None if there is no such read."""
    out = scope
    for _ in range(INLINE_ROUNDS):
        terms = _terms(out.body) or []
        reads = terms if len(terms) > 1 else scope_reads(out.body)
        for read in reads:
            if isinstance(read, Access) and isinstance(read.source, Scope) and \
                    _adds_pieces(read.source) and (inlined := inline_read(out, read)):
                out = inlined
                break
        else:
            break
    return out if out is not scope and len(_terms(out.body) or ()) >= 2 else None


def _adds_pieces(s: Scope) -> bool:
    terms = _terms(s.body) if not s.summation else None
    return bool(terms) and len(terms) >= 2 and all(
        isinstance(t, Access) and isinstance(t.source, Scope) for t in terms)


# -- a piece one point wide --------------------------------------------------------------------
def _adopt(groups: dict[tuple, list[Piece]]) -> None:
    """A lone piece one point wide along a coordinate where another group's function, taken
    at that point, is the piece's, joins that group: the last chunk of a chunked loop is
    spelled apart (a chunk of one band offset is an elementwise product and a sum over one
    column, or no sum at all, not the einsum of the others)."""
    for key, members in list(groups.items()):
        if len(members) != 1:
            continue
        for other, group in groups.items():
            if other != key and other[0] == key[0] and group:
                adopted = _as_member(members[0], group)
                if adopted is not None:
                    group.append(adopted)
                    del groups[key]
                    break


def _as_member(p: Piece, group: list[Piece]) -> Piece | None:
    """``p`` as a piece of ``group``'s function over ``p``'s point, or None."""
    g = group[0]
    rank = g.scope.rank
    if p.scope.rank != rank:
        return None
    if len(p.box) == len(g.box):  # one point along a traversal coordinate
        differ = [d for d in range(len(g.box)) if p.box[d] != g.box[d]]
        if len(differ) != 1 or differ[0] >= rank or p.box[differ[0]][1] - p.box[differ[0]][0] != 1:
            return None
        d, v = differ[0], p.box[differ[0]][0]
        if function_key(_at(g.scope, d, v)) == function_key(_at(p.scope, d, v)):
            return Piece(p.term, g.names, g.scope, p.box)
        return None
    if len(p.box) != len(g.box) - 1:  # a sum over one point, written without it
        return None
    key = function_key(p.scope)
    for m in range(rank, len(g.box)):
        if p.box != g.box[:m] + g.box[m + 1:]:
            continue
        lo, hi = min(q.box[m][0] for q in group), max(q.box[m][1] for q in group)
        for v in (hi, lo - 1):
            if function_key(_at(g.scope, m, v)) == key:
                return Piece(p.term, g.names, g.scope, g.box[:m] + ((v, v + 1),) + g.box[m + 1:])
    return None


def _at(s: Scope, coord: int, v: int) -> Scope:
    """``s`` at ``v`` along its ``coord``-th iterator (traversal, then summation)."""
    it = (s.traversal + s.summation)[coord]
    body = substitute(s.body, {it.name: sympy.Integer(v)})
    return scope_like(s, [t for t in s.traversal if t is not it],
                      [t for t in s.summation if t is not it], body)


def _terms(e: Expr) -> list[Expr] | None:
    """The added terms of ``e`` (None if it subtracts: a sign would have to travel)."""
    if isinstance(e, Binary) and e.op is BinOp.ADD:
        a, b = _terms(e.lhs), _terms(e.rhs)
        return None if a is None or b is None else a + b
    if isinstance(e, Binary) and e.op is BinOp.SUB:
        return None
    return [e]


# -- runs and their join --------------------------------------------------------------------
def _runs(pieces: list[Piece]) -> list[tuple[list[Piece], int]]:
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


def _joined_read(run: list[Piece], k: int) -> Access | None:
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
