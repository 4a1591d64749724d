"""Exact values: what fingerprints and the verifier compute with instead of floats.

A value is a number (``int`` / ``Fraction``), ``NAN``, or an :class:`X`: a polynomial with
rational coefficients over *atoms*, plus the *domain conditions* under which it is defined.

Atoms are real numbers we never approximate: input variables (``A[0,1]``, in the verifier),
``e`` (``E``), the logarithms of primes (``L2``, ``L3``, ...), ``exp(m)`` of a monomial,
``log(q)`` of a polynomial, and an uninterpreted atom per other function (``tanh(q)``,
``relu(q)``, ``max{p,q}``, ...) keyed by its exact argument. Normal forms use only identities
that hold for every real input, so **equal normal forms imply equal real values** (the
converse may fail: then a true rule is reported unverified, never a false one verified):

* ``exp(c0 + sum c_m m) = E^c0 * prod exp(m)^c_m`` for integers ``c0, c_m`` (and
  ``exp(k L_p) = p^k``, ``exp(k log q) = q^k`` for ``k >= 1``: ``log q`` carries ``q > 0``);
* ``log(c * P * U) = log|c| + log P + log(sign(c) U)`` where ``P`` is the product of the
  atoms known positive (``E``, ``exp(..)``, ``L_p``, assumed-positive variables), defined
  where ``sign(c) U > 0``: that condition is recorded, and a value whose conditions fail
  is NaN (``log 0`` counts as undefined too). ``log(E^n) = n``, ``log(exp m) = m``.

Concrete values (no variables: fingerprints on integers) decide their conditions at once: a
failing one gives ``NAN``. Symbolic values keep them, simplified under the assumptions of
:func:`assume_positive`, and the verifier compares them: two sides must be defined on the
same inputs (NaN in, NaN out).
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from fractions import Fraction

import sympy

__all__ = ["X", "NAN", "num", "var", "exp", "log", "div", "func", "maxn", "assume_positive",
           "value_key", "Dep"]


class _NaN:
    """Not a number: absorbs every operation. Equal to itself (both sides NaN is agreement)."""

    _it = None

    def __new__(cls):
        if cls._it is None:
            cls._it = super().__new__(cls)
        return cls._it

    def __repr__(self):
        return "nan"

    def _nan(self, *_):
        return self

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = _nan
    __rtruediv__ = __neg__ = _nan


NAN = _NaN()

# -- atoms ---------------------------------------------------------------------------------
_ID: dict[tuple, int] = {}
_KEY: list[tuple] = []
_NUM: list[float | None] = []     # the atom's real value when it has no variables
_POS: list[bool] = []             # positive whatever the variables are (E, L_p, exp(..))
_POSITIVE: frozenset[int] = frozenset()   # variables assumed positive (assume_positive)


def _atom(key: tuple, numeric: float | None, positive: bool) -> int:
    a = _ID.get(key)
    if a is None:
        a = _ID[key] = len(_KEY)
        _KEY.append(key)
        _NUM.append(numeric)
        _POS.append(positive)
    return a


def var(name: str, index: tuple) -> "X":
    """The input variable ``name[index]`` (symbolic: no numeric value)."""
    return X({((_atom(("v", name, index), None, False), 1),): 1})


@contextmanager
def assume_positive(variables):
    """Within the block, the atoms of ``variables`` (``X`` values of :func:`var`) are > 0."""
    global _POSITIVE
    saved = _POSITIVE
    _POSITIVE = saved | {m[0][0] for v in variables for m in v.terms}
    try:
        yield
    finally:
        _POSITIVE = saved


def _known_positive(a: int) -> bool:
    return _POS[a] or a in _POSITIVE or (_NUM[a] is not None and _NUM[a] > 0)


# -- monomials: tuples of (atom, power) sorted by atom ----------------------------------------
def _mono_mul(m1: tuple, m2: tuple) -> tuple:
    if not m1:
        return m2
    if not m2:
        return m1
    d = dict(m1)
    for a, k in m2:
        s = d.get(a, 0) + k
        if s:
            d[a] = s
        else:
            del d[a]
    return tuple(sorted(d.items()))


def _mono_num(m: tuple) -> float | None:
    out = 1.0
    for a, k in m:
        if _NUM[a] is None:
            return None
        try:
            out *= _NUM[a] ** k
        except (OverflowError, ZeroDivisionError):
            return math.inf
    return out


class X:
    """A polynomial over atoms (``terms``: monomial -> nonzero rational) defined where every
    condition in ``conds`` holds (``("pos", key)``: that polynomial is > 0)."""

    __slots__ = ("terms", "conds", "_key")

    def __init__(self, terms: dict, conds: frozenset = frozenset()):
        self.terms, self.conds, self._key = terms, conds, None

    def key(self):
        if self._key is None:
            self._key = (frozenset(self.terms.items()), self.conds)
        return self._key

    def __eq__(self, other):
        return isinstance(other, X) and self.key() == other.key()

    def __hash__(self):
        return hash(self.key())

    def __repr__(self):
        parts = []
        for m, c in sorted(self.terms.items(), key=repr):
            atoms = "*".join(_show(a) + (f"^{k}" if k != 1 else "") for a, k in m)
            parts.append(f"{c}*{atoms}" if atoms else str(c))
        conds = f" if {len(self.conds)} conditions" if self.conds else ""
        return (" + ".join(parts) or "0") + conds

    def numeric(self) -> float | None:
        total = []
        for m, c in self.terms.items():
            v = _mono_num(m)
            if v is None:
                return None
            total.append(float(c) * v)
        return math.fsum(total) if all(math.isfinite(t) for t in total) else sum(total)

    __add__ = lambda self, o: add(self, o)  # noqa: E731
    __radd__ = lambda self, o: add(o, self)  # noqa: E731
    __sub__ = lambda self, o: add(self, neg(o))  # noqa: E731
    __rsub__ = lambda self, o: add(o, neg(self))  # noqa: E731
    __mul__ = lambda self, o: mul(self, o)  # noqa: E731
    __rmul__ = lambda self, o: mul(o, self)  # noqa: E731
    __truediv__ = lambda self, o: div(self, o)  # noqa: E731
    __rtruediv__ = lambda self, o: div(o, self)  # noqa: E731
    __neg__ = lambda self: neg(self)  # noqa: E731


def _show(a: int) -> str:
    k = _KEY[a]
    if k[0] == "v":
        return f"{k[1]}[{','.join(map(str, k[2]))}]"
    return {"E": "e", "L": f"L{k[1] if len(k) > 1 else ''}"}.get(k[0], f"{k[0]}#{a}")


def num(v):
    """A Python/numpy number as an exact value (floats are exact binary fractions)."""
    if isinstance(v, (int, Fraction, X)) or v is NAN:
        return v
    v = float(v)
    if not math.isfinite(v):
        return NAN
    return int(v) if v.is_integer() else Fraction(v)


def _parts(v) -> tuple[dict, frozenset]:
    if isinstance(v, X):
        return v.terms, v.conds
    return ({(): v} if v else {}), frozenset()


def _make(terms: dict, conds: frozenset):
    if not conds:
        if not terms:
            return 0
        if len(terms) == 1 and () in terms:
            return terms[()]
    return X(terms, conds)


def value_key(v):
    """A hashable key of an exact value (numbers, NAN, X)."""
    return v.key() if isinstance(v, X) else v if v is NAN else (frozenset(_parts(v)[0].items()),
                                                                 frozenset())


def add(p, q):
    p, q = num(p), num(q)
    if p is NAN or q is NAN:
        return NAN
    if not isinstance(p, X) and not isinstance(q, X):
        return p + q
    tp, cp = _parts(p)
    tq, cq = _parts(q)
    out = dict(tp)
    for m, c in tq.items():
        s = out.get(m, 0) + c
        if s:
            out[m] = s
        else:
            out.pop(m, None)
    return _make(out, cp | cq)


def neg(p):
    p = num(p)
    if p is NAN or not isinstance(p, X):
        return -p if p is not NAN else NAN
    return X({m: -c for m, c in p.terms.items()}, p.conds)


def mul(p, q):
    p, q = num(p), num(q)
    if p is NAN or q is NAN:
        return NAN
    if not isinstance(p, X) and not isinstance(q, X):
        return p * q
    tp, cp = _parts(p)
    tq, cq = _parts(q)
    out: dict = {}
    for m1, c1 in tp.items():
        for m2, c2 in tq.items():
            m = _mono_mul(m1, m2)
            s = out.get(m, 0) + c1 * c2
            if s:
                out[m] = s
            else:
                out.pop(m, None)
    return _make(out, cp | cq)


def _power(p, k: int):
    out = 1
    for _ in range(k):
        out = mul(out, p)
    return out


def _from_key(key) -> "X | int | Fraction":
    return _make(dict(key), frozenset())


# -- conditions ----------------------------------------------------------------------------------
def _positive(terms: dict) -> bool:
    """Provably > 0 for every value of the variables (under the current assumptions)."""
    if not terms:
        return False
    for m, c in terms.items():
        if c <= 0 or not all(_known_positive(a) for a, _ in m):
            return False
    return True


def _require(terms: dict, conds: frozenset):
    """``conds`` plus ``terms > 0``; NAN when it is decidably false (concrete values)."""
    if _positive(terms):
        return conds
    value = X(terms).numeric()
    if value is not None:
        return conds if value > 0 else None
    return conds | {("pos", frozenset(terms.items()))}


# -- exp and log ---------------------------------------------------------------------------------
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
        if _positive(terms) or (value is not None and value >= 0):
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
    if op == "sqrt" and value is None:   # NaN below 0: defined where the argument is >= 0
        conds = conds | {("nonneg", key[1])}
    if op == "recip" and value is None:
        conds = conds | {("nonzero", key[1])}
    return X({((_atom(key, numeric, False), 1),): 1}, conds)


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


class Dep:
    """The set of input elements a value reads, for NaN in, NaN out: IEEE arithmetic
    propagates a NaN input through every + - * and function, even times 0. Constants read
    nothing (``Dep(frozenset())``). The int ``0`` is a zero read outside a tensor
    (padding): it reads nothing, and when ``Dep.padding`` is set, a product with it reads
    nothing either (padding is a structural zero, as libraries treat it: they skip such
    products rather than multiply by 0)."""

    __slots__ = ("vars",)
    padding = False   # set by verify.compare_exact for nan="padding"

    def __init__(self, vars_: frozenset):
        self.vars = vars_

    def _join(self, other):
        return Dep(self.vars | other.vars) if isinstance(other, Dep) else self

    def _times(self, other):
        if isinstance(other, Dep):
            return Dep(self.vars | other.vars)
        return 0 if other == 0 and Dep.padding else self

    __add__ = __radd__ = __sub__ = __rsub__ = _join
    __truediv__ = __rtruediv__ = _join
    __mul__ = __rmul__ = _times

    def __neg__(self):
        return self

    def __eq__(self, other):
        return isinstance(other, Dep) and self.vars == other.vars

    def __hash__(self):
        return hash(self.vars)
