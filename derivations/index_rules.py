"""Index rules: derivations whose math needs index arithmetic, written as Python over ``ir``.

Egglog rules (:mod:`derivations.rules.algebra`) move iterator *names* between scopes; rules
that must rewrite index *expressions* (substitute ``x = h+r-1``, shrink a range to where reads
are in bounds, split ``i = 4*i1 + i2``, permute a layout) are plain functions instead::

    IndexRule(name, reason, apply)        apply(scope) -> iterable of equivalent scopes

The schedule (:mod:`derivations.index_pass`) decodes every scope e-node of the e-graph,
calls each rule's ``apply`` on it between egglog iterations, encodes what comes back and
unions it into the node's e-class, recording ``name`` in the provenance of the new nodes.

The contract of ``apply(scope)``
--------------------------------
* ``scope`` is one decoded scope with its nested sources (``Access.source`` may be a
  ``Scope``). Its iterator names are unique in the e-graph (see :mod:`derivations.encode`)
  and stable: a name always stands for the same range.
* Every returned scope means the same as ``scope``, out-of-bounds-reads-are-zero included,
  and keeps its **traversal exactly** (same names, same ranges; the order may differ). It may
  change anything else: the body, summation iterators, new nested scopes (intermediate
  tensors, read positionally or at their own iterators) with new iterators.
* New iterators are named with :func:`fresh_name` from *what they stand for* (the
  expression they replace, the iterator they split, ...) and their range, never from a
  counter, so applying a rule twice gives equal scopes and the e-graph converges. An
  iterator whose range changes is a new iterator: rename it (:func:`renamed`).
* Return nothing (``()``) when the rule does not apply; return each distinct result once.
  Rules should be cheap: they run on every scope e-node once.

Helpers here are what rules share: names, exact index bounds, the factors of a product and
which reads make a body zero when out of bounds, substitution of iterators in a body.
"""
from __future__ import annotations

import contextvars
import hashlib
import math
import time
from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np
import sympy

from ir.canonical import DIGEST_SEP
from ir.interpreter import Interpreter
from ir.nodes import (  # noqa: F401 - product helpers re-exported for the rule modules
    ZERO_PRESERVING, Access, Binary, BinOp, Expr, Iter, Scope, Unary, build_product,
    iterator_symbol, product_factors,
)

__all__ = [
    "IndexRule", "STEERED", "CANONICAL", "PLAIN",
    "fresh_name", "renamed", "index_bounds", "product_factors", "build_product",
    "zero_guards", "zero_at", "zero_everywhere", "alive_interval", "live_range", "map_indices",
    "substitute", "rename_iters",
    "scope_like", "hint_of", "ENUMERATE_LIMIT", "SEP", "DEADLINE", "time_left", "check_time",
    "OutOfTime",
]


STEERED, CANONICAL, PLAIN = "steered", "canonical", "plain"  # the kinds of index rules


@dataclass(frozen=True)
class IndexRule:
    """A named rewrite of one scope into equivalent scopes (see the module's contract).

    ``kind`` says how the guide (``derivations.guided``) keeps its results: ``"steered"``
    rules branch (a result per subset, per factor, per dim pair) and are kept only where they
    instantiate an operator or halve the work; ``"canonical"`` rules (the algebra of sums and
    products) converge on their own and are always kept; ``"plain"`` ones where they lose no
    operator's work. ``default``: whether the default schedule runs it."""

    name: str
    reason: str
    apply: Callable[[Scope], Iterable[Scope]]
    kind: str = PLAIN
    default: bool = True

    def __post_init__(self):
        assert self.kind in (STEERED, CANONICAL, PLAIN), f"{self.name}: unknown kind {self.kind!r}"

    def __repr__(self) -> str:
        return f"IndexRule({self.name!r}: {self.reason})"


# -- the time budget --------------------------------------------------------------------------
# The pass sets the deadline (``time.perf_counter()`` seconds, None: none) while rules run, so a
# rule that loops over many candidates can stop in time: the budget holds inside an iteration.
DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("deadline", default=None)


class OutOfTime(Exception):
    """Raised by ``check_time`` past the deadline; the pass retries the scope next time."""


def time_left() -> float:
    """Seconds until the derivation's deadline (``inf`` when there is none)."""
    deadline = DEADLINE.get()
    return math.inf if deadline is None else deadline - time.perf_counter()


def check_time() -> None:
    """``OutOfTime`` if the deadline has passed: call it inside long loops of a rule."""
    if time_left() < 0:
        raise OutOfTime("the derivation's time budget ran out inside a rule")


# -- names ----------------------------------------------------------------------------------
SEP = DIGEST_SEP  # base name, SEP, digest: ``hr__3fa2c1`` (ir.readable drops the digest)


def fresh_name(hint: str, *what) -> str:
    """A deterministic iterator name for an iterator standing for ``what`` (an expression, an
    iterator and a factor, ...): ``hint`` (letters only, for reading) + a digest of ``what``."""
    base = "".join(ch for ch in hint.split(SEP)[0] if ch.isalnum()) or "v"
    text = "|".join(sympy.srepr(w) if isinstance(w, sympy.Basic) else repr(w) for w in what)
    return f"{base}{SEP}{hashlib.blake2b(text.encode(), digest_size=3).hexdigest()}"


def renamed(it: Iter, lo: int, hi: int, taken: Iterable[str] = ()) -> Iter:
    """``it`` with range ``lo:hi``: itself if unchanged, else a new iterator named after its
    base name and the range (not its full name: growing then shrinking a range gives back
    the same iterator, so the e-graph converges), avoiding the names in ``taken``."""
    if (it.lo, it.hi) == (lo, hi) and it.name not in taken:
        return it
    base, taken, salt = it.name.split(SEP)[0], set(taken), 0
    name = fresh_name(base, base, lo, hi)
    while name in taken:
        salt += 1
        name = fresh_name(base, base, lo, hi, salt)
    return Iter(name, lo, hi)


def hint_of(e: sympy.Expr) -> str:
    """Letters for a fresh iterator replacing ``e``: its iterators' base names (``h+r-1`` → hr)."""
    names = sorted({s.name.split(SEP)[0] for s in e.free_symbols})
    return "".join(n[:2] for n in names)[:6] or "v"


# -- index bounds ---------------------------------------------------------------------------
ENUMERATE_LIMIT = 1 << 16  # points enumerated for exact bounds; interval arithmetic beyond


def index_bounds(e: sympy.Expr, ranges: dict[str, tuple[int, int]]) -> tuple[int, int]:
    """Half-open ``(lo, hi)`` of the values ``e`` takes over the iterators' ranges.

    Exact (by enumeration) when the iterators ``e`` reads span at most ``ENUMERATE_LIMIT``
    points, else interval arithmetic (sound: the range may be larger than needed). An empty
    range of an iterator gives ``(0, 0)``.
    """
    e = sympy.sympify(e)
    names = sorted(s.name for s in e.free_symbols)
    if any(ranges[n][1] <= ranges[n][0] for n in names):
        return (0, 0)
    if math.prod(ranges[n][1] - ranges[n][0] for n in names) <= ENUMERATE_LIMIT:
        interp = Interpreter({})
        interp.ranges = {n: ranges[n] for n in names}
        values = np.asarray(interp.index(e).array)
        return int(values.min()), int(values.max()) + 1
    lo, hi = _interval(e, ranges)
    return lo, hi + 1


def _interval(e: sympy.Expr, ranges) -> tuple[int, int]:
    """Closed interval of ``e``."""
    if e.is_Integer:
        return int(e), int(e)
    if e.is_Symbol:
        lo, hi = ranges[e.name]
        return lo, hi - 1
    if isinstance(e, sympy.Add):
        parts = [_interval(a, ranges) for a in e.args]
        return sum(p[0] for p in parts), sum(p[1] for p in parts)
    if isinstance(e, sympy.Mul):
        coeff, rest = e.as_coeff_Mul()
        if coeff.is_Rational and not isinstance(rest, sympy.Mul):
            lo, hi = _interval(rest, ranges)
            a, b = coeff * lo, coeff * hi
            return int(sympy.floor(min(a, b))), int(sympy.ceiling(max(a, b)))
    if isinstance(e, sympy.floor):
        num, den = e.args[0].as_numer_denom()
        if den.is_Integer and int(den) > 0:
            lo, hi = _interval(num, ranges)
            return lo // int(den), hi // int(den)
    if isinstance(e, sympy.Mod) and e.args[1].is_Integer and int(e.args[1]) > 0:
        return 0, int(e.args[1]) - 1
    raise ValueError(f"index_bounds: unsupported index expression {e}")


# -- bodies ---------------------------------------------------------------------------------
def zero_guards(e: Expr) -> list[Access]:
    """Reads of ``e`` that make ``e`` zero when out of bounds (factors of products, through
    zero-preserving unary ops); a sum is zero only if both sides are, so it guards nothing."""
    if isinstance(e, Access):
        return [e]
    if isinstance(e, Binary) and e.op in (BinOp.MUL, BinOp.MASK):  # mask(c, x) = 0 if c or x is
        return zero_guards(e.lhs) + zero_guards(e.rhs)
    if isinstance(e, Unary) and e.op in ZERO_PRESERVING:
        return zero_guards(e.x)
    return []


def zero_at(body: Expr, name: str, lo: int, hi: int,
            ranges: dict[str, tuple[int, int]]) -> np.ndarray:
    """For each value ``lo..hi-1`` of iterator ``name``: is ``body`` zero whatever the other
    iterators (in ``ranges``) are? True where some zero-guard read is out of bounds for all of
    them: a dim indexed by ``name`` alone, or by ``a*name + rest`` with ``rest`` not reading it.
    (Sound, not complete: False means "maybe nonzero".) One entry per value: only for ranges
    of at most ``ENUMERATE_LIMIT`` values; ``zero_everywhere`` and ``live_range`` answer for
    any range without allocating per value."""
    if hi - lo > ENUMERATE_LIMIT:
        raise ValueError(f"zero_at: {hi - lo} values of {name!r} is more than "
                         f"{ENUMERATE_LIMIT}; use zero_everywhere or live_range")
    values = np.arange(lo, hi, dtype=np.int64)
    dead = np.zeros(len(values), dtype=bool)
    sym = iterator_symbol(name)
    for a in zero_guards(body):
        for idx, (dlo, dhi) in zip(a.indices, a.source.bounds()):
            idx = sympy.sympify(idx)
            if sym not in idx.free_symbols:
                continue
            if idx.free_symbols == {sym}:
                interp = Interpreter({})
                interp.ranges = {name: (lo, hi)}
                v = np.broadcast_to(np.asarray(interp.index(idx).array), values.shape)
                dead |= (v < dlo) | (v >= dhi)
                continue
            split = _split_affine(idx, sym, ranges)
            if split is None:
                continue
            coeff, rlo, rhi = split
            first, last = coeff * values + rlo, coeff * values + rhi
            dead |= (np.maximum(first, last) < dlo) | (np.minimum(first, last) >= dhi)
    return dead


def _split_affine(idx: sympy.Expr, sym: sympy.Symbol, ranges) -> tuple[int, int, int] | None:
    """``(a, rlo, rhi)`` with ``idx = a*sym + rest`` and ``rest`` in ``rlo..rhi`` (closed),
    ``rest`` not reading ``sym``; None when ``idx`` is not of that form (or rest is empty)."""
    coeff = sympy.expand(idx).as_coefficients_dict().get(sym, 0)
    rest = sympy.expand(idx - coeff * sym)
    if not coeff or not coeff.is_Integer or sym in rest.free_symbols:
        return None
    if rest.is_Integer:
        return int(coeff), int(rest), int(rest)
    try:
        rlo, rhi = index_bounds(rest, ranges)
    except (ValueError, KeyError):
        return None
    return (int(coeff), rlo, rhi - 1) if rhi > rlo else None


def alive_interval(body: Expr, name: str, lo: int, hi: int,
                   ranges: dict[str, tuple[int, int]]) -> tuple[int, int]:
    """A half-open range inside ``lo:hi`` outside which ``body`` is zero for every value of
    iterator ``name`` (whatever the others are), by interval arithmetic alone: each guarding
    read ``a*name + rest`` of a dim ``dlo:dhi`` keeps ``name`` where ``a*v + rest`` can meet
    the dim. Sound for any range, without a value-by-value array; reads whose index is not
    of that form are not used (``zero_at`` enumerates them on small ranges)."""
    sym = iterator_symbol(name)
    a, b = lo, hi
    for acc in zero_guards(body):
        for idx, (dlo, dhi) in zip(acc.indices, acc.source.bounds()):
            idx = sympy.sympify(idx)
            if sym not in idx.free_symbols:
                continue
            split = _split_affine(idx, sym, ranges)
            if split is None:
                continue
            c, rlo, rhi = split  # alive iff c*v + rhi >= dlo and c*v + rlo <= dhi - 1
            if c > 0:
                vlo, vhi = -((rhi - dlo) // c), (dhi - 1 - rlo) // c + 1
            else:
                vlo, vhi = -((dhi - 1 - rlo) // -c), (rhi - dlo) // -c + 1
            a, b = max(a, vlo), min(b, vhi)
    return (a, b) if a < b else (lo, lo)


def zero_everywhere(body: Expr, name: str, lo: int, hi: int,
                    ranges: dict[str, tuple[int, int]]) -> bool:
    """Is ``body`` zero for every value ``lo..hi-1`` of ``name`` (sound: False is "maybe
    not")? Exact per value on small ranges, by intervals on large ones."""
    if hi <= lo:
        return True
    if hi - lo <= ENUMERATE_LIMIT:
        return bool(zero_at(body, name, lo, hi, ranges).all())
    a, b = alive_interval(body, name, lo, hi, ranges)
    return b <= a


def live_range(body: Expr, it: Iter, ranges: dict[str, tuple[int, int]]) -> tuple[int, int]:
    """The smallest range inside ``it``'s outside which ``body`` is zero (``zero_at`` on
    small ranges, ``alive_interval`` on large ones: never an array as long as the range)."""
    if it.extent > ENUMERATE_LIMIT:
        return alive_interval(body, it.name, it.lo, it.hi, ranges)
    dead = zero_at(body, it.name, it.lo, it.hi, ranges)
    live = np.flatnonzero(~dead)
    if not len(live):
        return it.lo, it.lo
    return it.lo + int(live[0]), it.lo + int(live[-1]) + 1


def substitute(e: Expr, mapping: dict[str, sympy.Expr]) -> Expr:
    """``e`` with iterator ``name`` replaced by ``mapping[name]`` in every index (not inside
    accessed scopes: they bind their own iterators)."""
    subs = {iterator_symbol(k): sympy.sympify(v) for k, v in mapping.items()}
    return map_indices(e, lambda i: sympy.sympify(i).xreplace(subs) if subs else i)


def map_indices(e: Expr, f) -> Expr:
    """``e`` with every access's indices mapped by ``f`` (accessed scopes untouched)."""
    if isinstance(e, Access):
        return Access(e.source, tuple(f(i) for i in e.indices))
    if isinstance(e, Binary):
        return Binary(e.op, map_indices(e.lhs, f), map_indices(e.rhs, f))
    if isinstance(e, Unary):
        return Unary(e.op, map_indices(e.x, f))
    return e


def rename_iters(s: Scope, new: dict[str, Iter]) -> Scope:
    """``s`` with its iterators replaced by ``new[name]`` (name and range), body indices too."""
    sub = {n: it.symbol for n, it in new.items()}
    pick = lambda its: tuple(new.get(it.name, it) for it in its)  # noqa: E731
    return scope_like(s, pick(s.traversal), pick(s.summation), substitute(s.body, sub))


def scope_like(s: Scope, traversal, summation, body: Expr, name: str | None = None) -> Scope:
    """A scope with ``s``'s reduction, dtype and name (or ``name``) and the given parts."""
    return Scope(tuple(traversal), tuple(summation), body, s.reduce, name=name or s.name,
                 dtype=s.dtype)
