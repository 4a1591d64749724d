"""Applying index rules to the e-graph between egglog iterations.

One pass: read the e-graph (``view.load``), pick for every e-class its smallest term (its
*representative*), and for every scope e-node not seen before build its term over the
representatives of its children, decode it to an ``ir`` scope, call each rule's ``apply``,
encode each result with the rule's names kept (:meth:`Encoding.encode_derived`) and union it
with the node. All unions of a pass go to egglog as **one program of egglog text**, written
here with containers inline (``(set-of "h" "w")``, ``(multiset-of ...)``): egglog-python is not
involved, so none of its global ``let``s for shared containers is made, and the 13.2 bug of
a stale let naming another container after a later command cannot arise (see
``extract.derive``). The same program records provenance (``made_by``: the node's rule chain
plus the rule's name, for every new ``sum`` node of the result) and the new iterators.

Why not alternatives: rebuilding the e-graph from Python after each pass would redo every
egglog iteration and hit the let bug as soon as a term is registered after the first
command; encoding results as egglog rules (a rule whose action builds the term) goes
through the same Python let machinery. The text program costs about the parse of its
size: a few ms per pass for the must-show cases (measured in the report's ``pass_seconds``).
"""
from __future__ import annotations

import heapq
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable

from egglog import EGraph, MultiSet, Set, String, Vec, eq, f64, rule, ruleset, union

from ir.nodes import Scope
from derivations.encode import Encoding
from derivations.index_rules import DEADLINE, IndexRule, OutOfTime
from derivations.lang import OPS, EBody, EScope, ESource, Iterator, Root, fv, inner_fv, made_by
from derivations.term import SCOPE_OPS, Term
from derivations.view import ENode, View, load, node_term

__all__ = ["IndexPass", "declare", "egg_names", "sexp"]

Guide = Callable[[IndexRule, Scope, list[Scope]], list[Scope]]


@ruleset
def _declare(s: EScope, b: EBody, src: ESource, x: Set[String], y: Set[String],
             m: MultiSet[EBody], v: Vec[String], o: String, f: f64):
    # Never fires (a node is not both a sum and a reduce); it makes egglog-python declare
    # every constructor and function, so the text programs below can name them.
    yield rule(eq(s).to(EScope.sum(x, y, m)), eq(s).to(EScope.reduce(o, x, y, b)),
               eq(b).to(EBody.acc(src, v, x)), eq(b).to(EBody.use(s)), eq(b).to(EBody.const(f)),
               eq(b).to(EBody.bin(o, b, b)), eq(b).to(EBody.un(o, b)),
               eq(src).to(ESource.tensor(o)), eq(src).to(ESource.scope(s, v)),
               eq(o).to(made_by(x, y, m)), eq(x).to(inner_fv(x, y, m, o)), eq(x).to(fv(b)),
               Root(s), Iterator(o), name="declare").then(union(s).with_(s))


def declare(egraph: EGraph) -> None:
    egraph.run(_declare)


def egg_names(egraph: EGraph) -> dict[str, str]:
    """Short op name (as in ``Term``) -> egglog function name, plus ``made_by``/``Iterator``."""
    from egglog.pretty import pretty_callable_ref  # egglog-python 13.2 internals
    state = egraph._state
    pretty = {pretty_callable_ref(state.__egg_decls__, ref): egg
              for egg, refs in state.egg_fn_to_callable_refs.items() for ref in refs}
    short = {**{k: v for k, v in OPS.items() if k not in ("root",)}, "Iterator": "Iterator"}
    missing = [p for p in short.values() if p not in pretty]
    assert not missing, f"not declared in the e-graph: {missing} (call declare() first)"
    return {k: pretty[p] for k, p in short.items()}


def _str(x: str) -> str:
    return json.dumps(x)  # egglog string literals escape like JSON's for these characters


def sexp(t: Term, names: dict[str, str], memo: dict) -> str:
    """Egglog text of term ``t`` with containers written inline."""
    hit = memo.get(t)
    if hit is not None:
        return hit
    op, a = t.op, t.args
    if op == "sum":
        args = [_set(a[0]), _set(a[1]), _mset(a[2], names, memo)]
    elif op == "reduce":
        args = [_str(a[0]), _set(a[1]), _set(a[2]), sexp(a[3], names, memo)]
    elif op == "tensor":
        args = [_str(a[0])]
    elif op == "scope":
        args = [sexp(a[0], names, memo), _vec(a[1])]
    elif op == "acc":
        args = [sexp(a[0], names, memo), _vec(a[1]), _set(a[2])]
    elif op == "use":
        args = [sexp(a[0], names, memo)]
    elif op == "const":
        args = [repr(float(a[0]))]
    elif op == "bin":
        args = [_str(a[0]), sexp(a[1], names, memo), sexp(a[2], names, memo)]
    elif op == "un":
        args = [_str(a[0]), sexp(a[1], names, memo)]
    else:
        raise AssertionError(f"unknown term op {op!r}")
    out = memo[t] = f"({names[op]} {' '.join(args)})"
    return out


def _set(xs) -> str:
    return f"(set-of {' '.join(_str(x) for x in sorted(xs))})" if xs else "(set-empty)"


def _vec(xs) -> str:
    return f"(vec-of {' '.join(_str(x) for x in xs)})" if xs else "(vec-empty)"


def _mset(items, names, memo) -> str:
    return f"(multiset-of {' '.join(sexp(x, names, memo) for x in items)})"


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


class IndexPass:
    """Index rules applied to every new scope e-node, once each (see the module doc)."""

    def __init__(self, enc: Encoding, rules: tuple[IndexRule, ...], guide: Guide | None = None):
        self.enc, self.rules, self.guide = enc, tuple(rules), guide
        self.seen: set[Term] = set()
        self.sent: set[tuple[Term, Term]] = set()
        self.names: dict[str, str] | None = None
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
        return set(self.seen), set(self.sent)

    def restore(self, snap) -> None:
        self.seen, self.sent = set(snap[0]), set(snap[1])

    def run(self, egraph: EGraph, deadline: float | None = None) -> PassReport:
        """One pass, within ``deadline`` (``time.perf_counter()``): scope nodes not reached
        in time, and the unions of nodes whose rules ran but could not be sent to egglog in
        time (they go in batches, the deadline checked between them), are left for the next
        pass (``PassReport.complete`` is then False). Rules see the deadline too
        (``index_rules.time_left``)."""
        start = time.perf_counter()
        report = PassReport()
        if self.names is None:
            declare(egraph)
            self.names = egg_names(egraph)
        view = load(egraph, "Root")
        reps = representatives(view)
        known = set(reps.values())  # terms the e-graph has (their provenance is recorded)
        pending: list[tuple[Term, list[tuple[Term, str, str]]]] = []
        memo: dict = {}
        named = len(self.enc.new_names)
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
                            unions.append((out, by.name, self._union(
                                term, out, chain + (by.name,), memo, known)))
                    if unions:
                        pending.append((term, unions))
        finally:
            DEADLINE.reset(token)
        iterators = [f"({self.names['Iterator']} {_str(name)})"
                     for name in self.enc.new_names[named:]]
        self._send(egraph, iterators, pending, deadline, report)
        report.unions = sum(report.firings.values())
        report.seconds = time.perf_counter() - start
        return report

    def _send(self, egraph: EGraph, iterators: list[str], pending, deadline, report) -> None:
        """Tell egglog the new iterators, then the unions node by node, in batches, while
        time remains; what is not sent is forgotten here, so the next pass redoes it."""
        raw = egraph._state.egraph  # the egglog bindings: text in, no Python lets

        def run(texts: list[str]) -> None:
            try:  # one command per parse: the parser is quadratic in the length of its input
                raw.run_program(*(c for text in texts for line in text.split("\n")
                                  for c in raw.parse_program(line)))
            except Exception as e:  # each union is an equality: what ran is still sound
                report.errors.append(f"egglog rejected a union: {type(e).__name__}: {e}")

        if iterators:
            run(iterators)
        batch: list[str] = []
        for i, (term, unions) in enumerate(pending):
            if batch and (len(batch) >= SEND_BATCH or _past(deadline)):
                run(batch)
                batch = []
            if _past(deadline):
                for later, outs in pending[i:]:  # not sent: undone, the next pass retries
                    self.seen.discard(later)
                    self.sent.difference_update((later, out) for out, _, _ in outs)
                report.complete = False
                break
            for out, by, text in unions:
                report.firings[by] += 1
                batch.append(text)
        if batch:
            run(batch)

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

    def _union(self, term: Term, out: Term, chain: tuple[str, ...], memo: dict,
               known: "set[Term] | frozenset" = frozenset()) -> str:
        lines = [f"(union {sexp(term, self.names, memo)} {sexp(out, self.names, memo)})"]
        text = _str(" ".join(chain))
        stack, seen = [out], set()
        while stack:  # provenance of every new sum node of the result (made_by keeps the
            t = stack.pop()  # first; the e-graph's own terms have theirs already)
            if t in seen or t in known:
                continue
            seen.add(t)
            if t.op == "sum":
                key = f"{_set(t.args[0])} {_set(t.args[1])} {_mset(t.args[2], self.names, memo)}"
                lines.append(f"(set ({self.names['made_by']} {key}) {text})")
            stack.extend(t.kids())
        return "\n".join(lines)


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


SEND_BATCH = 64  # union commands per egglog call; the deadline is checked between calls
# A union is egglog text spelling out both terms in full; egglog's time and memory for one
# grow with the square of its nesting (a 70-scope chain's unions took 1.3 GB). Every result
# of the test suite's derivations nests under 20; results deeper than this are not sent.
SEND_DEPTH = 64


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.perf_counter() > deadline
