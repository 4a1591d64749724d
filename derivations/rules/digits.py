"""Digit splitting: iterators that a product's factors read digit by digit become two.

A Kronecker product consumed by a matrix product, once inlined, reads its two operands
through the digits of one index: ``kron(A, B) @ v`` is
``y[i] = sum[k] v[k] * A[i // p, k // q] * B[i % p, k % q]``. Splitting every such iterator
at once (``i = p*i1 + i2``, ``k = q*k1 + k2``) gives ``sum[k1, k2] v[q*k1 + k2] * A[i1, k1]
* B[i2, k2]``, where the sums move inward (the egglog ``split``) to two small matrix products
on reshaped operands, ``O(mnq + mpq)`` instead of ``O(mnpq)``, and the Kronecker product is
never materialised. One iterator at a time (:mod:`derivations.rules.iterator_split`) would
not do: each split alone keeps the factors coupled and saves nothing.

Only an iterator that some factor reads by its high digit only and another by its low digit
only is split (that is what decouples them), by the one divisor its reads suggest; a
summation iterator only when the divisor divides its bounds (no points are added).
Traversal iterators split in an inner scope, read back through a layout eOperator, as
iterator splitting does.
"""
from __future__ import annotations

import sympy

from ir.nodes import Access, Iter, Reduce, Scope, accesses, product_factors
from derivations.index_rules import SEP, fresh_name
from derivations.rules.iterator_split import (
    ranges_of, rewrite_indices, suggest_factors, tagged,
)

__all__ = ["split_digits"]


def _digit_reads(factor, name: str) -> set[str]:
    """``"high"`` / ``"low"`` for each digit of ``name`` that ``factor`` reads (both where it
    reads the iterator whole)."""
    out = set()
    for a in accesses(factor):
        for i in a.indices:
            i = sympy.sympify(i)
            for node in sympy.preorder_traversal(i):
                if name in {s.name for s in node.free_symbols}:
                    if isinstance(node, sympy.floor):
                        out.add("high")
                    elif isinstance(node, sympy.Mod):
                        out.add("low")
            bare = i.replace(lambda x: isinstance(x, (sympy.floor, sympy.Mod)),
                             lambda *_: sympy.Integer(0))
            if name in {s.name for s in bare.free_symbols}:
                out |= {"high", "low"}
    return out


def split_digits(scope: Scope) -> list[Scope]:
    if scope.reduce is not Reduce.SUM or not scope.summation:
        return []
    factors = product_factors(scope.body)
    chosen: dict[str, int] = {}
    for name, divisors in suggest_factors(scope).items():
        if len(divisors) != 1:
            continue
        reads = [_digit_reads(f, name) for f in factors]
        if {"high"} in reads and {"low"} in reads:
            it = scope.iterators[name]
            a = divisors[0]
            summed = any(s.name == name for s in scope.summation)
            if summed and (it.lo % a or it.hi % a):
                continue
            chosen[name] = a
    if not chosen:
        return []
    ranges = ranges_of(scope)
    sub, digits = {}, {}
    for name, a in chosen.items():
        it = scope.iterators[name]
        base = name.split(SEP)[0]
        high = Iter(fresh_name(base + "1", name, it.lo, it.hi, a, "quotient"), it.lo // a,
                    -(-it.hi // a))
        low = Iter(fresh_name(base + "2", name, it.lo, it.hi, a, "residue"), 0, a)
        ranges.update({high.name: (high.lo, high.hi), low.name: (0, a)})
        sub[it.symbol] = a * high.symbol + low.symbol
        digits[name] = (high, low)
    body = rewrite_indices(scope.body, sub, ranges)

    def swap(its):
        return tuple(x for t in its for x in (digits.get(t.name) or (t,)))

    split_traversal = any(t.name in digits for t in scope.traversal)
    inner = Scope(swap(scope.traversal), swap(scope.summation), body, Reduce.SUM,
                  name=tagged(scope.name, "inner") if split_traversal else scope.name,
                  dtype=scope.dtype)
    if not split_traversal:
        return [inner]
    idx = [x for t in scope.traversal
           for x in ((sympy.floor(t.symbol / chosen[t.name]), sympy.Mod(t.symbol, chosen[t.name]))
                     if t.name in digits else (t.symbol,))]
    return [Scope(scope.traversal, (), Access(inner, tuple(idx)), name=scope.name,
                  dtype=scope.dtype)]
