"""Traversal merging: a scope read positionally is inlined into its reader.

``O[t] = sum[s] F * S[e(t,s)]`` with ``S[u] = sum[k] G(u, k)`` becomes
``O[t] = sum[s, k'] F * G(e(t,s), k')`` (``k`` renamed where it would clash); a scope without
summation (a gather, an upsample, an elementwise map) is inlined wherever it is read. This
generalises the name-based egglog ``inline`` to reads at any index expression.

A contraction read as a repeated factor, or raised to a small integer power, is inlined one
copy at a time, each copy with its own summation iterators (distributivity):
``(sum[k] G(k))**2 = sum[k, l] G(k) * G(l)``. The squared norm of a product,
``sum[i,j] (sum[k] A[i,k] B[k,j])**2``, becomes ``sum[k,l] (sum[i] A[i,k] A[i,l]) *
(sum[j] B[k,j] B[l,j])`` by the egglog ``split``: ``tr((AᵀA)(BBᵀ))``.

The catch is the out-of-bounds rule: ``S[u]`` is 0 for ``u`` outside ``S``'s range, but
``G(u, k)`` need not be (the upsample ``x[u//2 + 2*(u%2)]`` reads ``x[1]`` at ``u = -1``).
Per dim of ``S``: if the reader's index stays inside the range, nothing is needed; else if
``G`` is already zero at every outside value it takes (``zero_everywhere``: some read of ``G`` is
out of bounds there), nothing is needed; else the guard is made explicit in the index of a
read that zeroes ``G``: ``A[.., a(u) + K*floor((u - lo)/(hi - lo)), ..]``, where the floor
is 0 exactly inside the range and ``K`` exceeds the spread of ``a`` and the dim, so any
other value reads out of bounds (0). If ``G`` has no such read, the rule does not apply.
"""
from __future__ import annotations

import sympy

from ir.nodes import Access, Binary, Reduce, Scope, Unary, integer_power
from ir.index_math import simplify_index
from derivations.index_rules import (
    build_product, index_bounds, map_indices, product_factors, renamed, scope_like, substitute,
    zero_everywhere, zero_guards,
)

__all__ = ["inline_reads", "inline_read", "inlined", "scope_reads"]


def inline_reads(scope: Scope) -> list[Scope]:
    """``scope`` with each scope it reads inlined (one result per read that can be)."""
    out, done = [], set()
    for f in scope_reads(scope.body):
        if f in done:
            continue
        done.add(f)
        r = inline_read(scope, f)
        if r is not None:
            out.append(r)
    return out


def scope_reads(e) -> list[Access]:
    """The reads of scopes in a body expression (not inside the scopes read)."""
    if isinstance(e, Access):
        return [e] if isinstance(e.source, Scope) else []
    if isinstance(e, Binary):
        return scope_reads(e.lhs) + scope_reads(e.rhs)
    if isinstance(e, Unary):
        return scope_reads(e.x)
    return []


def inline_read(scope: Scope, read: Access) -> Scope | None:
    """``scope`` with ``read`` (of a scope) replaced by the read scope's body, or None."""
    src: Scope = read.source
    factors = _copies(product_factors(scope.body), read)
    if src.summation and (src.reduce is not Reduce.SUM or scope.reduce is not Reduce.SUM
                          or read not in factors):
        return None
    taken = {it.name for it in scope.traversal + scope.summation}
    sums = []
    for it in src.summation:  # src's summation iterators, renamed away from the reader's
        sums.append(renamed(it, it.lo, it.hi, taken | {s.name for s in sums}))
    body = inlined(scope, read, sums)
    if body is None:
        return None
    if src.summation:  # one copy inlined; the others stay reads, for the next pass
        at = factors.index(read)
        new_factors = factors[:at] + product_factors(body) + factors[at + 1:]
        return scope_like(scope, scope.traversal, scope.summation + tuple(sums),
                          build_product(new_factors))
    return scope_like(scope, scope.traversal, scope.summation, _replace(scope.body, read, body))


def _copies(factors: list, read: Access) -> list:
    """``factors`` with ``read ** n`` (a small integer ``n``) as ``n`` factors ``read``."""
    out = []
    for f in factors:
        power = integer_power(f)
        out.extend([read] * power[1] if power is not None and power[0] == read else [f])
    return out


def inlined(scope: Scope, read: Access, sums: list) -> object | None:
    """The body of ``read.source`` at ``read``'s indices, its summation iterators renamed to
    ``sums``, guarded where the read can leave its range (module doc); None if unguardable."""
    src: Scope = read.source
    ranges = {it.name: (it.lo, it.hi) for it in scope.traversal + scope.summation}
    body = substitute(src.body, {it.name: new.symbol for it, new in zip(src.summation, sums)})
    inner_ranges = {it.name: (it.lo, it.hi) for it in sums}
    lifts, wide = [], dict(inner_ranges)
    for it, idx in zip(src.traversal, read.indices):
        lo, hi = index_bounds(sympy.sympify(idx), ranges)
        wide[it.name] = (min(lo, it.lo), max(hi, it.hi))  # every value the reader reads
    for it, idx in zip(src.traversal, read.indices):
        lo, hi = wide[it.name]
        if lo >= it.lo and hi <= it.hi:
            continue  # always inside
        if zero_everywhere(body, it.name, lo, it.lo, wide) and \
                zero_everywhere(body, it.name, it.hi, hi, wide):
            continue  # the body is already zero outside
        lifts.append((it, sympy.sympify(idx)))
    body = substitute(body, {it.name: sympy.sympify(i) for it, i in zip(src.traversal,
                                                                         read.indices)})
    all_ranges = dict(ranges, **inner_ranges)
    body = map_indices(body, lambda i: _simplified(i, all_ranges))
    for it, idx in lifts:
        body = _guard(body, it, idx, all_ranges)
        if body is None:
            return None
    return body


def _simplified(i, ranges):
    """``i`` with the floors and mods the ranges decide removed (a reshape read through its
    inverse is the identity), or as it is where it cannot be."""
    try:
        return simplify_index(sympy.sympify(i), ranges)
    except (ValueError, KeyError):
        return i


def _guard(body, it, idx: sympy.Expr, ranges) -> object | None:
    """``body`` with a zero-guard read's first dim lifted out of bounds where ``idx`` is
    outside ``it``'s range (see the module doc), or None if nothing guards ``body``."""
    guards = zero_guards(body)
    if not guards:
        return None
    target = guards[0]
    # prefer a dim whose index reads what idx reads (the lift then stays local)
    dims = sorted(range(len(target.indices)), key=lambda d: not (
        sympy.sympify(target.indices[d]).free_symbols & idx.free_symbols))
    if not dims:
        return None
    d = dims[0]
    a = sympy.sympify(target.indices[d])
    dlo, dhi = target.source.bounds()[d]
    lo, hi = index_bounds(a, ranges)
    k = max(dhi - lo, hi - dlo, 1)
    lifted = a + k * sympy.floor((idx - it.lo) / it.extent) if it.extent > 0 else a
    new = Access(target.source, tuple(lifted if n == d else i
                                      for n, i in enumerate(target.indices)))
    return _replace(body, target, new, once=True)


def _replace(e, old: Access, new, once: bool = False):
    """``e`` with ``old`` replaced by ``new`` (the first occurrence only if ``once``)."""
    done = [False]

    def go(x):
        if isinstance(x, Access):
            if x == old and not (once and done[0]):
                done[0] = True
                return new
            return x
        if isinstance(x, Binary):
            return Binary(x.op, go(x.lhs), go(x.rhs))
        if isinstance(x, Unary):
            return Unary(x.op, go(x.x))
        return x

    return go(e)
