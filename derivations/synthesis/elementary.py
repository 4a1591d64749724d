"""exp, log and the other functions on exact values (:mod:`derivations.synthesis.exact`).

Normal forms use only identities that hold for every real input:

* ``exp(c0 + sum c_m m) = E^c0 * prod exp(m)^c_m`` for integers ``c0, c_m`` (and
  ``exp(k L_p) = p^k``, ``exp(k log q) = q^k`` for ``k >= 1``: ``log q`` carries ``q > 0``);
* ``log(c * P * U) = log|c| + log P + log(sign(c) U)`` where ``P`` is the product of the
  atoms known positive (``E``, ``exp(..)``, ``L_p``, assumed-positive variables), defined
  where ``sign(c) U > 0``: that condition is recorded, and a value whose conditions fail
  is NaN (``log 0`` counts as undefined too). ``log(E^n) = n``, ``log(exp m) = m``;
* ``relu``, ``abs``, ``max``, ``min`` exactly where the sign is known; otherwise, like
  ``tanh``, ``sqrt``, ... an atom keyed by the exact argument (a function of equal
  arguments has equal values: sound for any function). ``max`` of ``max`` is one ``max``
  over the set of arguments (associative, commutative, idempotent).
"""
from __future__ import annotations

import math
from fractions import Fraction

import sympy

from derivations.synthesis.exact import (
    NAN, X, _KEY, _NUM, _atom, _known_positive, _make, _mono_num, _nonneg, _parts, _power,
    _from_key, _require, add, mul, neg, num,
)

__all__ = ["exp", "log", "div", "func", "maxn"]


def _E() -> int:
    return _atom(("E",), math.e, True)


def _log_prime(p: int) -> int:
    return _atom(("L", p), math.log(p), True)


def _exp_atom(m: tuple, c=1) -> int:
    key = ("exp", m, c)
    inner = _mono_num(m)
    numeric = None
    if inner is not None:
        try:
            numeric = math.exp(float(c) * inner)
        except OverflowError:
            numeric = math.inf
    return _atom(key, numeric, True)


def exp(p):
    p = num(p)
    if p is NAN:
        return NAN
    terms, conds = _parts(p)
    powers: dict[int, int] = {}
    coeff = Fraction(1)
    extra = []
    for m, c in terms.items():
        integral = Fraction(c).denominator == 1
        if m == () and integral:
            powers[_E()] = powers.get(_E(), 0) + int(c)
        elif len(m) == 1 and m[0][1] == 1 and _KEY[m[0][0]][0] == "L" and integral:
            coeff *= Fraction(_KEY[m[0][0]][1]) ** int(c)
        elif len(m) == 1 and m[0][1] == 1 and _KEY[m[0][0]][0] == "log" and integral and c > 0:
            extra.append(_power(_from_key(_KEY[m[0][0]][1]), int(c)))   # exp(k log q) = q^k
        elif integral:
            a = _exp_atom(m)
            powers[a] = powers.get(a, 0) + int(c)
        else:
            a = _exp_atom(m, c)
            powers[a] = powers.get(a, 0) + 1
    mono = tuple(sorted((a, k) for a, k in powers.items() if k))
    out = _make({mono: coeff}, conds)
    for q in extra:
        out = mul(out, q)
    return out


def _log_rational(c: Fraction):
    out = 0
    for n, sign in ((c.numerator, 1), (c.denominator, -1)):
        for prime, e in sympy.factorint(n).items():
            out = add(out, X({((_log_prime(int(prime)), 1),): sign * e}))
    return out


def _log_positive_atom(a: int, k: int):
    """``k * log(a)`` for an atom ``a`` known positive."""
    key = _KEY[a]
    if key[0] == "E":
        return k
    if key[0] == "exp":
        return mul(k * key[2], _make({key[1]: 1}, frozenset()))
    arg = frozenset({((a, 1),): 1}.items())
    numeric = math.log(_NUM[a]) if _NUM[a] is not None and _NUM[a] > 0 else None
    return X({((_atom(("log", arg), numeric, False), 1),): k})


def log(p):
    p = num(p)
    if p is NAN:
        return NAN
    terms, conds = _parts(p)
    if not terms:
        return NAN  # log 0 = -inf: outside the exact model (treated as undefined)
    if len(terms) == 1:
        (m, c), = terms.items()
        known = [(a, k) for a, k in m if _known_positive(a)]
        unknown = tuple((a, k) for a, k in m if not _known_positive(a))
        sign = 1 if c > 0 else -1
        if not unknown and c < 0:
            return NAN
        out = _log_rational(abs(Fraction(c)))
        for a, k in known:
            out = add(out, _log_positive_atom(a, k))
        if unknown:
            conds = _require({unknown: sign}, conds)
            if conds is None:
                return NAN
            numeric = X({unknown: sign}).numeric()
            arg = frozenset({unknown: sign}.items())
            out = add(out, X({((_atom(("log", arg), math.log(numeric) if numeric else None,
                                       False), 1),): 1}))
        return _with(out, conds)
    cond = _require(terms, conds)
    if cond is None:
        return NAN
    value = X(terms).numeric()
    arg = frozenset(terms.items())
    return X({((_atom(("log", arg), math.log(value) if value else None, False), 1),): 1}, cond)


def _with(v, conds: frozenset):
    if v is NAN or not conds:
        return v
    terms, own = _parts(v)
    return X(terms, own | conds)


# -- other functions: exact where the sign is known, else uninterpreted atoms -------------------
def div(p, q):
    p, q = num(p), num(q)
    if p is NAN or q is NAN:
        return NAN
    if not isinstance(q, X):
        return NAN if q == 0 else mul(p, Fraction(1) / Fraction(q))
    if len(q.terms) == 1:
        (m, c), = q.terms.items()
        if all(_KEY[a][0] in ("E", "exp") for a, _ in m):     # invertible atoms
            return _with(mul(p, X({tuple((a, -k) for a, k in m): Fraction(1) / Fraction(c)})),
                         q.conds)
    return mul(p, func("recip", q))


def func(op: str, *args):
    """``op(args)``: relu and abs exactly where the sign is known, else an atom keyed by the
    exact arguments (equal arguments, equal values: sound for any function)."""
    args = tuple(num(a) for a in args)
    if any(a is NAN for a in args):
        return NAN
    p = args[0]
    terms, conds = _parts(p)
    value = X(terms).numeric() if terms else 0
    if op in ("relu", "abs"):
        if _nonneg(terms) or (value is not None and value >= 0):
            return p
        if value is not None:
            return 0 if op == "relu" else neg(p)
    if op == "recip" and value is not None and value == 0:
        return NAN
    if op == "sqrt" and value is not None and value < 0:
        return NAN
    numeric = None
    if value is not None and len(args) == 1:
        f = {"tanh": math.tanh, "sigmoid": lambda v: 1 / (1 + math.exp(-v)), "erf": math.erf,
             "sqrt": math.sqrt, "recip": lambda v: 1 / v, "relu": lambda v: max(v, 0.0),
             "abs": abs}.get(op)
        try:
            numeric = f(value) if f else None
        except (OverflowError, ValueError, ZeroDivisionError):
            numeric = None
    for a in args[1:]:
        conds |= _parts(a)[1]
    key = (op,) + tuple(frozenset(_parts(a)[0].items()) for a in args)
    if op == "sqrt" and value is None and not _nonneg(terms):  # NaN below 0
        conds = conds | {("nonneg", key[1])}
    if op == "recip" and value is None:
        conds = conds | {("nonzero", key[1])}
    atom = _atom(key, numeric, positive=op == "sigmoid",
                 nonneg=op in ("relu", "abs", "sqrt", "sigmoid"))
    return X({((atom, 1),): 1}, conds)


def maxn(op: str, values):
    """max / min of several exact values: exact when all are concrete, else one atom over the
    *set* of distinct arguments (max is symmetric and idempotent)."""
    values = [num(v) for v in values]
    if any(v is NAN for v in values):
        return NAN
    nums = [X(_parts(v)[0]).numeric() if _parts(v)[0] else 0 for v in values]
    if all(n is not None for n in nums):
        pick = max if op == "max" else min
        return values[nums.index(pick(nums))]
    conds = frozenset().union(*(_parts(v)[1] for v in values))
    distinct = frozenset().union(*(_extremum_args(v, op) for v in values))  # flat: max(max)
    if len(distinct) == 1:  # max{v, v, ...} = v
        return _make(dict(next(iter(distinct))), conds)
    key = (op, distinct)
    return X({((_atom(key, None, False), 1),): 1}, conds)


def _extremum_args(v, op: str) -> frozenset:
    """The arguments of ``v`` if it is an ``op`` atom (max of a max is one max), else ``v``."""
    terms = _parts(v)[0]
    if len(terms) == 1:
        (m, c), = terms.items()
        if c == 1 and len(m) == 1 and m[0][1] == 1 and _KEY[m[0][0]][0] == op:
            return _KEY[m[0][0]][1]
    return frozenset({frozenset(terms.items())})
