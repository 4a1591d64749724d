"""Guided derivation: iterator-table matching (``ir.patterns``) steers the index rules.

EinNet's guided rules aim explorative ones at *instantiable* forms: a derivation pays off
when it leaves a library operator (Matmul, BatchMatmul, Conv, G2BMM, GBMM) plus memory-bound
eOperators. Here that is a filter on the results of every index rule (:class:`Guide`):

Each ``IndexRule`` row names its kind:

* ``"steered"`` rules branch (a result per subset of summation iterators, per range, per
  factor, per pair of dims) and keep only results that create a scope matching a target
  operator and reading more plainly (:func:`index_complexity`) than the scope rewritten --
  a conv's windows becoming a Matmul, a dilated band a dense one, never a Matmul reshaped;
* ``"canonical"`` rules, the algebra of sums and products, are kept as they are;
* ``"plain"`` ones (inlining) keep results that destroy no library operator, or whose loss
  one steered step repays with at most half the iteration points (inlining a zero-upsample
  into the conv reading it loses the conv, but the Matmul it enables skips the zeros;
  inlining a layout eOperator back into the dense operator it feeds is never kept).

Iterator tables make this cheap and blind to names, sizes and dim order. ``operators``
names what each scope of a program instantiates (``classify``), for candidates and reports.
"""
from __future__ import annotations

import math
from typing import Iterable

import sympy

from ir.analysis import iteration_points
from ir.nodes import Reduce, Scope, accesses, free_iterators, product_factors, sub_scopes
from ir.patterns import classify
from derivations.index_rules import CANONICAL, STEERED, IndexRule
from derivations.rules.iterator_split import suggest_factors

__all__ = ["TARGETS", "operators", "library_count", "index_complexity", "Guide", "guide"]

TARGETS = frozenset({"matmul", "batch_matmul", "conv", "g2bmm", "gbmm"})

_CLASS: dict[Scope, str] = {}


def _classify(s: Scope) -> str:
    hit = _CLASS.get(s)
    if hit is None:
        if len(_CLASS) > 100_000:
            _CLASS.clear()
        hit = _CLASS[s] = classify(s)
    return hit


def operators(program: Scope) -> tuple[str, ...]:
    """The operator class of every scope of ``program``, dependencies first."""
    return tuple(_classify(s) for s in sub_scopes(program))


def library_count(program: Scope) -> int:
    return sum(op in TARGETS for op in operators(program))


def index_complexity(s: Scope) -> int:
    """How far a scope's reads are from plain: per index, +1 per iterator or constant beyond
    a lone iterator, + |coefficient| - 1 per iterator, +4 per floor or mod."""
    total = 0
    for a in accesses(s.body):
        for i in a.indices:
            i = sympy.expand(sympy.sympify(i))
            terms = sympy.Add.make_args(i)
            total += max(len(terms) - 1, 0)
            for t in terms:
                coeff, rest = t.as_coeff_Mul()
                if rest.is_Symbol:
                    total += abs(int(coeff)) - 1 if coeff.is_Integer else 4
                elif not t.is_Number:
                    total += 4
    return total


class Guide:
    """The filter the index pass applies to each rule's results (see the module doc)."""

    def __init__(self, rules: Iterable[IndexRule] = ()):
        self.steered = tuple(r for r in rules if r.kind == STEERED)

    def __call__(self, rule: IndexRule, scope: Scope, results: list[Scope]) -> list[Scope]:
        before = set(sub_scopes(scope))
        # a library scope is progress when it reads more plainly than the scope it came from
        # (a conv's windows -> a Matmul; a dilated band -> a dense one); any, from the rest
        bar = index_complexity(scope) if _classify(scope) in TARGETS else float("inf")
        kept = []
        for r in results:
            after = set(sub_scopes(r))
            added = [s for s in after - before if s is not r] + [r]
            if any(_classify(s) in TARGETS and index_complexity(s) < bar for s in added):
                kept.append(r)
                continue
            if rule.kind == STEERED:
                if 2 * sum(contraction_points(s) for s in added) <= contraction_points(scope):
                    kept.append(r)  # it halves the work (a stacked piece's one slot)
                continue
            if rule.kind == CANONICAL:  # converges on its own; what it undoes (two
                # Matmuls fused into one sum) is what factoring needs (A@B + A@C = A@(B+C))
                kept.append(r)
                continue
            lost = [s for s in before - after if s is not scope and _classify(s) in TARGETS]
            if _classify(scope) in TARGETS and _classify(r) not in TARGETS:
                lost.append(scope)
            points = sum(map(iteration_points, lost))
            if not lost or _less_work(r, before, points) or self._enables_cheaper(r, points):
                kept.append(r)
        return kept

    def _enables_cheaper(self, r: Scope, points: int) -> bool:
        """Does one steered rule turn ``r`` into library operators with at most half the
        iteration points ``r`` lost (``points``)? Inlining a stride-s zero-upsample into the
        conv reading it loses the conv, but the Matmul it enables skips the zeros (s^d x
        fewer points); re-inlining a padded layout saves only the padding: not kept."""
        have = set(sub_scopes(r))
        for rule in self.steered:
            for out in rule.apply(r):
                new = [s for s in sub_scopes(out) if s not in have and _classify(s) in TARGETS]
                if new and 2 * sum(map(iteration_points, new)) <= points:
                    return True
        return False


def contraction_points(s: Scope, digits: bool = False) -> int:
    """Iteration points of ``s`` once its sums are moved inward as far as they go (what the
    ``split`` rule reaches): summation iterators eliminated greedily, each costing the
    extents of the iterators its factors read, as a contraction order is chosen. With
    ``digits``, an iterator read as ``v // a`` by some factors and ``v % a`` by others counts
    as its two digits (what iterator splitting gives the ``split`` rule: a Kronecker product's
    factors each read one digit)."""
    if s.reduce is not Reduce.SUM or not s.summation:
        return iteration_points(s)
    extent = {it.name: it.extent for it in s.traversal + s.summation}
    factors = [set(free_iterators(f)) for f in product_factors(s.body)]
    sums = {it.name for it in s.summation}
    if digits:
        for v, (a, *more) in suggest_factors(s).items():
            if more:
                continue
            high, low = (v, "high"), (v, "low")
            extent[high], extent[low] = -(-extent[v] // a), a
            sums |= {high, low} if v in sums else set()
            sums.discard(v)
            factors = [f - {v} | _digits_read(f_expr, v, high, low) if v in f else f
                       for f, f_expr in zip(factors, product_factors(s.body))]
    size = lambda names: math.prod(extent.get(n, 1) for n in names)  # noqa: E731
    todo, total = sums, 0
    while todo:
        best = min(todo, key=lambda n: (size(set().union(*(f for f in factors if n in f))),
                                        str(n)))
        group = [f for f in factors if best in f]
        merged = set().union(*group)
        total += size(merged)
        factors = [f for f in factors if best not in f] + [merged - {best}]
        todo.discard(best)
    return total + size(set().union(*factors))


def _digits_read(e, v: str, high, low) -> set:
    """Which digits of ``v`` body term ``e`` reads: ``high`` inside ``v // a``, ``low``
    inside ``v % a``, both where ``v`` is read whole."""
    out = set()
    for a in accesses(e):
        for i in a.indices:
            i = sympy.sympify(i)
            for node in sympy.preorder_traversal(i):
                if isinstance(node, sympy.floor) and v in {x.name for x in node.free_symbols}:
                    out.add(high)
                if isinstance(node, sympy.Mod) and v in {x.name for x in node.free_symbols}:
                    out.add(low)
            bare = i.replace(lambda x: isinstance(x, (sympy.floor, sympy.Mod)),
                             lambda *_: sympy.Integer(0))
            if v in {x.name for x in bare.free_symbols}:
                out |= {high, low}
    return out


def _less_work(r: Scope, before: set, points: int) -> bool:
    """Does ``r``'s new work, sums moved inward (and iterators read digit by digit split),
    take at most half the ``points`` of the library operators it lost? (Reading only a
    product's diagonal, an outer or Kronecker product through a matrix product, does a
    fraction of the operator's work.)"""
    new = [s for s in sub_scopes(r) if s not in before]
    return 2 * sum(contraction_points(s, digits=True) for s in new) <= points


def guide(rule: IndexRule, scope: Scope, results: list[Scope]) -> list[Scope]:
    """:class:`Guide` with the default index rules for its lookahead."""
    global _DEFAULT
    if _DEFAULT is None:
        from derivations.rules.index import default_index_rules
        _DEFAULT = Guide(default_index_rules())
    return _DEFAULT(rule, scope, results)


_DEFAULT: Guide | None = None
