"""Index arithmetic over iterator ranges: bounds of an index expression, and floors and mods
removed where the ranges decide them. Shared by the operator library (``as_strided``) and
the derivation rules that invent iterators (``derivations.rules.iterator_split``)."""
from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

import sympy

Ranges = dict[str, tuple[int, int]]  # iterator -> half-open range lo:hi


def decompose(e: sympy.Expr, a: int) -> tuple[sympy.Expr, sympy.Expr]:
    """``e = a*X + Y``: X takes the terms whose integer coefficient ``a`` divides and
    ``const // a``; Y the other terms and ``const % a``."""
    x, y = sympy.Integer(0), sympy.Integer(0)
    for term in sympy.Add.make_args(sympy.expand(e)):
        c, core = term.as_coeff_Mul()
        if c.is_Integer and core == 1:
            x, y = x + int(c) // a, y + int(c) % a
        elif c.is_Integer and int(c) % a == 0:
            x += (int(c) // a) * core
        else:
            y += term
    return x, y


def index_range(e: sympy.Expr, ranges: Ranges) -> tuple[int, int]:
    """Inclusive ``(min, max)`` bounds of ``e`` over ``ranges`` (interval arithmetic: sound,
    not always tight)."""
    return _index_range(sympy.sympify(e), tuple(ranges.items()))


@lru_cache(maxsize=1 << 16)
def _index_range(e: sympy.Expr, ranges: tuple) -> tuple[int, int]:
    """Memoised: costs price the same reads over the same ranges in every form of a scope."""
    lo, hi = _interval(e, dict(ranges))
    return math.floor(lo), math.ceil(hi)


def _interval(e: sympy.Expr, ranges: Ranges) -> tuple[Fraction, Fraction]:
    if e.is_Rational:
        v = Fraction(int(e.p), int(e.q))
        return v, v
    if e.is_Symbol:
        lo, hi = ranges[e.name]
        return Fraction(lo), Fraction(max(hi - 1, lo))
    if isinstance(e, sympy.Add):
        parts = [_interval(a, ranges) for a in e.args]
        return sum(p[0] for p in parts), sum(p[1] for p in parts)
    if isinstance(e, sympy.Mul):
        lo = hi = Fraction(1)
        for a in e.args:
            alo, ahi = _interval(a, ranges)
            ends = (lo * alo, lo * ahi, hi * alo, hi * ahi)
            lo, hi = min(ends), max(ends)
        return lo, hi
    if isinstance(e, sympy.floor):
        lo, hi = _interval(e.args[0], ranges)
        return Fraction(math.floor(lo)), Fraction(math.floor(hi))
    if isinstance(e, sympy.Mod):
        (lo, hi), m = _interval(e.args[0], ranges), int(e.args[1])
        k = math.floor(lo / m)
        if math.floor(hi / m) == k:
            return lo - k * m, hi - k * m
        return Fraction(0), Fraction(m - 1)
    raise ValueError(f"unsupported index expression {e} ({type(e).__name__})")


def safe_mod(arg: sympy.Expr, m: int) -> sympy.Expr:
    """``Mod(arg, m)`` with a term ``c*Mod(x, q)`` where ``m | c*q`` written ``c*x`` (sympy,
    guarded by :mod:`ir.sympy_mod`, leaves a Mod of a product holding a Mod unevaluated)."""
    terms = []
    for term in sympy.Add.make_args(sympy.sympify(arg)):
        c, core = term.as_coeff_Mul()
        if isinstance(core, sympy.Mod) and c.is_Integer and (int(c) * int(core.args[1])) % m == 0:
            term = c * core.args[0]
        terms.append(term)
    return sympy.Mod(sympy.Add(*terms), m)


def simplify_index(e: sympy.Expr, ranges: Ranges) -> sympy.Expr:
    """``e`` with floors and mods removed where ``ranges`` decide them:
    ``floor((a*X + Y)/a) = X + k`` and ``(a*X + Y) % a = Y - a*k`` when ``Y`` in ``a*k:a*k+a``;
    ``floor(floor(x/b)/a) = floor(x/(a*b))``."""
    e = sympy.sympify(e)
    if e.is_Integer or e.is_Symbol:
        return e
    if isinstance(e, sympy.floor):
        num, den = e.args[0].as_numer_denom()
        num, den = simplify_index(num, ranges), int(den)
        if isinstance(num, sympy.floor):  # floor(floor(x/b)/den)
            inner, b = num.args[0].as_numer_denom()
            return simplify_index(sympy.floor(inner / (int(b) * den)), ranges)
        x, y = decompose(num, den)
        lo, hi = index_range(y, ranges)
        k = lo // den
        return x + k if hi // den == k else x + sympy.floor(y / den)
    if isinstance(e, sympy.Mod):
        m = int(e.args[1])
        _, y = decompose(simplify_index(e.args[0], ranges), m)
        lo, hi = index_range(y, ranges)
        k = lo // m
        return y - k * m if hi // m == k else safe_mod(y, m)
    if isinstance(e, (sympy.Add, sympy.Mul)):
        return _recombine(sympy.expand(e.func(*(simplify_index(a, ranges) for a in e.args))))
    return e


def _recombine(e: sympy.Expr) -> sympy.Expr:
    """``c*a*floor(x/a) + c*(x % a)`` written ``c*x`` (a reshape undone by its inverse)."""
    terms = list(sympy.Add.make_args(e))
    for n, t in enumerate(terms):
        c, core = t.as_coeff_Mul()
        if not isinstance(core, sympy.Mod) or not c.is_Integer:
            continue
        x, a = core.args
        want = c * int(a) * sympy.floor(x / a)
        for m, u in enumerate(terms):
            if m != n and sympy.expand(u - want) == 0:
                rest = [v for k, v in enumerate(terms) if k not in (n, m)]
                return _recombine(sympy.Add(*rest, c * x))
    return e
