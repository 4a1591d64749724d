"""Deriving an expression and enumerating its k best equivalent programs.

``derive`` encodes a scope, runs rulesets under a budget and returns a :class:`Derivation`;
``Derivation.candidates(k, cost)`` walks the serialized e-graph with a k-best dynamic
programme, decodes candidates to ``ir`` scopes, ranks them by the exact program cost and
checks each against the reference interpreter before it leaves ``derivations/``.

Cost. ``cost(scope)`` is the cost of one scope's own computation; a program costs the sum
over its distinct sub-scopes (``ir.sub_scopes``). Inside the e-graph a scope node's own cost
does not depend on which forms its children take (only on their shapes), so each node is
costed once and a tree's cost is additive. The DP (``_Beam``) keeps the ``width`` cheapest
distinct trees per e-class, combining a node's children by varying one child at a time
from the all-best choice; rounds repeat until no list changes (e-graphs have cycles; a tree
never contains its own class, so every tree is finite). The tree cost counts a scope read
twice twice; the final ranking uses the exact program cost.

Provenance. Every ``sum`` node made by a rule carries ``made_by``: the chain of rule names
from an encoded node to it (first derivation found). A candidate's ``rule_chain`` is the
chain of its root node followed by the steps of its other derived scopes that the root's
chain does not already contain: the rules whose firings produced the chosen form.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Callable

from egglog import EGraph

from ir.analysis import flops, iteration_points
from ir.canonical import fingerprint
from ir.check import check
from ir.errors import IRError
from ir.equiv import compare
from ir.nodes import Scope, sub_scopes
from derivations.dag import TIME_LIMIT as DAG_SECONDS, dag_extract
from derivations.encode import Encoding, encode
from derivations.guided import guide as default_guide, operators
from derivations.index_pass import Guide, IndexPass, declare
from derivations.send import Sender, egg_names
from derivations.index_rules import IndexRule
from derivations.rules import Rules, default_rulesets
from derivations.rules.index import default_index_rules
from derivations.schedule import (
    Budget, Report, admit, collector_paused, expression_depth, recursion_room, run_rulesets,
)
from derivations.term import SCOPE_OPS, Term
from derivations.view import ENode, Ref, View, load

__all__ = ["Candidate", "Derivation", "derive", "VERIFY_LIMIT"]

VERIFY_LIMIT = 1 << 26  # iteration points (traversal x summation, over all scopes) checked
DAG_FLOOR = 0.05  # seconds the ILP always gets, even past the budget (small ones take ms)
VERIFY_RATE = 2.5e7  # points (of the bigger program) a check does per second, until measured
VERIFY_FLOOR = 1 << 20  # points a check may take even past the budget (at most some 0.2 s)


@dataclass(frozen=True)
class Candidate:
    program: Scope
    cost: float
    rule_chain: tuple[str, ...]
    verified: bool | None  # True: equals the original on random inputs; None: too big to check
    operators: tuple[str, ...] = ()  # what each scope instantiates (``ir.patterns.classify``)


@dataclass
class Derivation:
    """An expression in an e-graph after a run; ``candidates`` reads programs out of it."""

    expr: Scope
    term: Term = field(repr=False)
    encoding: Encoding = field(repr=False)
    egraph: EGraph = field(repr=False)
    report: Report
    rejected: list[tuple[Scope, str]] = field(default_factory=list)  # failed the check, why
    _view: View | None = field(default=None, repr=False)
    _checked: dict = field(default_factory=dict, repr=False)  # fingerprint -> (ok, why)
    dag: bool = True              # also extract by ILP (derivations.dag), shared scopes once
    dag_seconds: float = DAG_SECONDS
    dag_term: Term | None = field(default=None, repr=False)   # the ILP's pick, if any
    deadline: float | None = None  # ``time.perf_counter()`` when the budget ends: the ILP
    #                                gets half of what is left (at least DAG_FLOOR seconds)
    _verify_rate: float = field(default=0.0, repr=False)  # check points per second, measured

    @property
    def view(self) -> View:
        if self._view is None:
            self._view = load(self.egraph, "Root")
            self.report.classes = len(self._view.classes)
        return self._view

    def candidates(self, k: int, cost: Callable[[Scope], float],
                   verify_limit: int = VERIFY_LIMIT) -> list[Candidate]:
        """The ``k`` cheapest distinct verified programs, plus the original if not among them.

        Programs up to ``verify_limit`` iteration points are checked by the reference
        interpreter; bigger ones are marked unchecked (a caller that runs every candidate
        against the original anyway, as the compiler does, passes a small limit), and so
        are those whose check would not end within the budget (``VERIFY_RATE``; checks up
        to ``VERIFY_FLOOR`` points always run)."""
        with recursion_room(expression_depth(self.expr)), collector_paused():
            return self._candidates(k, cost, verify_limit)

    def _candidates(self, k: int, cost: Callable[[Scope], float],
                    verify_limit: int = VERIFY_LIMIT) -> list[Candidate]:
        view, enc = self.view, self.encoding
        beam = _Beam(view, enc, cost, width=k + 2)
        picks = beam.run(root_width=2 * k + 4)
        original = self._candidate(self.expr, (), cost, verified=True)
        seen: dict[object, Candidate] = {self.term: original, _identity(self.expr): original}
        found = [(beam.term(pick), lambda p=pick: beam.chain(p)) for pick in picks]
        if self.dag:  # the program of least DAG cost: shared scopes paid once
            seconds = self.dag_seconds  # half of what is left: the checks follow
            if self.deadline is not None:
                seconds = min(seconds, max(DAG_FLOOR, (self.deadline - time.perf_counter()) / 2))
            dag = dag_extract(view, enc, cost, seconds, known=beam._own)
            if dag is not None:
                term, nodes = dag
                self.dag_term = term
                found.insert(0, (term, lambda: _merge_chains(
                    [c for n in nodes if (c := view.chain(n))])))
        for term, chain in found:
            if term in seen:
                continue
            program = _as_root(enc.decode(term, enc.root_order), self.expr)
            ident = _identity(program)
            if ident not in seen:
                seen[term] = seen[ident] = self._candidate(program, chain(), cost, None)
        ranked = sorted({id(c): c for c in seen.values()}.values(),  # equal cost: less work
                        key=lambda c: (c.cost, sum(map(flops, sub_scopes(c.program)))))
        out: list[Candidate] = []
        for cand in ranked:
            if len(out) == k:
                break
            checked = self._check(cand, self._within_budget(verify_limit))
            if checked is not None:  # (classifying every ranked program would cost more)
                out.append(dataclasses.replace(checked, operators=operators(checked.program)))
        if all(c.program is not self.expr for c in out):
            out.append(dataclasses.replace(original, operators=operators(self.expr)))
        return out

    def _candidate(self, program, chain, cost, verified) -> Candidate:
        try:
            check(program)
        except IRError:  # a malformed decode (a rule's bug): last in line, the check rejects it
            return Candidate(program, float("inf"), tuple(chain), verified, ())
        total = float(sum(cost(s) for s in sub_scopes(program)))
        return Candidate(program, total, tuple(chain), verified)

    def _within_budget(self, limit: int) -> int:
        """``limit``, or fewer points where the budget's end comes first, at the rate the
        checks so far ran (``VERIFY_RATE`` before the first: library-like contractions
        evaluate far faster than gathers, so a measured rate beats any constant)."""
        if self.deadline is None:
            return limit
        left = max(0.0, self.deadline - time.perf_counter())
        return min(limit, max(VERIFY_FLOOR, int(left * (self._verify_rate or VERIFY_RATE))))

    def _check(self, cand: Candidate, limit: int = VERIFY_LIMIT) -> Candidate | None:
        """``cand`` marked checked, or None (and reported in ``rejected``) if it is wrong."""
        if cand.program is self.expr:
            return cand
        key = (_identity(cand.program), limit)
        if key not in self._checked:
            t0 = time.perf_counter()
            self._checked[key] = _verify(self.expr, cand.program, limit)
            points, seconds = self._checked[key][2], time.perf_counter() - t0
            if points >= VERIFY_FLOOR and seconds > 0:  # big enough to time
                self._verify_rate = points / seconds
            if self._checked[key][0] is False:
                self.rejected.append((cand.program, self._checked[key][1]))
        ok = self._checked[key][0]
        return None if ok is False else dataclasses.replace(cand, verified=ok)


def derive(expr: Scope, budget: Budget = Budget(), rulesets: tuple[Rules, ...] | None = None,
           index_rules: tuple[IndexRule, ...] | None = None,
           guide: Guide | None = default_guide,
           on_iteration: Callable | None = None) -> Derivation:
    """Put ``expr`` in an e-graph and run ``rulesets`` and ``index_rules`` under ``budget``.

    Defaults: the algebra and every index rule (explorative, steered by ``guide``, plus the
    layout rules); when ``rulesets`` is given and ``index_rules`` is not, no index rules run
    (a run of chosen egglog rulesets stays just that). ``guide=None`` explores unsteered.
    ``on_iteration(report, seconds)`` is called after every iteration (progress display).
    An input nested deeper than ``schedule.MAX_DEPTH`` raises ``InputTooDeep`` at once.
    """
    # the rules first: loading them (the synthesized ones are read from disk) is not the
    # derivation's time
    chosen = default_rulesets() if rulesets is None else tuple(rulesets)
    if index_rules is None:
        index_rules = default_index_rules() if rulesets is None else ()
    with recursion_room(admit(expr)), collector_paused():
        return _derive(expr, budget, chosen, tuple(index_rules), guide, on_iteration)


def _derive(expr, budget, chosen, index_rules, guide, on_iteration) -> Derivation:
    started = time.perf_counter()  # the budget covers the encoding and the extraction too
    term, enc = encode(expr)
    egraph = EGraph()
    # The term goes in as egglog's own commands (derivations.send), never through
    # egglog-python's expressions: those hoist shared container values (Set, MultiSet) into
    # global lets, and a let made in one command can be stale in a later one (it then names
    # another container). Rules have no such lets, and the index pass sends the same way.
    declare(egraph)
    sender = Sender(egg_names(egraph))
    for name in enc.iters:
        sender.iterator(name)
    sender.root(term)
    sender.run(egraph)
    index = IndexPass(enc, index_rules, guide, sender) if index_rules else None
    report = run_rulesets(egraph, chosen, budget, index, on_iteration, started=started)
    return Derivation(expr, term, enc, egraph, report, deadline=started + budget.seconds)


# -- the k-best dynamic programme -------------------------------------------------------------
class _Pick:
    """One tree: a node of a class with a pick for each child class."""

    __slots__ = ("cost", "node", "kids", "scopes", "key")

    def __init__(self, cost, node, kids, scopes, key):
        self.cost, self.node, self.kids, self.scopes, self.key = cost, node, kids, scopes, key


class _Beam:
    def __init__(self, view: View, enc: Encoding, cost: Callable[[Scope], float], width: int):
        self.view, self.enc, self.cost, self.width = view, enc, cost, width
        self.best: dict[str, list[_Pick]] = {}
        self._keys: dict[tuple, int] = {}
        self._own: dict[ENode, float] = {}
        self._terms: dict[int, Term] = {}

    def run(self, root_width: int, max_rounds: int = 64) -> list[_Pick]:
        order = self._postorder(self.view.root)
        for _ in range(max_rounds):
            changed = False
            for c in order:
                width = root_width if c == self.view.root else self.width
                new = self._class(c, width)
                if [p.key for p in new] != [p.key for p in self.best.get(c, [])]:
                    self.best[c], changed = new, True
            if not changed:
                break
        return self.best.get(self.view.root, [])

    def _postorder(self, root: str) -> list[str]:
        order, seen, stack = [], {root}, [(root, iter(self._kid_classes(root)))]
        while stack:
            c, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                order.append(c)
                stack.pop()
            elif nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, iter(self._kid_classes(nxt))))
        return order

    def _kid_classes(self, c: str) -> list[str]:
        return [k for n in self.view.classes.get(c, []) for k in n.kids()]

    def _class(self, c: str, width: int) -> list[_Pick]:
        found: dict[int, _Pick] = {}
        for node in self.view.classes.get(c, []):
            lists = [self.best.get(k) for k in node.kids()]
            if not all(lists):
                continue
            scope = node.op in SCOPE_OPS
            for combo in _combos(lists):
                if scope and any(c in p.scopes for p in combo):
                    continue  # the class would contain itself
                pick = self._pick(node, combo, scope)
                found.setdefault(pick.key, pick)
        return sorted(found.values(), key=lambda p: (p.cost, p.key))[:width]

    def _pick(self, node: ENode, kids: tuple[_Pick, ...], scope: bool) -> _Pick:
        key = self._keys.setdefault((node, tuple(p.key for p in kids)), len(self._keys))
        scopes = frozenset().union(*(p.scopes for p in kids))
        own = 0.0
        if scope:
            scopes |= {node.cls}
            if node not in self._own:
                pick = _Pick(0.0, node, kids, scopes, key)
                self._own[node] = float(self.cost(self.enc.decode(self.term(pick))))
            own = self._own[node]
        return _Pick(own + sum(p.cost for p in kids), node, kids, scopes, key)

    def term(self, pick: _Pick) -> Term:
        t = self._terms.get(pick.key)
        if t is None:
            kids = iter([self.term(p) for p in pick.kids])
            args = tuple(_fill(a, kids) for a in pick.node.args)
            t = self._terms[pick.key] = Term(pick.node.op, args)
        return t

    def chain(self, pick: _Pick) -> tuple[str, ...]:
        chains: list[tuple[str, ...]] = []
        stack = [pick]
        while stack:
            p = stack.pop()
            c = self.view.chain(p.node)
            if c:
                chains.append(c)
            stack.extend(reversed(p.kids))
        return _merge_chains(chains)


def _fill(arg, kids):
    if isinstance(arg, Ref):
        return next(kids)
    if isinstance(arg, tuple) and arg and isinstance(arg[0], Ref):
        return tuple(next(kids) for _ in arg)
    return arg


def _combos(lists: list[list[_Pick]]):
    base = tuple(l[0] for l in lists)
    yield base
    for i, l in enumerate(lists):
        for alt in l[1:]:
            yield base[:i] + (alt,) + base[i + 1:]


def _merge_chains(chains: list[tuple[str, ...]]) -> tuple[str, ...]:
    """The first chain, then each later one's steps past its longest prefix already listed."""
    if not chains:
        return ()
    out = list(chains[0])
    listed = [chains[0]]
    for c in chains[1:]:
        common = max(_prefix(c, d) for d in listed)
        if common < len(c):
            out.extend(c[common:])
            listed.append(c)
    return tuple(out)


def _prefix(a, b) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _as_root(program: Scope, original: Scope) -> Scope:
    """``program`` named and typed as the original root (a derived root's own hint may be
    another scope's: decoding names derived scopes by their iterator sets)."""
    if (program.name, program.dtype) == (original.name, original.dtype):
        return program
    return Scope(program.traversal, program.summation, program.body, program.reduce,
                 name=original.name, dtype=original.dtype)


# -- checks ------------------------------------------------------------------------------------
def _identity(program: Scope) -> str:
    """Key of a program up to iterator renaming and commutative order."""
    return fingerprint(program)


def _verify(original: Scope, program: Scope, limit: int = VERIFY_LIMIT
            ) -> tuple[bool | None, str, int]:
    """(equal on random inputs, why not, the points checked); (None, ...) when either side
    is too big to evaluate.

    A program too big to evaluate is still checked for validity and for the original's
    output range: that much is cheap, and catches a malformed decode.
    """
    try:
        check(program)
    except IRError as e:
        return False, f"invalid program: {e}", 0
    if program.bounds() != original.bounds():
        return False, f"output range {program.bounds()} is not the original's {original.bounds()}", 0
    points = max(sum(iteration_points(s) for s in sub_scopes(p)) for p in (original, program))
    if points > limit:
        return None, f"not checked: {points} iteration points > {limit}", 0
    result = compare(original, program)
    return result.ok, result.reason, points
