"""Applying index rules to the e-graph between egglog iterations.

One pass: read the e-graph (``view.load``), pick for every e-class its smallest term (its
*representative*), and for every scope e-node not seen before build its term over the
representatives of its children, decode it to an ``ir`` scope, call each rule's ``apply``,
encode each result with the rule's names kept (:meth:`Encoding.encode_derived`) and union it
with the node. The unions go to egglog as egglog's own command objects, built by
:class:`derivations.send.Sender` (no text, and every scope sent once: a slot names it in
later commands). egglog-python's expression layer is not involved, so none of its global
``let``s for shared containers is made, and the 13.2 bug of a stale let naming another
container after a later command cannot arise (see ``extract.derive``). The same commands
record provenance (``made_by``: the node's rule chain plus the rule's name, for every new
``sum`` node of the result) and the new iterators.

Why not alternatives: rebuilding the e-graph from Python after each pass would redo every
egglog iteration and hit the let bug as soon as a term is registered after the first
command; encoding results as egglog rules (a rule whose action builds the term) goes
through the same Python let machinery; egglog text costs the square of its size (see
:mod:`derivations.send`).
"""
from __future__ import annotations

import heapq
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable

from egglog import EGraph, MultiSet, Set, String, Vec, eq, f64, i64, rule, ruleset, union

from ir.nodes import Scope
from derivations.encode import Encoding
from derivations.index_rules import DEADLINE, IndexRule, OutOfTime
from derivations.lang import (
    EBody, EScope, ESource, Iterator, Root, fv, inner_fv, made_by, slot_body, slot_scope,
)
from derivations.schedule import egraph_size
from derivations.send import Sender, egg_names
from derivations.term import SCOPE_OPS, Term
from derivations.view import ENode, View, load, node_term

__all__ = ["IndexPass", "declare", "egg_names"]

Guide = Callable[[IndexRule, Scope, list[Scope]], list[Scope]]


@ruleset
def _declare(s: EScope, b: EBody, src: ESource, x: Set[String], y: Set[String],
             m: MultiSet[EBody], v: Vec[String], o: String, f: f64, k: i64):
    # Never fires (a node is not both a sum and a reduce); it makes egglog-python declare
    # every constructor and function, so the commands below can name them.
    yield rule(eq(s).to(EScope.sum(x, y, m)), eq(s).to(EScope.reduce(o, x, y, b)),
               eq(b).to(EBody.acc(src, v, x)), eq(b).to(EBody.use(s)), eq(b).to(EBody.const(f)),
               eq(b).to(EBody.bin(o, b, b)), eq(b).to(EBody.un(o, b)),
               eq(src).to(ESource.tensor(o)), eq(src).to(ESource.scope(s, v)),
               eq(o).to(made_by(x, y, m)), eq(x).to(inner_fv(x, y, m, o)), eq(x).to(fv(b)),
               eq(s).to(slot_scope(k)), eq(b).to(slot_body(k)),
               Root(s), Iterator(o), name="declare").then(union(s).with_(s))


def declare(egraph: EGraph) -> None:
    egraph.run(_declare)


def _summed(node: ENode) -> int:
    """Summation iterators a scope node binds (0 for other nodes)."""
    if node.op == "sum":
        return len(node.args[1])
    return len(node.args[2]) if node.op == "reduce" else 0


def representatives(view: View) -> dict[str, Term]:
    """Per e-class, a smallest term (fewest nodes; of those, fewest summation iterators: a
    copy before a sum over one point). Classes are settled cheapest first (a node is bigger
    than each of its children, so Knuth's generalisation of Dijkstra applies): each node is
    looked at once per child, where a fixpoint over all classes took as many rounds as the
    e-graph is deep."""
    parents: dict[str, list[ENode]] = {}
    waiting: dict[ENode, int] = {}
    heap: list[tuple[tuple[int, int], int, str, ENode]] = []
    for cls, nodes in view.classes.items():
        for node in nodes:
            kids = set(node.kids())
            waiting[node] = len(kids)
            for k in kids:
                parents.setdefault(k, []).append(node)
            if not kids:
                heap.append(((1, _summed(node)), len(heap), cls, node))
    heapq.heapify(heap)
    tick = len(heap)
    size: dict[str, tuple[int, int]] = {}
    choice: dict[str, ENode] = {}
    while heap:
        n, _, cls, node = heapq.heappop(heap)
        if cls in size:
            continue
        size[cls], choice[cls] = n, node
        for parent in parents.get(cls, ()):
            waiting[parent] -= 1
            if waiting[parent] == 0:
                kids = [size[k] for k in parent.kids()]
                key = (1 + sum(n for n, _ in kids), _summed(parent) + sum(s for _, s in kids))
                heapq.heappush(heap, (key, tick, parent.cls, parent))
                tick += 1
    terms: dict[str, Term] = {}
    for cls in sorted(choice, key=size.__getitem__):  # children first: they are smaller
        terms[cls] = node_term(choice[cls], terms.__getitem__)
    return terms


@dataclass
class PassReport:
    unions: int = 0
    firings: Counter = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    complete: bool = True
    too_deep: int = 0           # results not sent: nested past SEND_DEPTH
    read_seconds: float = 0.0   # of ``seconds``: reading the e-graph (view, representatives)


class IndexPass:
    """Index rules applied to every new scope e-node, once each (see the module doc)."""

    def __init__(self, enc: Encoding, rules: tuple[IndexRule, ...], guide: Guide | None = None,
                 sender: Sender | None = None):
        self.enc, self.rules, self.guide = enc, tuple(rules), guide
        self.seen: set[Term] = set()
        self.sent: set[tuple[Term, Term]] = set()
        self.sender = sender  # the one that added the expression knows its scopes' slots
        self.named = 0  # iterators of ``enc.new_names`` egglog has been told of
        self.depths: dict[Term, int] = {}

    def _depth(self, t: Term) -> int:
        """Nesting depth of term ``t``, without recursion (memoised across passes)."""
        stack = [t]
        while stack:
            x = stack[-1]
            if x in self.depths:
                stack.pop()
                continue
            todo = [k for k in x.kids() if k not in self.depths]
            if todo:
                stack.extend(todo)
            else:
                self.depths[x] = 1 + max((self.depths[k] for k in x.kids()), default=0)
                stack.pop()
        return self.depths[t]

    def snapshot(self):
        return set(self.seen), set(self.sent), self.sender and self.sender.snapshot(), self.named

    def restore(self, snap) -> None:
        self.seen, self.sent, self.named = set(snap[0]), set(snap[1]), snap[3]
        if self.sender is not None:
            self.sender.restore(snap[2] or {})

    def run(self, egraph: EGraph, deadline: float | None = None,
            per_node: float = 0.0) -> PassReport:
        """One pass, within ``deadline`` (``time.perf_counter()``), brought forward by
        ``per_node`` seconds for every e-node the pass adds (what extracting it will cost):
        each scope node's results go to egglog as soon as its rules have run (work done is
        kept), and the nodes not reached in time are left for the next pass
        (``PassReport.complete`` is then False). Rules see the deadline too
        (``index_rules.time_left``)."""
        start = time.perf_counter()
        report = PassReport()
        if self.sender is None:
            declare(egraph)
            self.sender = Sender(egg_names(egraph))
        self.sender.new_pass()
        view = load(egraph, "Root")
        reps = representatives(view)
        known = set(reps.values())  # terms the e-graph has (their provenance is recorded)
        report.read_seconds = time.perf_counter() - start
        size, final = egraph_size(egraph)[0] if per_node else 0, deadline
        token = DEADLINE.set(deadline)
        try:
            for cls, nodes in view.classes.items():
                if not report.complete:
                    break
                for node, term in _forms(view, nodes, reps):
                    if term in self.seen:
                        continue
                    if _past(deadline):
                        report.complete = False
                        break
                    self.seen.add(term)
                    chain = view.chain(node) or ()
                    unions = []
                    for results, by in self._apply(term, report, deadline):
                        for out in results:
                            if (term, out) in self.sent or out == term:
                                continue
                            self.sent.add((term, out))
                            if max(self._depth(term), self._depth(out)) > SEND_DEPTH:
                                report.too_deep += 1
                                continue
                            unions.append((out, by.name, " ".join(chain + (by.name,)),
                                           _new_sums(out, known)))
                    if unions:
                        self._send(egraph, term, unions, report)
                        if final is not None and per_node:
                            deadline = final - per_node * (egraph_size(egraph)[0] - size)
                            DEADLINE.set(deadline)  # the rules see it too
        finally:
            DEADLINE.reset(token)
        report.unions = sum(report.firings.values())
        report.seconds = time.perf_counter() - start
        return report

    def _send(self, egraph: EGraph, term: Term, unions, report: PassReport) -> None:
        """Tell egglog the iterators named since the last call, then ``term``'s unions with
        their provenance: one egglog call (egglog's own commands, no Python lets)."""
        sender = self.sender
        for name in self.enc.new_names[self.named:]:
            sender.iterator(name)
        self.named = len(self.enc.new_names)
        for out, by, chain, sums in unions:
            report.firings[by] += 1
            sender.union(term, out)
            for t in sums:
                sender.made_by(t, chain)
        try:
            sender.run(egraph)
        except Exception as e:  # each union is an equality: what ran is still sound
            report.errors.append(f"egglog rejected a union: {type(e).__name__}: {e}")

    def _apply(self, term: Term, report: PassReport, deadline: float | None = None
               ) -> Iterable[tuple[list[Term], IndexRule]]:
        scope = self.enc.decode(term)
        for by in self.rules:
            if _past(deadline):  # the remaining rules wait for the next pass
                self.seen.discard(term)
                report.complete = False
                return
            try:
                outs = [s for s in by.apply(scope) if s is not scope]
                if self.guide is not None and outs:
                    outs = self.guide(by, scope, outs)
                checked = []
                for s in outs:
                    if {(it.name, it.lo, it.hi) for it in s.traversal} != \
                            {(it.name, it.lo, it.hi) for it in scope.traversal}:
                        raise AssertionError(f"changed the traversal {scope.traversal} to "
                                             f"{s.traversal}")
                    checked.append(self.enc.encode_derived(s))
                yield checked, by
            except OutOfTime:  # the rule stopped at the deadline: this scope waits a pass
                self.seen.discard(term)
                report.complete = False
                return
            except Exception as e:  # a broken rule must not break a user's derivation
                report.errors.append(f"{by.name} on {scope.name or '?'}: "
                                     f"{type(e).__name__}: {e}")


def _new_sums(out: Term, known: "set[Term]") -> list[Term]:
    """The sum nodes of ``out`` the e-graph does not have yet: their provenance is the
    rule chain that made ``out`` (``made_by`` keeps the first; known terms have theirs)."""
    found, stack, seen = [], [out], set()
    while stack:
        t = stack.pop()
        if t in seen or t in known:
            continue
        seen.add(t)
        if t.op == "sum":
            found.append(t)
        stack.extend(t.kids())
    return found


ALTERNATIVES = 4  # forms of each direct body term a scope node is also seen with


def _forms(view: View, nodes: list[ENode], reps: dict[str, Term]):
    """``(node, term)`` for each scope node of a class: its term over the representatives,
    then the terms with one direct body term (a factor, a reduction's body) replaced by
    another form of its class. Bodies are e-classes too (a map read at its own iterators is
    its body: ``inline_map``), and a rule that rewrites a body's top (``split_terms`` after
    ``distribute``) must see the form it rewrites, not only the smallest one."""
    for node in nodes:
        if node.op not in SCOPE_OPS or not all(k in reps for k in node.kids()):
            continue
        yield node, node_term(node, reps.__getitem__)
        kids = node.kids()
        for k in dict.fromkeys(kids):
            others = [m for m in view.classes.get(k, ()) if all(c in reps for c in m.kids())]
            for alt in others[:ALTERNATIVES]:
                form = node_term(alt, reps.__getitem__)
                if form == reps[k]:
                    continue
                pick = {k: form}
                yield node, node_term(node, lambda c: pick.get(c) or reps[c])


# Results nested deeper than this are not sent. (Unions written as egglog text cost the square
# of their nesting: a 70-scope chain's took 1.3 GB; sent as commands with slots they cost
# their new nodes, but a result this deep is rarely worth its e-graph room.) Every result of
# the test suite's derivations nests under 20.
SEND_DEPTH = 64


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.perf_counter() > deadline
