"""Iterator splitting ``i -> a*i1 + i2`` (EinNet), the factors that suggest it, and the index
arithmetic the layout rules (:mod:`derivations.rules.layout`) share.

These are *index rules*: plain functions ``Scope -> Iterable[Scope]`` returning scopes equal
to the one given (same traversal ranges, same values). They work on the IR directly, because
they invent iterators and rewrite index expressions, which the e-graph's algebra rules never do.

Splitting ``i in lo:hi`` by ``a``: ``i = a*i1 + i2`` with ``i1 in floor(lo/a):ceil(hi/a)`` and
``i2 in 0:a``, every index rewritten (floors and mods simplified with the new ranges). The
split grid may overhang ``lo:hi`` by less than ``a`` points at either end:

* a *traversal* iterator: the inner scope also computes the overhang points (their values,
  whatever they read, are never used) and a layout eOperator restores the output, reading
  only ``lo:hi``::

      S[.., i, ..] = R[s] f(i)   =   S'[.., floor(i/a), i%a, ..]
      where S'[.., i1, i2, ..] = R[s] f(a*i1 + i2)

* a *summation* iterator: exact when ``a`` divides ``lo`` and ``hi``; otherwise only for a sum
  of a product with a factor whose read is out of bounds (hence 0) at every overhang point
  (a kernel ``W[.., r, ..]`` guards its ``r``): ``sum[i] f(i) = sum[i1, i2] f(a*i1 + i2)``.

Factors come from the expression itself (:func:`suggest_factors`), never from a fixed list.
"""
from __future__ import annotations

import math
from typing import Callable, Iterator

import sympy

from ir.index_math import Ranges, decompose, index_range, safe_mod, simplify_index
from ir.nodes import Access, Binary, Expr, Iter, Reduce, Scope, Unary, accesses, affine_terms

from derivations.index_rules import SEP, STEERED, IndexRule, fresh_name, zero_guards

__all__ = [
    "suggest_factors", "split", "split_iterators", "index_range", "simplify_index",
    "decompose", "map_accesses", "rewrite_indices", "ranges_of", "is_layout",
    "tagged", "reads_outside", "safe_mod", "subst", "SPLIT_ITERATOR", "SPLIT_RULES",
]


# -- index arithmetic --------------------------------------------------------------------------
def ranges_of(scope: Scope) -> Ranges:
    return {it.name: (it.lo, it.hi) for it in scope.traversal + scope.summation}


def subst(e: sympy.Expr, sub: dict) -> sympy.Expr:
    """``e.xreplace(sub)``, rebuilding mods with :func:`safe_mod` (xreplace re-evaluates them)."""
    e = sympy.sympify(e)
    if not any(s in sub for s in e.free_symbols):
        return e
    if e.is_Symbol:
        return sympy.sympify(sub[e])
    if isinstance(e, sympy.Mod):
        return safe_mod(subst(e.args[0], sub), int(e.args[1]))
    return e.func(*(subst(a, sub) for a in e.args))



# -- rewriting bodies --------------------------------------------------------------------------
def map_accesses(e: Expr, fn: Callable[[Access], Expr]) -> Expr:
    """``e`` with every access ``a`` of its body replaced by ``fn(a)`` (sources untouched)."""
    if isinstance(e, Access):
        return fn(e)
    if isinstance(e, Binary):
        return Binary(e.op, map_accesses(e.lhs, fn), map_accesses(e.rhs, fn))
    if isinstance(e, Unary):
        return Unary(e.op, map_accesses(e.x, fn))
    return e


def rewrite_indices(e: Expr, sub: dict, ranges: Ranges) -> Expr:
    """``e`` with iterator symbols substituted by ``sub`` in every index, then simplified."""
    def one(a: Access) -> Access:
        return Access(a.source, tuple(simplify_index(subst(i, sub), ranges) for i in a.indices))
    return map_accesses(e, one)


def tagged(name: str | None, tag: str) -> str:
    """A printing name for a scope derived from one named ``name``: ``x`` -> ``x_layout``."""
    name = name or "T"
    while name.endswith(("_inner", "_layout")):
        name = name.rsplit("_", 1)[0]
    return f"{name}_{tag}"


def is_layout(scope: Scope) -> bool:
    """A pure re-indexing (an eOperator that only moves data): ``T[t] = X[f(t)]``."""
    return not scope.summation and isinstance(scope.body, Access)


# -- factor suggestion -------------------------------------------------------------------------
def suggest_factors(scope: Scope) -> dict[str, tuple[int, ...]]:
    """Iterator -> the factors its index expressions suggest splitting it by.

    In an index ``c_v*v + sum_w c_w*w + k`` with ``g = gcd(c_w)`` over the other iterators
    (a dilation ``d`` in ``i + d*(j-w)``, a stride ``s`` in ``s*h + r``), splitting ``v`` by
    ``a = g / gcd(g, c_v)`` makes ``a*c_v*v1`` a multiple of ``g``, so a layout split by ``g``
    turns the whole index dense. ``floor(v/a)`` and ``v % a`` suggest ``a`` as well. Only
    factors below the iterator's extent count; pure layout eOperators suggest nothing (they
    are what a split leaves behind).
    """
    if is_layout(scope):
        return {}
    extent = {it.name: it.extent for it in scope.traversal + scope.summation}
    found: dict[str, set[int]] = {n: set() for n in extent}

    def add(name: str, a: int):
        if name in extent and 1 < a < extent[name]:
            found[name].add(a)

    for acc in accesses(scope.body):
        for e in acc.indices:
            for node in sympy.preorder_traversal(e):
                if isinstance(node, (sympy.floor, sympy.Mod)):
                    num, den = (node.args[0].as_numer_denom() if isinstance(node, sympy.floor)
                                else (node.args[0], node.args[1]))
                    aff = affine_terms(num)
                    for v, c in (aff[0].items() if aff else ()):
                        add(v, int(den) // math.gcd(int(den), abs(c)))
            aff = affine_terms(e)
            if aff is None:
                continue
            coeffs = aff[0]
            for v, c in coeffs.items():
                g = math.gcd(*(abs(c2) for w, c2 in coeffs.items() if w != v))
                if g > 1:
                    add(v, g // math.gcd(g, abs(c)))
    return {n: tuple(sorted(fs)) for n, fs in found.items() if fs}


# -- the rule ----------------------------------------------------------------------------------
def split(scope: Scope, name: str, a: int) -> Scope | None:
    """``scope`` with iterator ``name`` split by ``a`` (see the module docstring), or None when
    a summation split would add points that are not provably zero."""
    it = scope.iterators[name]
    if a < 2 or it.extent == 0:
        return None
    traversal = any(t.name == name for t in scope.traversal)
    q_lo, q_hi = it.lo // a, -(-it.hi // a)
    if not traversal and not (it.lo % a == 0 and it.hi % a == 0) and \
            not _zero_outside(scope, name, (a * q_lo, a * q_hi)):
        return None
    base = name.split(SEP)[0]
    i1 = Iter(fresh_name(base + "1", name, it.lo, it.hi, a, "quotient"), q_lo, q_hi)
    i2 = Iter(fresh_name(base + "2", name, it.lo, it.hi, a, "residue"), 0, a)
    ranges = {**ranges_of(scope), i1.name: (i1.lo, i1.hi), i2.name: (0, a)}
    body = rewrite_indices(scope.body, {it.symbol: a * i1.symbol + i2.symbol}, ranges)

    def swap(its: tuple[Iter, ...]) -> tuple[Iter, ...]:
        return tuple(x for t in its for x in ((i1, i2) if t.name == name else (t,)))

    if not traversal:
        return Scope(scope.traversal, swap(scope.summation), body, scope.reduce,
                     name=scope.name, dtype=scope.dtype)
    inner = Scope(swap(scope.traversal), scope.summation, body, scope.reduce,
                  name=tagged(scope.name, "inner"), dtype=scope.dtype)
    idx = [x for t in scope.traversal
           for x in ((sympy.floor(t.symbol / a), sympy.Mod(t.symbol, a)) if t.name == name
                     else (t.symbol,))]
    return Scope(scope.traversal, (), Access(inner, tuple(idx)), name=scope.name, dtype=scope.dtype)


def _zero_outside(scope: Scope, name: str, cover: tuple[int, int]) -> bool:
    """Whether every point of ``cover`` outside ``name``'s range makes some factor of the
    summed product read out of bounds (so the point adds 0)."""
    if scope.reduce is not Reduce.SUM:
        return False
    it = scope.iterators[name]
    ranges = ranges_of(scope)
    reads = zero_guards(scope.body)
    for lo, hi in ((cover[0], it.lo), (it.hi, cover[1])):
        if lo >= hi:
            continue
        part = {**ranges, name: (lo, hi)}
        if not any(reads_outside(a, part) for a in reads):
            return False
    return True


def reads_outside(a: Access, ranges: Ranges) -> bool:
    """Whether ``a`` reads outside its source at every point of ``ranges``."""
    for e, (blo, bhi) in zip(a.indices, a.source.bounds()):
        try:
            lo, hi = index_range(e, ranges)
        except ValueError:
            continue
        if hi < blo or lo >= bhi:
            return True
    return False


def split_iterators(scope: Scope) -> Iterator[Scope]:
    """Every split :func:`suggest_factors` proposes for ``scope``."""
    for name, factors in suggest_factors(scope).items():
        for a in factors:
            out = split(scope, name, a)
            if out is not None:
                yield out


SPLIT_ITERATOR = IndexRule(
    "split_iterator",
    "iterator splitting: i = a*i1 + i2 for the factors a the index strides suggest",
    split_iterators, kind=STEERED)
# S[i] = S'[i//a, i%a] with S'[i1, i2] = S[a*i1 + i2];  sum[i] = sum[i1, i2]
SPLIT_RULES = (SPLIT_ITERATOR,)
