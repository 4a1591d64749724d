"""Variable substitution with summation splitting (EinNet's core intra-expression rule).

For a contraction ``O[t] = sum[S] prod(F)`` and a nonempty proper subset ``S2`` of its
summation iterators, the factors that read ``S2`` move into an inner scope summed over
``S2``. Its traversal iterators stand for the *maximal index sub-expressions* of those
factors that do not involve ``S2``: a plain iterator stays itself, anything else (``h+r-1``,
a floor/mod expression) becomes a fresh iterator ranging exactly over the values the
sub-expression takes, narrowed to where the inner product can be nonzero::

    O[n,f,h,w] = sum[c,r,s] I[n,c,h+r-1,w+s-1] * K[f,c,r,s]            S2 = {c}
      =  sum[r,s] W[n, h+r-1, w+s-1, f, r, s]                             (offset-reduce)
         W[n,x,y,f,r,s] = sum[c] I[n,c,x,y] * K[f,c,r,s]    x, y in 0:7    (a Matmul)

Soundness: the outer reads ``W`` at the sub-expressions' values; a value outside ``W``'s
range reads 0, and ranges are only narrowed to exclude values at which a read that zeroes
the product (``zero_guards``) is out of bounds for every value of the rest of its index.
When every sub-expression is a plain iterator this is summation splitting by name, which the
egglog ``split`` rule already does: such choices are skipped.
"""
from __future__ import annotations

from itertools import combinations

import sympy

from ir.nodes import Access, Iter, Reduce, Scope, accesses, free_iterators
from derivations.index_rules import (
    build_product, fresh_name, hint_of, index_bounds, map_indices, product_factors, scope_like,
    zero_guards,
)

MAX_SUMMATION = 6  # subsets of at most this many summation iterators are tried


def substitutions(scope: Scope) -> list[Scope]:
    """Every (useful) substitution + summation split of ``scope``, one per subset ``S2``."""
    if scope.reduce is not Reduce.SUM or not 2 <= len(scope.summation) <= MAX_SUMMATION:
        return []
    names = [it.name for it in scope.summation]
    out = []
    for k in range(1, len(names)):
        for s2 in combinations(names, k):
            result = substitute_split(scope, frozenset(s2))
            if result is not None:
                out.append(result)
    return out


def substitute_split(scope: Scope, s2: frozenset[str]) -> Scope | None:
    """``scope`` with the factors reading ``s2`` summed in an inner scope, or None."""
    factors = product_factors(scope.body)
    inner = [f for f in factors if free_iterators(f) & s2]
    outer = [f for f in factors if not free_iterators(f) & s2]
    if not inner:
        return None
    ranges = {it.name: (it.lo, it.hi) for it in scope.traversal + scope.summation}
    order: list[sympy.Expr] = []  # the maximal sub-expressions, by first appearance
    for f in inner:
        for a in accesses(f):
            for i in a.indices:
                _collect(sympy.sympify(i), s2, order)
    if all(e.is_Symbol for e in order):
        return None  # plain summation splitting: the egglog split rule's job
    iters: list[Iter] = []
    sub: dict[sympy.Expr, sympy.Expr] = {}
    for e in order:
        if e.is_Symbol:
            lo, hi = ranges[e.name]
            iters.append(Iter(e.name, lo, hi))
            continue
        lo, hi = _narrow(e, index_bounds(e, ranges), inner, s2, ranges)
        lo, hi = (lo, hi) if lo < hi else (0, 0)
        iters.append(Iter(fresh_name(hint_of(e), e, lo, hi), lo, hi))
        sub[e] = iters[-1].symbol
    body = build_product([map_indices(f, lambda i: _rewrite(sympy.sympify(i), s2, sub))
                          for f in inner])
    summed = [it for it in scope.summation if it.name in s2]
    w = Scope(tuple(iters), tuple(summed), body, Reduce.SUM,
              name=f"{scope.name or 'S'}_inner", dtype=scope.dtype)
    read = Access(w, tuple(order))
    rest = [it for it in scope.summation if it.name not in s2]
    return scope_like(scope, scope.traversal, rest, build_product(outer + [read]))


def _names(e: sympy.Expr) -> set[str]:
    return {s.name for s in e.free_symbols}


def _free_part(e: sympy.Expr, s2) -> sympy.Expr | None:
    """The part of ``e`` not involving ``s2`` when ``e`` is that part plus ``s2`` terms."""
    if not _names(e) & s2:
        return e
    if isinstance(e, sympy.Add):
        free = sympy.Add(*[a for a in e.args if not _names(a) & s2])
        return free if _integral(free) else None
    return None


def _integral(e: sympy.Expr) -> bool:
    """Integer coefficients only (``h/2`` inside a floor is no index of its own)."""
    return all(c.is_Integer for c in sympy.expand(e).as_coefficients_dict().values())


def _floor_parts(e: sympy.Expr):
    """``floor(num/den)`` as ``(num, den)``, else None."""
    if isinstance(e, sympy.floor):
        num, den = e.args[0].as_numer_denom()
        if den.is_Integer:
            return num, den
    return None


def _collect(e: sympy.Expr, s2, order: list) -> None:
    """Append to ``order`` the maximal sub-expressions of ``e`` not involving ``s2`` (those
    that read iterators: constants stay where they are)."""
    if not _names(e):
        return
    free = _free_part(e, s2)
    if free is not None and _names(free):
        if free not in order:
            order.append(free)
    if not _names(e) & s2:
        return
    parts = _floor_parts(e)
    for a in (parts[0],) if parts else e.args:
        if _names(a) & s2:
            _collect(a, s2, order)


def _rewrite(e: sympy.Expr, s2, sub: dict) -> sympy.Expr:
    """``e`` with each maximal sub-expression replaced by its iterator (plain ones stay)."""
    if not _names(e):
        return e
    if not _names(e) & s2:
        return sub.get(e, e)
    if e.is_Symbol:
        return e
    free = _free_part(e, s2)
    if isinstance(e, sympy.Add) and free is not None:
        bound = [_rewrite(a, s2, sub) for a in e.args if _names(a) & s2]
        return sympy.Add(sub.get(free, free), *bound)
    parts = _floor_parts(e)
    if parts:
        return sympy.floor(_rewrite(parts[0], s2, sub) / parts[1])
    return e.func(*[_rewrite(a, s2, sub) for a in e.args])


def _narrow(e, bounds, inner, s2, ranges) -> tuple[int, int]:
    """``bounds`` of sub-expression ``e`` narrowed to the values at which every zero-guard
    read ``A[..., e + g, ...]`` (``g`` over ``s2`` only) can be in bounds."""
    lo, hi = bounds
    for f in inner:
        for a in zero_guards(f):
            for idx, (dlo, dhi) in zip(a.indices, a.source.bounds()):
                idx = sympy.sympify(idx)
                if _free_part(idx, s2) != e:
                    continue
                rest = sympy.expand(idx - e)
                if _names(rest) - s2:
                    continue
                rlo, rhi = index_bounds(rest, ranges)
                if rhi > rlo:
                    lo, hi = max(lo, dlo - (rhi - 1)), min(hi, dhi - rlo)
    return lo, hi


__all__ = ["substitutions", "substitute_split"]
