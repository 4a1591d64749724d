"""Pruning, Ruler-style: keep a rule only if the rules kept before it cannot derive it.

Verified rules are taken smallest first. Each kept rule becomes a pair of egglog rewrites
(both directions) over :class:`P`, the term language as an e-graph sort. Every remaining
candidate's sides go into one small e-graph as ``Pair(i, lhs, rhs)``; after the kept rules
and the built-in ones run for a few iterations, a candidate whose sides share an e-class is
derivable and dropped. Repeat until no candidate is left: what is kept derives every
verified rule (within the iteration bound), and drops what follows from smaller rules.
``minimize`` then drops kept rules that rules kept after them derive.

Typing: a rule with an index operator or a sum holds for operands of the ranks it was
verified at, so its variables match only e-classes of those ranks (``rank``); a pointwise
rule is a scalar identity and matches any rank. A rule with a side condition matches only
where ``Pos`` (positivity facts: ``exp``, positive constants, products and sums of positive
terms) holds for its operands; a conditional candidate's operands are leaves assumed
positive (``a>0``), so only such facts derive it.

Built in (``BUILTIN``): what ``ir.canonical`` and the e-graph's encoding already identify,
so that no kept rule has to say it: commutativity of ``+`` and ``*``, and index maps
(``T``, ``diag``, ``bcast``) commuting with elementwise operators and composing
(``T(T(A)) = A``, ``diag(T(A)) = diag(A)``, ``diag(bcast(x)) = x``).
"""
from __future__ import annotations

from typing import Iterable

from egglog import (
    EGraph, Expr, StringLike, eq, function, get_callable_args, get_literal_value, i64, i64Like,
    relation, rewrite, rule, ruleset, set_, var, vars_,
)

from derivations.synthesis.lang import VARS, Rule, is_pointwise, variables

__all__ = ["P", "prune", "minimize", "derivable", "to_egg", "rewrites", "BUILTIN"]

ITERATIONS = 4        # rule iterations per derivability check
NODE_LIMIT = 60_000   # stop iterating early past this many e-nodes


class P(Expr):
    """A term of :mod:`derivations.synthesis.lang` in the e-graph."""

    @classmethod
    def var(cls, name: StringLike) -> P: ...

    @classmethod
    def const(cls, value: i64Like) -> P: ...

    @classmethod
    def neg(cls, x: P) -> P: ...

    @classmethod
    def exp(cls, x: P) -> P: ...

    @classmethod
    def log(cls, x: P) -> P: ...

    @classmethod
    def T(cls, x: P) -> P: ...

    @classmethod
    def diag(cls, x: P) -> P: ...

    @classmethod
    def bcast(cls, x: P) -> P: ...

    @classmethod
    def sum(cls, x: P) -> P: ...

    @classmethod
    def add(cls, x: P, y: P) -> P: ...

    @classmethod
    def sub(cls, x: P, y: P) -> P: ...

    @classmethod
    def mul(cls, x: P, y: P) -> P: ...


@function(merge=lambda old, new: old)
def rank(x: P) -> i64: ...


Pos = relation("Pos", P)
Pair = relation("Pair", i64, P, P)


@function(merge=lambda old, new: old)
def same(i: i64Like) -> i64: ...


_UNARY = ("neg", "exp", "log", "T", "diag", "bcast", "sum")
_BINARY = ("add", "sub", "mul")


def to_egg(t: tuple, leaf) -> P:
    """The ``P`` expression of term ``t``; ``leaf(name)`` gives each operand's expression."""
    op = t[0]
    if op == "var":
        return leaf(t[1])
    if op == "const":
        return P.const(i64(t[1]))
    if op in _UNARY:
        return getattr(P, op)(to_egg(t[1], leaf))
    return getattr(P, op)(to_egg(t[1], leaf), to_egg(t[2], leaf))


def rewrites(r: Rule, name: str = "") -> list:
    """Both directions of ``r`` as egglog rewrites, typed and guarded (module doc); not
    from a side that is a bare operand."""
    pattern = {v: var(f"{v}_", P) for v in variables(r.lhs) | variables(r.rhs)}
    conds = [Pos(pattern[v]) for v in r.positive]
    if not (is_pointwise(r.lhs) and is_pointwise(r.rhs)):
        conds += [eq(rank(pattern[v])).to(i64(VARS[v])) for v in sorted(pattern)]
    lhs, rhs = (to_egg(t, pattern.__getitem__) for t in (r.lhs, r.rhs))
    out = []
    for (a, ta), (b, _) in (((lhs, r.lhs), (rhs, r.rhs)), ((rhs, r.rhs), (lhs, r.lhs))):
        if ta[0] != "var":  # a bare operand matches nothing (and would only grow terms)
            out.append(rewrite(a).to(b, *conds))
    return out


# -- analysis: ranks and positivity --------------------------------------------------------------
_x, _y = vars_("x y", P)


@ruleset
def _facts(x: P, y: P, r: i64, s: i64, c: i64):
    yield rule(eq(x).to(P.const(c))).then(set_(rank(x)).to(i64(0)))
    for op in ("neg", "exp", "log"):
        yield rule(eq(y).to(getattr(P, op)(x)), eq(r).to(rank(x))).then(set_(rank(y)).to(r))
    for op, out in (("T", 2), ("diag", 1), ("bcast", 2)):
        yield rule(eq(y).to(getattr(P, op)(x))).then(set_(rank(y)).to(i64(out)))
    yield rule(eq(y).to(P.sum(x)), eq(r).to(rank(x))).then(set_(rank(y)).to(r - 1))
    z = var("z", P)
    for op in _BINARY:
        yield rule(eq(z).to(getattr(P, op)(x, y)), eq(r).to(rank(x)), eq(s).to(rank(y))).then(
            set_(rank(z)).to(r.max(s)))
    # positivity: exp is > 0; so are positive constants, and + * of positives (and their
    # transposes, diagonals, broadcasts and sums over nonempty ranges)
    yield rule(eq(y).to(P.exp(x))).then(Pos(y))
    yield rule(eq(y).to(P.const(c)), c > i64(0)).then(Pos(y))
    for op in ("add", "mul"):
        yield rule(eq(z).to(getattr(P, op)(x, y)), Pos(x), Pos(y)).then(Pos(z))
    for op in ("T", "diag", "bcast", "sum"):
        yield rule(eq(y).to(getattr(P, op)(x)), Pos(x)).then(Pos(y))


def _builtin_rules():
    a, b = vars_("a b", P)
    out = [rewrite(P.add(a, b)).to(P.add(b, a)), rewrite(P.mul(a, b)).to(P.mul(b, a)),
           rewrite(P.T(P.T(a))).to(a), rewrite(P.diag(P.T(a))).to(P.diag(a)),
           rewrite(P.diag(P.bcast(a))).to(a)]
    for index in ("T", "diag", "bcast"):
        f = getattr(P, index)
        arg = 1 if index == "bcast" else 2
        for op in ("neg", "exp", "log"):
            g = getattr(P, op)
            out += [rewrite(f(g(a))).to(g(f(a))), rewrite(g(f(a))).to(f(g(a)))]
        for op in _BINARY:
            g = getattr(P, op)
            both = [eq(rank(a)).to(i64(arg)), eq(rank(b)).to(i64(arg))]
            out += [rewrite(f(g(a, b))).to(g(f(a), f(b)), *both),
                    rewrite(g(f(a), f(b))).to(f(g(a, b)), *both)]
            # a scalar operand broadcasts: the index map passes it by
            left = [eq(rank(a)).to(i64(0)), eq(rank(b)).to(i64(arg))]
            right = [eq(rank(b)).to(i64(0)), eq(rank(a)).to(i64(arg))]
            out += [rewrite(f(g(a, b))).to(g(a, f(b)), *left),
                    rewrite(g(a, f(b))).to(f(g(a, b)), *left),
                    rewrite(f(g(a, b))).to(g(f(a), b), *right),
                    rewrite(g(f(a), b)).to(f(g(a, b)), *right)]
    return out


BUILTIN = ruleset(*_builtin_rules(), name="builtin")


# -- derivability -----------------------------------------------------------------------------
def _leaf(positive: Iterable[str]):
    positive = set(positive)
    return lambda name: P.var(f"{name}>0" if name in positive else name)


def _egraph(cands: list[Rule]) -> EGraph:
    eg = EGraph()
    leaves = set()
    facts = []
    for i, c in enumerate(cands):
        leaf = _leaf(c.positive)
        facts.append(Pair(i64(i), to_egg(c.lhs, leaf), to_egg(c.rhs, leaf)))
        for v in variables(c.lhs) | variables(c.rhs):
            leaves.add((v, v in c.positive))
    for v, pos in sorted(leaves):
        x = P.var(f"{v}>0" if pos else v)
        facts.append(set_(rank(x)).to(i64(VARS[v])))
        if pos:
            facts.append(Pos(x))
    eg.register(*facts)
    return eg


def _same(eg: EGraph, kept_rules: list, n: int) -> set[int]:
    """Indices of the pairs the kept rules (and the built-in ones) join."""
    step = _facts.saturate() + BUILTIN
    if kept_rules:
        step = step + ruleset(*kept_rules)
    for _ in range(ITERATIONS):
        eg.run(step)
        if sum(size for _, size in eg.all_function_sizes()) > NODE_LIMIT:
            break
    eg.run(_facts.saturate())
    i = var("i", i64)
    eg.run(ruleset(rule(Pair(i, _x, _y), eq(_x).to(_y)).then(set_(same(i)).to(i64(1)))))
    if not eg.function_size(same):
        return set()
    return {int(get_literal_value(get_callable_args(k)[0])) for k in eg.function_values(same)}


def prune(rules: list[Rule], batch: int = 1) -> list[Rule]:
    """The rules kept (module doc), in the order given (smallest first)."""
    alive = list(range(len(rules)))
    kept: list[int] = []
    kept_rules: list = []
    while alive:
        take, alive = alive[:batch], alive[batch:]
        for i in take:
            kept.append(i)
            kept_rules += rewrites(rules[i])
        if not alive:
            break
        cands = [rules[i] for i in alive]
        eg = _egraph(cands)
        joined = _same(eg, kept_rules, len(cands))
        alive = [i for k, i in enumerate(alive) if k not in joined]
    return [rules[i] for i in kept]


def minimize(kept: list[Rule]) -> list[Rule]:
    """``kept`` without the rules the others derive, tried largest first (a rule kept early
    can follow from one kept later: ``exp(a)*exp(a) = exp(a+a)`` from ``exp(a)*exp(b) =
    exp(a+b)``)."""
    keep = list(kept)
    for r in reversed(kept):
        others = [q for q in keep if q != r]
        if derivable([r], others)[0]:
            keep = others
    return keep


def derivable(target: list[Rule], by: list[Rule]) -> list[bool]:
    """For each rule of ``target``: do the rules ``by`` (and the built-in ones) derive it?"""
    if not target:
        return []
    kept_rules = [rw for r in by for rw in rewrites(r)]
    joined = _same(_egraph(target), kept_rules, len(target))
    return [k in joined for k in range(len(target))]

