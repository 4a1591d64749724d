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

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable

from egglog import EGraph, MultiSet, Set, String, Vec, eq, f64, rule, ruleset, union

from ir.nodes import Scope
from derivations.encode import Encoding
from derivations.index_rules import IndexRule
from derivations.lang import OPS, EBody, EScope, ESource, Iterator, Root, fv, inner_fv, made_by
from derivations.term import SCOPE_OPS, Term
from derivations.view import View, load, node_term

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


def representatives(view: View) -> dict[str, Term]:
    """Per e-class, a smallest term (fewest nodes), found by a fixpoint from the leaves."""
    size: dict[str, int] = {}
    choice: dict[str, object] = {}
    changed = True
    while changed:
        changed = False
        for cls, nodes in view.classes.items():
            for node in nodes:
                kids = node.kids()
                if all(k in size for k in kids):
                    n = 1 + sum(size[k] for k in kids)
                    if n < size.get(cls, 1 << 60):
                        size[cls], choice[cls], changed = n, node, True
    terms: dict[str, Term] = {}

    def build(cls: str) -> Term:
        if cls not in terms:
            terms[cls] = node_term(choice[cls], build)
        return terms[cls]

    for cls in choice:
        build(cls)
    return terms


@dataclass
class PassReport:
    unions: int = 0
    firings: Counter = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    complete: bool = True


class IndexPass:
    """Index rules applied to every new scope e-node, once each (see the module doc)."""

    def __init__(self, enc: Encoding, rules: tuple[IndexRule, ...], guide: Guide | None = None):
        self.enc, self.rules, self.guide = enc, tuple(rules), guide
        self.seen: set[Term] = set()
        self.sent: set[tuple[Term, Term]] = set()
        self.names: dict[str, str] | None = None

    def snapshot(self):
        return set(self.seen), set(self.sent)

    def restore(self, snap) -> None:
        self.seen, self.sent = set(snap[0]), set(snap[1])

    def run(self, egraph: EGraph, deadline: float | None = None) -> PassReport:
        """One pass; scope nodes left when ``deadline`` (``time.perf_counter()``) passes are
        left for the next pass (``PassReport.complete`` is then False)."""
        start = time.perf_counter()
        report = PassReport()
        if self.names is None:
            declare(egraph)
            self.names = egg_names(egraph)
        view = load(egraph, "Root")
        reps = representatives(view)
        commands: list[str] = []
        memo: dict = {}
        named = len(self.enc.new_names)
        for cls, nodes in view.classes.items():
            for node in nodes:
                if node.op not in SCOPE_OPS or not all(k in reps for k in node.kids()):
                    continue
                term = node_term(node, reps.__getitem__)
                if term in self.seen:
                    continue
                if deadline is not None and time.perf_counter() > deadline:
                    report.complete = False
                    break
                self.seen.add(term)
                chain = view.chain(node) or ()
                for results, by in self._apply(term, report):
                    for out in results:
                        if (term, out) in self.sent or out == term:
                            continue
                        self.sent.add((term, out))
                        report.firings[by.name] += 1
                        commands.append(self._union(term, out, chain + (by.name,), memo))
        for name in self.enc.new_names[named:]:
            commands.append(f"({self.names['Iterator']} {_str(name)})")
        if commands:
            raw = egraph._state.egraph  # the egglog bindings: text in, no Python lets
            try:  # one command per parse: the parser is quadratic in the length of its input
                raw.run_program(*(c for text in commands for line in text.split("\n")
                                  for c in raw.parse_program(line)))
            except Exception as e:  # each union is an equality: what ran is still sound
                report.errors.append(f"egglog rejected a union: {type(e).__name__}: {e}")
        report.unions = sum(report.firings.values())
        report.seconds = time.perf_counter() - start
        return report

    def _apply(self, term: Term, report: PassReport) -> Iterable[tuple[list[Term], IndexRule]]:
        scope = self.enc.decode(term)
        for by in self.rules:
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
            except Exception as e:  # a broken rule must not break a user's derivation
                report.errors.append(f"{by.name} on {scope.name or '?'}: "
                                     f"{type(e).__name__}: {e}")

    def _union(self, term: Term, out: Term, chain: tuple[str, ...], memo: dict) -> str:
        lines = [f"(union {sexp(term, self.names, memo)} {sexp(out, self.names, memo)})"]
        text = _str(" ".join(chain))
        stack, seen = [out], set()
        while stack:  # provenance of every sum node of the result (made_by keeps the first)
            t = stack.pop()
            if t in seen:
                continue
            seen.add(t)
            if t.op == "sum":
                key = f"{_set(t.args[0])} {_set(t.args[1])} {_mset(t.args[2], self.names, memo)}"
                lines.append(f"(set ({self.names['made_by']} {key}) {text})")
            stack.extend(t.kids())
        return "\n".join(lines)
