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

import hashlib
import math
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
    "IndexRule", "fresh_name", "renamed", "index_bounds", "product_factors", "build_product",
    "zero_guards", "zero_at", "live_range", "map_indices", "substitute", "rename_iters",
    "scope_like", "hint_of", "ENUMERATE_LIMIT", "SEP",
]


@dataclass(frozen=True)
class IndexRule:
    """A named rewrite of one scope into equivalent scopes (see the module's contract)."""

    name: str
    reason: str
    apply: Callable[[Scope], Iterable[Scope]]

    def __repr__(self) -> str:
        return f"IndexRule({self.name!r}: {self.reason})"


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
    if isinstance(e, Binary) and e.op is BinOp.MUL:
        return zero_guards(e.lhs) + zero_guards(e.rhs)
    if isinstance(e, Unary) and e.op in ZERO_PRESERVING:
        return zero_guards(e.x)
    return []


def zero_at(body: Expr, name: str, lo: int, hi: int,
            ranges: dict[str, tuple[int, int]]) -> np.ndarray:
    """For each value ``lo..hi-1`` of iterator ``name``: is ``body`` zero whatever the other
    iterators (in ``ranges``) are? True where some zero-guard read is out of bounds for all of
    them: a dim indexed by ``name`` alone, or by ``a*name + rest`` with ``rest`` not reading it.
    (Sound, not complete: False means "maybe nonzero".)"""
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
            coeff = sympy.expand(idx).as_coefficients_dict().get(sym, 0)
            rest = sympy.expand(idx - coeff * sym)
            if not coeff or not coeff.is_Integer or sym in rest.free_symbols:
                continue
            rlo, rhi = index_bounds(rest, ranges)
            if rhi <= rlo:
                continue
            first, last = int(coeff) * values + rlo, int(coeff) * values + rhi - 1
            dead |= (np.maximum(first, last) < dlo) | (np.minimum(first, last) >= dhi)
    return dead


def live_range(body: Expr, it: Iter, ranges: dict[str, tuple[int, int]]) -> tuple[int, int]:
    """The smallest range inside ``it``'s outside which ``body`` is zero (``zero_at``)."""
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
