"""The egglog language that ``ir`` scopes are encoded into (sorts, analysis tables, relations).

Three sorts mirror the IR (see :mod:`derivations.encode` for why they look the way they do):

* ``EScope`` -- a scope, *closed* (it binds every iterator its body uses):
  ``EScope.sum(out, sums, factors)`` is ``T[out] = sum[sums] prod(factors)`` with ``factors`` a
  ``MultiSet`` (products are commutative and associative by construction, no AC rules), and
  ``EScope.reduce(op, out, sums, body)`` is a max/min reduction. ``out`` and ``sums`` are
  ``Set[String]`` of globally unique iterator names: the order of output axes is not part of
  a scope's identity (see ``ESource.scope`` and ``EBody.use`` for how it is recovered).
* ``EBody`` -- a body term: ``acc`` (positional read of a tensor or scope at index
  expressions stored opaquely as ``sympy.srepr`` strings, with their free iterators),
  ``use`` (read a scope at its own output iterators, *by name*: the form rules work on),
  ``const``, ``bin``, ``un``.
* ``ESource`` -- what ``acc`` reads: an input tensor by name, or a scope with its axis order.

Tables that are facts, not forms: ``fv`` (free iterators of a body term), ``lo`` / ``hi``
(bounds of a body term's values, :mod:`derivations.rules.facts`), ``Iterator`` (every
iterator name, so rules can enumerate them), ``outer_of`` / ``inner_fv`` (a product split by
one summation iterator) and ``made_by`` (provenance: the rule chain that first created a
scope e-node, keyed by the node's arguments). ``slot_scope`` / ``slot_body`` name terms sent
by the index pass (:mod:`derivations.send`).
"""
from __future__ import annotations

from egglog import (
    Expr, MultiSet, Set, String, StringLike, Vec, f64, f64Like, function, i64Like, relation,
)

__all__ = [
    "ESource", "EBody", "EScope", "fv", "made_by", "Iterator", "Root", "outer_of", "inner_fv",
    "lo", "hi", "names", "OPS", "slot_scope", "slot_body",
]


class EScope(Expr):
    """A closed scope: ``sum`` of a product of factors, or a max/min ``reduce``."""

    @classmethod
    def sum(cls, out: Set[String], sums: Set[String], factors: MultiSet[EBody]) -> EScope: ...

    @classmethod
    def reduce(cls, op: StringLike, out: Set[String], sums: Set[String], body: EBody) -> EScope: ...


class ESource(Expr):
    """The source of a positional access."""

    @classmethod
    def tensor(cls, name: StringLike) -> ESource: ...

    @classmethod
    def scope(cls, s: EScope, order: Vec[String]) -> ESource: ...


class EBody(Expr):
    """A body term; its free iterators are ``fv(term)``."""

    @classmethod
    def acc(cls, src: ESource, index: Vec[String], free: Set[String]) -> EBody: ...

    @classmethod
    def use(cls, s: EScope) -> EBody: ...

    @classmethod
    def const(cls, value: f64Like) -> EBody: ...

    @classmethod
    def bin(cls, op: StringLike, lhs: EBody, rhs: EBody) -> EBody: ...

    @classmethod
    def un(cls, op: StringLike, x: EBody) -> EBody: ...


@function(merge=lambda old, new: old & new)  # equal terms depend on the common iterators only
def fv(body: EBody) -> Set[String]: ...


@function(merge=lambda old, new: old)  # the first derivation found is kept
def made_by(out: Set[String], sums: Set[String], factors: MultiSet[EBody]) -> String: ...


@function(merge=lambda old, new: old.max(new))  # facts only tighten
def lo(body: EBody) -> f64: ...


@function(merge=lambda old, new: old.min(new))
def hi(body: EBody) -> f64: ...


# Slots: the e-class of a term the index pass sent, by number, so that later commands name
# it in one node instead of spelling it out (derivations.send). Not part of the language:
# readers of the e-graph skip them.
@function(merge=lambda old, new: new)
def slot_scope(k: i64Like) -> EScope: ...


@function(merge=lambda old, new: new)
def slot_body(k: i64Like) -> EBody: ...


Iterator = relation("Iterator", String)
Root = relation("Root", EScope)  # marks the expression being derived, to find it again


# For the node sum(out, sums, factors) and one of its summation iterators s:
@function(merge=lambda old, new: old | new)  # the distinct factors that do not read s
def outer_of(out: Set[String], sums: Set[String], factors: MultiSet[EBody], s: StringLike) -> Set[EBody]: ...


@function(merge=lambda old, new: old | new)  # the iterators read by the factors that read s
def inner_fv(out: Set[String], sums: Set[String], factors: MultiSet[EBody], s: StringLike) -> Set[String]: ...


def names(xs) -> Set[String]:
    """A ``Set[String]`` literal of iterator names."""
    xs = sorted(xs)
    return Set[String](*(String(x) for x in xs)) if xs else Set[String].empty()


# Operator names as they appear in the serialized e-graph.
OPS = {
    "sum": "EScope.sum", "reduce": "EScope.reduce",
    "tensor": "ESource.tensor", "scope": "ESource.scope",
    "acc": "EBody.acc", "use": "EBody.use", "const": "EBody.const",
    "bin": "EBody.bin", "un": "EBody.un",
    "made_by": "made_by", "root": "Root",
}
