"""Exact values: what fingerprints and the verifier compute with instead of floats.

A value is a number (``int`` / ``Fraction``), ``NAN``, or an :class:`X`: a polynomial with
rational coefficients over *atoms*, plus the *domain conditions* under which it is defined.

Atoms are real numbers we never approximate: input variables (``A[0,1]``, in the verifier),
``e`` (``E``), the logarithms of primes (``L2``, ``L3``, ...), ``exp(m)`` of a monomial,
``log(q)`` of a polynomial, and an uninterpreted atom per other function (``tanh(q)``,
``relu(q)``, ``max{p,q}``, ...) keyed by its exact argument. Normal forms use only identities
that hold for every real input, so **equal normal forms imply equal real values** (the
converse may fail: then a true rule is reported unverified, never a false one verified):

polynomial arithmetic here, ``exp``/``log`` and the other functions in
:mod:`derivations.synthesis.elementary`.

Concrete values (no variables: fingerprints on integers) decide their conditions at once: a
failing one gives ``NAN``. Symbolic values keep them, simplified under the assumptions of
:func:`assume_positive`, and the verifier compares them: two sides must be defined on the
same inputs (NaN in, NaN out).
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from fractions import Fraction

__all__ = ["X", "NAN", "num", "var", "add", "neg", "mul", "assume_positive", "value_key"]


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
_NONNEG: list[bool] = []          # at least 0 whatever the variables are (relu, abs, sqrt)
_ROOTS: dict[int, frozenset] = {}  # sqrt atoms -> their argument's terms (sqrt(q)^2 = q)
_POSITIVE: frozenset[int] = frozenset()   # variables assumed positive (assume_positive)


def _atom(key: tuple, numeric: float | None, positive: bool, nonneg: bool = False) -> int:
    a = _ID.get(key)
    if a is None:
        a = _ID[key] = len(_KEY)
        _KEY.append(key)
        _NUM.append(numeric)
        _POS.append(positive)
        _NONNEG.append(nonneg or positive)
        if key[0] == "sqrt":
            _ROOTS[a] = key[1]
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


def _known_nonneg(a: int) -> bool:
    return _NONNEG[a] or _known_positive(a) or (_NUM[a] is not None and _NUM[a] >= 0)


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
    def __truediv__(self, o):
        from derivations.synthesis.elementary import div
        return div(self, o)

    def __rtruediv__(self, o):
        from derivations.synthesis.elementary import div
        return div(o, self)
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
    if _ROOTS and any(a in _ROOTS and k >= 2 for m in out for a, k in m):
        return _square_roots(out, cp | cq)
    return _make(out, cp | cq)


def _square_roots(terms: dict, conds: frozenset):
    """``sqrt(q)^2 = q``: exact where ``sqrt(q)`` is defined (its ``q >= 0`` condition is
    already among the conditions of any value that reads it)."""
    out = 0
    for m, c in terms.items():
        rest, roots = [], []
        for a, k in m:
            if a in _ROOTS and k >= 2:
                roots.append((a, k // 2))
                if k % 2:
                    rest.append((a, 1))
            else:
                rest.append((a, k))
        value = X({tuple(rest): c})
        for a, half in roots:
            for _ in range(half):
                value = mul(value, _make(dict(_ROOTS[a]), frozenset()))
        out = add(out, value)
    return _with_conds(out, conds)


def _with_conds(v, conds: frozenset):
    if v is NAN or not conds:
        return v
    terms, own = _parts(v)
    return X(terms, own | conds)


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


def _nonneg(terms: dict) -> bool:
    """Provably >= 0: positive coefficients, and every atom of odd power known >= 0."""
    return all(c > 0 and all(k % 2 == 0 or _known_nonneg(a) for a, k in m)
               for m, c in terms.items())


def _require(terms: dict, conds: frozenset):
    """``conds`` plus ``terms > 0``; NAN when it is decidably false (concrete values)."""
    if _positive(terms):
        return conds
    value = X(terms).numeric()
    if value is not None:
        return conds if value > 0 else None
    return conds | {("pos", frozenset(terms.items()))}
