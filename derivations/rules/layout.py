"""Data-layout transformations (EinNet): re-index a source through a layout eOperator ``L``
so that an access reads ``L`` at simpler indices, plus traversal merging and the fusion of
chained layout eOperators. Index rules ``Scope -> Iterable[Scope]`` like
:mod:`derivations.rules.iterator_split`; every result equals its input, reads out of bounds
included (a read outside a source is 0, and so is a read outside ``L``).

* layout split -- a dim read at ``a*X + Y`` with ``Y`` spanning at most ``a`` values::

      x[.., a*X + Y, ..]  =  L[.., Y, X, ..]     L[.., y, t, ..] = x[.., a*t + y, ..]

  ``y`` ranges over Y's values, ``t`` over exactly those quotients for which some ``a*t + y``
  is inside ``x`` (outside, both sides read 0). A constant Y drops the ``y`` dim (a strided
  slice: ``L[t] = x[a*t + y0]``).
* layout merge -- two dims read at ``(floor(E/Q) + al, E%Q + be)``::

      x[.., floor(E/Q) + al, .., E%Q + be, ..] = L[.., E, ..]
      L[.., m, ..] = x[.., floor(m/Q) + al, .., m%Q + be, ..]   m in (lo-al)*Q:(hi-al)*Q

* layout permute -- ``x[e_p(0), .., e_p(n-1)] = L[e_0, .., e_(n-1)]``, ``L[u] = x[u_p]``, with the
  dims put in the order of the reading scope's iterators.
* traversal merging -- traversal iterators ``p, q`` read together, plainly, by every access
  that reads them become one ``m = (p-lo_p)*Q + (q-lo_q)``; the accesses are layout-merged
  and a layout eOperator restores the output:
  ``S[.., p, .., q, ..] = S'[.., (p-lo_p)*Q + q-lo_q, ..]``.
* layout fusion -- ``R[t] = P[h(t)]`` with ``P[u] = x[g(u)]`` is ``R[t] = x[g(h(t))]`` when
  every ``h(t)`` outside ``P``'s box makes ``g`` read outside ``x`` too.
"""
from __future__ import annotations

import math
from typing import Iterator

import sympy

from ir.nodes import Access, Iter, Scope, accesses, affine_terms

from derivations.index_rules import SEP, STEERED, IndexRule, fresh_name
from derivations.rules.iterator_split import (
    decompose, index_range, is_layout, map_accesses, ranges_of, reads_outside,
    rewrite_indices, simplify_index, subst, tagged,
)

__all__ = [
    "layout_splits", "layout_merges", "layout_permutes", "merge_traversals", "fuse_layouts",
    "split_dim", "merge_dims", "permute_dims", "merge", "fuse", "fuse_chain", "merge_pairs",
    "LAYOUT_RULES",
]


def _layout(src, traversal: tuple[Iter, ...], idx) -> Scope:
    """``L[traversal] = src[idx]``, fused into ``src`` when ``src`` is itself a layout."""
    out = Scope(traversal, (), Access(src, tuple(idx)), name=tagged(getattr(src, "name", None),
                "layout"), dtype=src.dtype)
    return fuse(out) or out


def _key(src, *how) -> tuple:
    """What a layout eOperator stands for: its source and how it re-indexes it. A decoded
    scope's iterator names are unique in the e-graph, so they identify it."""
    if isinstance(src, Scope):
        return ("scope", tuple(it.name for it in src.traversal + src.summation), src.bounds(), how)
    return ("tensor", src.name, src.shape, how)


def _it(hint: str, lo: int, hi: int, key: tuple) -> Iter:
    """A layout eOperator's iterator, named for the eOperator, its role and its range: equal
    layouts of a source get equal names, different ones never share a name."""
    return Iter(fresh_name(hint, key, hint, lo, hi), lo, hi)


def _dims(src, key: tuple) -> list[Iter]:
    """One iterator per dim of ``src``, over its bounds."""
    return [_it(f"u{d}", lo, hi, key) for d, (lo, hi) in enumerate(src.bounds())]


def _replace(scope: Scope, old: Access, new: Access) -> Scope:
    body = map_accesses(scope.body, lambda a: new if a == old else a)
    return Scope(scope.traversal, scope.summation, body, scope.reduce, name=scope.name,
                 dtype=scope.dtype)


# -- layout split ------------------------------------------------------------------------------
def split_dim(acc: Access, d: int, a: int, ranges) -> Access | None:
    """``acc`` reading a layout eOperator that splits dim ``d`` by ``a``, or None."""
    e = acc.indices[d]
    if a < 2 or affine_terms(e) is None:
        return None
    x, y = decompose(e, a)
    ylo, yhi = index_range(y, ranges)
    if not x.free_symbols or yhi - ylo + 1 > a:
        return None
    blo, bhi = acc.source.bounds()[d]
    tlo, thi = -((yhi - blo) // a), (bhi - 1 - ylo) // a + 1   # ceil((blo-yhi)/a), ...
    if thi <= tlo:
        return None  # every read is out of bounds: not a layout question
    key = _key(acc.source, "split", d, a, ylo, yhi, tlo, thi, bool(y.free_symbols))
    dims = _dims(acc.source, key)
    t = _it("t", tlo, thi, key)
    ydim = [_it("y", ylo, yhi + 1, key)] if y.free_symbols else []
    src_idx = [u.symbol for u in dims]
    src_idx[d] = a * t.symbol + (ydim[0].symbol if ydim else y)
    trav = tuple(dims[:d]) + tuple(ydim) + (t,) + tuple(dims[d + 1:])
    L = _layout(acc.source, trav, src_idx)
    idx = acc.indices[:d] + ((y,) if ydim else ()) + (x,) + acc.indices[d + 1:]
    return Access(L, idx)


def _split_factors(e: sympy.Expr) -> set[int]:
    """Factors worth trying on one index: each coefficient above 1 and their gcd."""
    aff = affine_terms(e)
    big = [abs(c) for c in (aff[0].values() if aff else ()) if abs(c) > 1]
    return set(big) | ({math.gcd(*big)} if big else set())


def layout_splits(scope: Scope) -> Iterator[Scope]:
    if is_layout(scope):
        return  # re-indexing an eOperator's read only chains eOperators (fusion undoes it)
    ranges = ranges_of(scope)
    for acc in dict.fromkeys(accesses(scope.body)):
        for d, e in enumerate(acc.indices):
            for a in sorted(_split_factors(e)):
                new = split_dim(acc, d, a, ranges)
                if new is not None:
                    yield _replace(scope, acc, new)


# -- layout merge ------------------------------------------------------------------------------
def _floor_mod(e: sympy.Expr):
    """``("floor"|"mod", E, Q, const)`` when ``e = floor(E/Q) + const`` or ``E%Q + const``."""
    terms = sympy.Add.make_args(e)
    core = [t for t in terms if not t.is_Integer]
    if len(core) != 1:
        return None
    const = int(sum(t for t in terms if t.is_Integer))
    (c,) = core
    if isinstance(c, sympy.floor):
        num, den = c.args[0].as_numer_denom()
        return ("floor", sympy.expand(num), int(den), const) if den.is_Integer else None
    if isinstance(c, sympy.Mod) and c.args[1].is_Integer:
        return ("mod", sympy.expand(c.args[0]), int(c.args[1]), const)
    return None


def merge_dims(acc: Access, d1: int, d2: int) -> Access | None:
    """``acc`` reading a layout eOperator that merges dims ``d1`` (``floor(E/Q) + al``) and
    ``d2`` (``E%Q + be``) into one dim read at ``E``, or None."""
    f, m = _floor_mod(acc.indices[d1]), _floor_mod(acc.indices[d2])
    if not f or not m or f[0] != "floor" or m[0] != "mod" or f[1:3] != m[1:3] or d1 == d2:
        return None
    _, e, q, al = f
    be = m[3]
    lo, hi = acc.source.bounds()[d1]
    key = _key(acc.source, "merge", d1, d2, q, al, be)
    dims = _dims(acc.source, key)
    w = _it("m", (lo - al) * q, (hi - al) * q, key)
    src_idx = [u.symbol for u in dims]
    src_idx[d1], src_idx[d2] = sympy.floor(w.symbol / q) + al, sympy.Mod(w.symbol, q) + be
    trav = tuple(w if k == d1 else u for k, u in enumerate(dims) if k != d2)
    L = _layout(acc.source, trav, src_idx)
    return Access(L, tuple(e if k == d1 else i for k, i in enumerate(acc.indices) if k != d2))


def _merged(acc: Access) -> Access:
    """``acc`` with every (floor, mod) pair of dims merged, repeatedly."""
    while True:
        n = len(acc.indices)
        new = next((x for d1 in range(n) for d2 in range(n)
                    if (x := merge_dims(acc, d1, d2)) is not None), None)
        if new is None:
            return acc
        acc = new


def layout_merges(scope: Scope) -> Iterator[Scope]:
    if is_layout(scope):
        return
    for acc in dict.fromkeys(accesses(scope.body)):
        n = len(acc.indices)
        for d1 in range(n):
            for d2 in range(n):
                new = merge_dims(acc, d1, d2)
                if new is not None:
                    yield _replace(scope, acc, new)


# -- layout permute ----------------------------------------------------------------------------
def permute_dims(acc: Access, perm: tuple[int, ...]) -> Access:
    """``acc`` reading ``L[u] = src[u_perm^-1]`` whose dim ``k`` is the source's ``perm[k]``."""
    dims = _dims(acc.source, _key(acc.source, "permute", perm))
    trav = tuple(dims[p] for p in perm)
    L = _layout(acc.source, trav, [u.symbol for u in dims])
    return Access(L, tuple(acc.indices[p] for p in perm))


def layout_permutes(scope: Scope) -> Iterator[Scope]:
    if is_layout(scope):
        return
    order = {it.name: k for k, it in enumerate(scope.traversal + scope.summation)}
    for acc in dict.fromkeys(accesses(scope.body)):
        lead = [min((order[s.name] for s in e.free_symbols), default=len(order))
                for e in acc.indices]
        perm = tuple(sorted(range(len(lead)), key=lambda d: (lead[d], d)))
        if len(perm) > 1 and perm != tuple(range(len(perm))):
            yield _replace(scope, acc, permute_dims(acc, perm))


# -- traversal merging -------------------------------------------------------------------------
def _plain_dim(acc: Access, name: str) -> int | None:
    """The one dim of ``acc`` reading iterator ``name``, when read as ``name + const``."""
    dims = [d for d, e in enumerate(acc.indices) if name in {s.name for s in e.free_symbols}]
    if len(dims) != 1:
        return None
    aff = affine_terms(acc.indices[dims[0]])
    return dims[0] if aff is not None and aff[0] == {name: 1} else None


def merge_pairs(scope: Scope) -> list[tuple[str, str]]:
    """Traversal pairs ``(p, q)`` read together, plainly and p's dim first, wherever read."""
    names = [it.name for it in scope.traversal]
    reads = list(dict.fromkeys(accesses(scope.body)))
    pairs = []
    for p in names:
        for q in names:
            ok, seen = p != q, False
            for acc in reads:
                free = {s.name for e in acc.indices for s in e.free_symbols}
                if not ({p, q} & free) or not ok:
                    continue
                dp, dq = _plain_dim(acc, p), _plain_dim(acc, q)
                ok = dp is not None and dq is not None and (seen or dp < dq)
                seen = True
            if ok and seen:
                pairs.append((p, q))
    return pairs


def merge(scope: Scope, p: str, q: str) -> Scope:
    """``scope`` with traversal iterators ``p`` and ``q`` merged (accesses layout-merged)."""
    ip, iq = scope.iterators[p], scope.iterators[q]
    qe = iq.extent
    hint = p.split(SEP)[0] + q.split(SEP)[0]
    m = Iter(fresh_name(hint, p, ip.lo, ip.hi, q, iq.lo, iq.hi), 0, ip.extent * qe)
    ranges = {**ranges_of(scope), m.name: (m.lo, m.hi)}
    sub = {ip.symbol: sympy.floor(m.symbol / qe) + ip.lo,
           iq.symbol: sympy.Mod(m.symbol, qe) + iq.lo}
    body = map_accesses(rewrite_indices(scope.body, sub, ranges), _merged)
    trav = tuple(m if t.name == p else t for t in scope.traversal if t.name != q)
    inner = Scope(trav, scope.summation, body, scope.reduce, name=tagged(scope.name, "inner"),
                  dtype=scope.dtype)
    idx = [(ip.symbol - ip.lo) * qe + iq.symbol - iq.lo if t.name == p else t.symbol
           for t in scope.traversal if t.name != q]
    return Scope(scope.traversal, (), Access(inner, tuple(idx)), name=scope.name, dtype=scope.dtype)


def merge_traversals(scope: Scope) -> Iterator[Scope]:
    if is_layout(scope):
        return
    for p, q in merge_pairs(scope):
        yield merge(scope, p, q)


# -- layout fusion -----------------------------------------------------------------------------
def fuse(scope: Scope) -> Scope | None:
    """``R[t] = P[h(t)]``, ``P[u] = x[g(u)]`` as ``R[t] = x[g(h(t))]``, or None when a point
    outside ``P``'s box might read inside ``x`` (then ``P``'s 0 is not ``x``'s value)."""
    if not is_layout(scope) or not isinstance(scope.body.source, Scope) or \
            not is_layout(scope.body.source):
        return None
    h, P = scope.body.indices, scope.body.source
    inner = P.body
    try:
        spans = [index_range(e, ranges_of(scope)) for e in h]
    except ValueError:
        return None
    full = {u.name: (lo, hi + 1) for u, (lo, hi) in zip(P.traversal, spans)}
    for u, (lo, hi) in zip(P.traversal, spans):
        for part in ((lo, min(hi, u.lo - 1)), (max(lo, u.hi), hi)):
            outside = {**full, u.name: (part[0], part[1] + 1)}
            if part[0] <= part[1] and not reads_outside(inner, outside):
                return None
    sub = {u.symbol: e for u, e in zip(P.traversal, h)}
    ranges = ranges_of(scope)
    idx = tuple(simplify_index(subst(e, sub), ranges) for e in inner.indices)
    return Scope(scope.traversal, (), Access(inner.source, idx), scope.reduce, name=scope.name,
                 dtype=scope.dtype)


def fuse_chain(scope: Scope) -> Scope:
    """``scope`` with the chain of layout eOperators at its top fused as far as exact."""
    while (out := fuse(scope)) is not None:
        scope = out
    return scope


def fuse_layouts(scope: Scope) -> Iterator[Scope]:
    out = fuse_chain(scope)
    if out is not scope:
        yield out


LAYOUT_SPLIT = IndexRule(
    "layout_split", "data layout: a dim read at a*X + Y becomes dims (Y, X) of a layout eOperator",
    layout_splits, kind=STEERED)
# x[.., a*X + Y, ..] = L[.., Y, X, ..],  L[.., y, t, ..] = x[.., a*t+y, ..]
LAYOUT_MERGE = IndexRule(
    "layout_merge", "data layout: dims read at (E//Q, E%Q) become one dim read at E",
    layout_merges, kind=STEERED)
# x[E//Q + al, E%Q + be] = L[E],  L[m] = x[m//Q + al, m%Q + be]
LAYOUT_PERMUTE = IndexRule(
    "layout_permute", "data layout: a source's dims reordered as the reading scope's iterators",
    layout_permutes, kind=STEERED,
    default=False)  # it fires on most scopes and finds nothing the matchers need: they are
#                     blind to dim order.  x[e_p(0), .., e_p(n-1)] = L[e_0, ..],  L[u] = x[u_p]
MERGE_TRAVERSAL = IndexRule(
    "merge_traversal", "traversal merging: two iterators every read takes together become one",
    merge_traversals, kind=STEERED)
# S[p, q] = S'[p*Q + q],  S'[m] = S[m//Q, m%Q] with reads layout-merged
FUSE_LAYOUT = IndexRule(
    "fuse_layout", "eOperator fusion: a re-indexing of a re-indexing is one re-indexing",
    fuse_layouts)       # R[t] = P[h(t)], P[u] = x[g(u)]  =>  R[t] = x[g(h(t))]
LAYOUT_RULES = (LAYOUT_SPLIT, LAYOUT_MERGE, LAYOUT_PERMUTE, MERGE_TRAVERSAL, FUSE_LAYOUT)
