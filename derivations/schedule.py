"""Running rulesets under a budget, one iteration at a time.

One iteration = the facts rulesets the chosen rulesets need, run to saturation (they only
add facts, bounded by the e-graph's size), then each explorative ruleset once, then one
pass of the index rules (:mod:`derivations.index_pass`) over the scope e-nodes not seen
yet. The loop stops when an iteration changes nothing (saturated) or when a budget would be
exceeded.

Budgets are checked between iterations, against the current size and time *plus* what the
last iteration added (in time: its egglog step, which cannot be interrupted; the index pass
stops at the deadline itself), so an iteration that is expected to cross a line is not
started. The time budget covers the encoding, the rules *and* the extraction of candidates
that follows (``Derivation.candidates``: reading the e-graph, the beam, the ILP, the
checks). The rules leave the extraction ``1 - RULES_SHARE`` of the budget, or more on a big
e-graph: ``EXTRACT_PER_NODE`` seconds per e-node (the index pass counts the nodes it adds as
it goes).
Nodes: an iteration that might cross the node budget (the first one, any past half the
budget, any that would cross it growing 4x as much as the last) runs after ``push()`` and
is undone with ``pop()`` if it did cross it. (Snapshots are not taken on every iteration:
egglog cannot drop one without restoring it.) Time cannot be undone, so the time budget
holds up to one iteration's egglog step (index rules see the deadline); iterations stay
short because egglog rules invent no iterators
and index rules name the ones they invent after what they stand for (equal results meet),
so one iteration grows the e-graph by a bounded factor.
"""
from __future__ import annotations

import gc
import math
import sys
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from egglog import EGraph, eq, run, seq, var

from derivations.lang import EBody

from derivations.rules import Rules

if TYPE_CHECKING:
    from derivations.index_pass import IndexPass

__all__ = ["Budget", "Report", "run_rulesets", "egraph_size", "extraction_reserve", "InputTooDeep", "admit",
           "expression_depth", "recursion_room", "MAX_DEPTH"]

_NODE_TABLES = ("EScope.", "EBody.", "ESource.")


@dataclass(frozen=True)
class Budget:
    """Limits of one derivation run; each is checked between iterations."""

    nodes: int = 50_000        # e-nodes (constructor rows; facts tables not counted)
    seconds: float = 5.0       # wall time of the derivation and the extraction after it
    iterations: int = 100

    def __post_init__(self):
        if isinstance(self.seconds, bool) or not isinstance(self.seconds, (int, float)) \
                or not math.isfinite(self.seconds) or self.seconds <= 0:
            raise ValueError(f"Budget: seconds must be a finite number > 0, got {self.seconds!r}")
        for name in ("nodes", "iterations"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"Budget: {name} must be an integer >= 1, got {v!r}")


@dataclass
class Report:
    """What a run did: size reached, iterations, time, why it stopped, rule firings."""

    stop: str = "not run"            # "saturated" | "nodes" | "seconds" | "iterations"
    iterations: int = 0
    seconds: float = 0.0
    nodes: int = 0                   # e-nodes
    facts: int = 0                   # rows of facts tables (fv, outer_of, made_by, ...)
    classes: int | None = None       # e-classes (known once the e-graph is serialized)
    firings: dict[str, int] = field(default_factory=dict)   # rule name -> matches applied
    rulesets: tuple[str, ...] = ()   # egglog rulesets, then index rules
    index_seconds: float = 0.0       # of ``seconds``: spent in index-rule passes
    reserved: float = 0.0            # seconds of the budget the rules left the extraction
    too_deep: int = 0                # unions not sent: results nested past ``SEND_DEPTH``
    errors: list[str] = field(default_factory=list)   # index rules that raised (skipped)

    def __str__(self) -> str:
        fired = ", ".join(f"{k}={v}" for k, v in sorted(self.firings.items()) if v)
        classes = "" if self.classes is None else f", {self.classes} classes"
        index = f" ({self.index_seconds:.3f}s in index rules)" if self.index_seconds else ""
        return (f"{self.stop} after {self.iterations} iterations in {self.seconds:.3f}s{index}: "
                f"{self.nodes} e-nodes{classes}, {self.facts} facts; fired: {fired or 'nothing'}")


# The rules' share of the time budget at most: the extraction takes the rest (at 2 s, 0.3 s),
# or EXTRACT_PER_NODE seconds per e-node if that is more (measured on a loaded 2-core box with
# the analytic cost: 0.2-0.55 ms per e-node for 300-2,400 nodes, the ILP and checks included).
RULES_SHARE = 0.85
EXTRACT_PER_NODE = 4e-4


def extraction_reserve(budget: Budget, nodes: int) -> float:
    """Seconds of ``budget`` the rules leave for extracting from an e-graph of ``nodes``."""
    return max(budget.seconds * (1 - RULES_SHARE), EXTRACT_PER_NODE * nodes)


# -- inputs the derivation accepts ---------------------------------------------------------
MAX_DEPTH = 256  # nested scopes and operations of an input; deeper ones are refused
_FRAMES_PER_LEVEL = 12  # Python frames one level of nesting may take (encode, egglog-python)


class InputTooDeep(ValueError):
    """An expression nested too deeply to derive within the budgets: one clear message."""


def expression_depth(expr) -> int:
    """The longest chain of nested scopes and body operations under ``expr`` (an ``ir``
    node), counted without recursion: the input may be deeper than Python's stack."""
    from ir.nodes import Access, Binary, Scope, Unary

    def kids(e):
        if isinstance(e, Scope):
            return (e.body,)
        if isinstance(e, Access):
            return (e.source,) if isinstance(e.source, Scope) else ()
        if isinstance(e, Binary):
            return (e.lhs, e.rhs)
        if isinstance(e, Unary):
            return (e.x,)
        return ()

    depth: dict[int, int] = {}
    stack = [(expr, False)]
    while stack:
        e, done = stack.pop()
        if id(e) in depth:
            continue
        if done:
            depth[id(e)] = 1 + max((depth[id(k)] for k in kids(e)), default=0)
            continue
        stack.append((e, True))
        stack.extend((k, False) for k in kids(e) if id(k) not in depth)
    return depth[id(expr)]


def admit(expr, limit: int = MAX_DEPTH) -> int:
    """The depth of ``expr``, or ``InputTooDeep`` if it is past ``limit``."""
    depth = expression_depth(expr)
    if depth > limit:
        name = getattr(expr, "name", None)
        raise InputTooDeep(
            f"{'expression ' + repr(name) if name else 'the expression'} is {depth} levels "
            f"deep (nested scopes, reads and operations); Ollie derives expressions up to "
            f"{limit} levels deep: derive smaller parts")
    return depth


@contextmanager
def recursion_room(depth: int):
    """Python's recursion limit raised, while inside, so that code walking an expression
    ``depth`` deep recursively (encoding, egglog-python, decoding) has room; restored after."""
    old = sys.getrecursionlimit()
    frame, used = sys._getframe(), 0
    while frame is not None:
        frame, used = frame.f_back, used + 1
    need = used + _FRAMES_PER_LEVEL * depth + 500
    if need > old:
        sys.setrecursionlimit(need)
    try:
        yield
    finally:
        if need > old and sys.getrecursionlimit() == need:
            sys.setrecursionlimit(old)


@contextmanager
def collector_paused():
    """Python's cyclic garbage collector paused, while inside (reference counting still
    frees): in a process holding a compiler's heap (Dynamo, AOTAutograd and Inductor leave
    half a million objects), every full collection that a derivation's allocations set off
    scans all of it, a fifth of a 2 s budget. Restored after; cycles made inside are
    collected then."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


def egraph_size(egraph: EGraph) -> tuple[int, int]:
    """(e-nodes, facts rows) of ``egraph``."""
    nodes = facts = 0
    for fn, size in egraph.all_function_sizes():
        if str(fn).startswith(_NODE_TABLES):
            nodes += size
        else:
            facts += size
    return nodes, facts


def _facts_of(rulesets: tuple[Rules, ...]) -> list[Rules]:
    """The facts rulesets ``rulesets`` need, dependencies first, each once."""
    out: list[Rules] = []

    def add(r: Rules):
        for d in r.needs:
            add(d)
        if r.analysis and r not in out:
            out.append(r)

    for r in rulesets:
        add(r)
    return out


def _step(rulesets: list[Rules]):
    """One iteration's egglog schedule: the facts they need to saturation, then each once."""
    facts = _facts_of(tuple(rulesets))
    parts = [run(r.ruleset).saturate() for r in facts] + \
        [run(r.ruleset) for r in rulesets if not r.analysis]
    return seq(*parts) if parts else None


def _has_ops(egraph: EGraph, ops: tuple[str, ...]) -> bool:
    """Is some body term ``un(op, _)``, ``op`` in ``ops``, in the e-graph? (A ruleset whose
    every left side reads such a term waits until one is: its rules cost nothing before.)"""
    try:
        if not egraph.function_size(EBody.un):
            return False
    except Exception:  # no unary term was ever declared in this e-graph
        return False
    x, y = var("x", EBody), var("y", EBody)
    return any(egraph.check_bool(eq(y).to(EBody.un(op, x))) for op in ops)


def run_rulesets(egraph: EGraph, rulesets: tuple[Rules, ...], budget: Budget,
                 index: "IndexPass | None" = None,
                 on_iteration: "Callable[[Report, float], None] | None" = None,
                 started: float | None = None) -> Report:
    """Run ``rulesets`` (and the index rules of ``index``, after each egglog step) on
    ``egraph`` until saturated or a budget stops it; ``on_iteration(report, seconds)`` is
    called after each iteration (for a progress line). ``started``: when the budget's clock
    started (``time.perf_counter()``; default now), if the caller spent some of it."""
    active = [r for r in rulesets if not r.ops]
    waiting = [r for r in rulesets if r.ops]  # they join once the e-graph has their ops
    step = _step(active)
    report = Report(rulesets=tuple(r.name for r in rulesets)
                    + tuple(r.name for r in (index.rules if index else ())))
    report.nodes, report.facts = egraph_size(egraph)
    start = time.perf_counter() if started is None else started
    last_step_seconds, last_growth = 0.0, 0
    report.reserved = extraction_reserve(budget, report.nodes)
    rule_seconds = lambda: budget.seconds - report.reserved  # noqa: E731
    while True:
        joined = [r for r in waiting if _has_ops(egraph, r.ops)]  # e-graphs only grow
        if joined:
            waiting = [r for r in waiting if r not in joined]
            active += joined
            step = _step(active)
        elapsed = time.perf_counter() - start
        if step is None and index is None:
            report.stop = "saturated"
        elif report.nodes + last_growth > budget.nodes or report.nodes >= budget.nodes:
            report.stop = "nodes"
        elif elapsed + last_step_seconds > rule_seconds():
            report.stop = "seconds"
        elif report.iterations >= budget.iterations:
            report.stop = "iterations"
        if report.stop != "not run":
            break
        risky = (report.iterations == 0 or 2 * report.nodes > budget.nodes
                 or report.nodes + 4 * last_growth > budget.nodes)  # might cross the budget
        if risky:
            egraph.push()
            snap = index.snapshot() if index else None
        t0 = time.perf_counter()
        updated, firings = False, Counter()
        if step is not None:
            result = egraph.run(step)
            updated = result.updated
            for decl, n in result.num_matches_per_rule.items():
                firings[getattr(decl, "name", None) or "unnamed"] += n
        last_step_seconds = time.perf_counter() - t0
        if index is not None and time.perf_counter() - start > rule_seconds():
            updated = True  # no time left for the index rules: stop, not saturated
        elif index is not None:
            report.reserved = extraction_reserve(budget, egraph_size(egraph)[0])
            passed = index.run(egraph, deadline=start + rule_seconds(),
                               per_node=EXTRACT_PER_NODE)
            updated = updated or passed.unions > 0 or not passed.complete
            firings.update(passed.firings)
            report.index_seconds += passed.seconds
            report.too_deep += passed.too_deep
            report.errors.extend(passed.errors)
        nodes, facts = egraph_size(egraph)
        report.reserved = extraction_reserve(budget, nodes)
        if risky and nodes > budget.nodes:
            egraph.pop()  # undo the iteration that crossed the budget
            if index is not None:
                index.restore(snap)
            report.stop = "nodes"
            break
        report.iterations += 1
        for name, n in firings.items():
            report.firings[name] = report.firings.get(name, 0) + n
        last_growth, report.nodes, report.facts = nodes - report.nodes, nodes, facts
        if on_iteration is not None:
            on_iteration(report, time.perf_counter() - start)
        if not updated:
            report.stop = "saturated"
        elif time.perf_counter() - start > rule_seconds():
            report.stop = "seconds"
    report.seconds = time.perf_counter() - start
    return report
