"""One region's journey: its allowance, a decision from the disk cache or a derivation on
the e-graph, then the choose stage (``ollie.choose``: lower, verify, measure, decide).

A region (``ollie.capture.regions.Region``) is a composed expression over an ATen graph's
nodes; ``reference`` holds the value of every node it reads and of its root, computed by
running the original graph on sample inputs. The region is adopted (its program replaces the
nodes) only when the lowered program matches the original under the numerics contract and
runs faster than the nodes it replaces. Otherwise they stay and the report says why.
"""
from __future__ import annotations

import math
import time
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import torch
import torch.fx as fx

import codegen
import ir
import derivations
from derivations.normalize import inline_views
from ollie import cache, choose, progress
from ollie import decision as decisions
from ollie.decision import Decision, Outcome
from ollie.cache_lock import decision_lock
from ollie import cost as cost_model
from ollie.log import first_line
from ollie.numerics import (LOW_PRECISION, allowed_error, max_relative_error,
                            resampled_errors, widen)


@dataclass
class RegionReport:
    root_name: str
    ops: list[str]                       # the torch operations folded into this region
    original: ir.Scope
    chosen: ir.Scope | None = None
    rule_chain: tuple[str, ...] = ()
    cost_before: float = 0.0
    cost_after: float = 0.0
    derivation: Any = None               # derivations' report (e-graph size, time, stop reason)
    derive_s: float = 0.0
    measure_s: float = 0.0               # seconds timing its candidates and the original
    error: float | None = None           # max relative error against eager
    # the derived program against the original (baseline): the outcome and its figures
    decision: Decision = field(default_factory=lambda: Decision(Outcome.KEPT, reason="not "
                                                                "decided"))
    kernel: Callable | None = None       # set when the region is adopted
    input_names: tuple[str, ...] = ()
    kernel_source: str = ""
    candidates: list = field(default_factory=list)
    measured: list = field(default_factory=list)  # (rule chain, cost, ranker's s, ok, s, why)
    cached: bool = False                              # decision taken from the disk cache
    model_pick_ratio: float | None = None             # time of the ranker's top pick / best
    unmeasured: int = 0                               # candidates the ranker left unmeasured
    backend: str = "torch"                            # codegen backend of the chosen kernel
    remeasured: int = 0                               # times a noisy decision was re-measured
    size_range: str = ""                              # sizes the choice is guarded to
    original_lowered: bool = False    # the original timed as lowered alike, not its ATen calls
    size_branch: bool = False                         # ... by a branch, not a guard
    allowed_error: float = 1e-4                       # how far a program may be from eager

    def cache_entry(self) -> dict:
        """What the disk cache keeps: enough to redo the decision without deriving, and to
        measure it again (``ollie tune``) when its margin was within noise."""
        return {"program": ir.to_text(self.chosen, declarations=True) if self.chosen else None,
                "original": ir.to_text(self.original, declarations=True),
                "rule_chain": list(self.rule_chain), "cost_before": self.cost_before,
                "cost_after": self.cost_after, "error": self.error, "backend": self.backend,
                **self.decision.entry(), "remeasured": self.remeasured,
                "model_pick_ratio": self.model_pick_ratio,
                "original_lowered": self.original_lowered}

    def summary(self) -> str:
        eager_s, ollie_s = self.decision.baseline_s, self.decision.challenger_s
        speed = (f", original {eager_s * 1e3:.3f} ms vs derived {ollie_s * 1e3:.3f} ms"
                 if eager_s and ollie_s else "")
        held = f"; holds for {self.size_range}" if self.size_range else ""
        return (f"ollie: region {self.root_name} ({' → '.join(self.ops)}): "
                f"{self.decision.text}"
                f"; est. {_us(self.cost_before)} → {_us(self.cost_after)}{speed}{held}")

    def describe(self, adopted: bool | None = None) -> str:
        """The region in a few lines; ``adopted``: whether its program is what runs (the
        region's own decision unless the whole graph's comparison overruled it)."""
        adopted = self.kernel is not None if adopted is None else adopted
        lines = [f"region {self.root_name}: {' → '.join(self.ops)}",
                 "  captured expression:", _indent(ir.to_text(ir.readable(self.original)), 4)]
        if self.cached:
            lines.append("  derivation: none, the decision is stored in the disk cache"
                         " (figures below are the stored ones)")
        if self.derivation is not None:
            lines.append(f"  derivation: {self.derivation}")
        if self.measure_s:
            lines.append(f"  measuring: {len(self.measured)} candidate(s) and the original, "
                         f"{self.measure_s:.2f} s")
        for chain, cost, ranked, ok, seconds, note in self.measured:
            ranker_says = f", ranker {_us(ranked)}" if math.isfinite(ranked) else ""
            lines.append(f"  candidate {' → '.join(chain) or '(original)'}, est. {_us(cost)}"
                         f"{ranker_says}: " + (f"measured {seconds * 1e3:.3f} ms ({note})" if ok
                                               else f"rejected, {note}"))
        if self.chosen is not None and self.chosen is not self.original:
            label = "chosen program" if adopted else "best derived program (not used)"
            lines.append("  rule chain: " + (" → ".join(self.rule_chain) or "(none)"))
            lines.append(f"  {label}:")
            lines.append(_indent(ir.to_text(ir.readable(self.chosen)), 4))
        lines.append(f"  estimated time (cost model): {_us(self.cost_before)} → "
                     f"{_us(self.cost_after)}")
        if self.error is not None:
            lines.append(f"  check against the original: max relative error {self.error:.2e}")
        if self.model_pick_ratio is not None and len(self.measured) > 1:
            lines.append(f"  the ranker's first choice ran at {self.model_pick_ratio:.2f}× "
                         "the best measured candidate")
        if self.unmeasured:
            lines.append(f"  {self.unmeasured} candidate(s) not measured: the ranker "
                         "estimates them slower, or they make the same calls as another")
        eager_s, ollie_s = self.decision.baseline_s, self.decision.challenger_s
        if eager_s is not None and ollie_s is not None:
            lowered = " (lowered alike)" if self.original_lowered else ""
            lines.append(f"  measured (medians of interleaved runs, uncompiled): original"
                         f"{lowered} {eager_s * 1e3:.3f} ms, derived {ollie_s * 1e3:.3f} ms "
                         f"({eager_s / ollie_s:.2f}×, {self.backend} backend)")
        lines.append(f"  decision: {self.decision.text}")
        if self.size_range and self.size_branch:
            lines.append(f"  runs where {self.size_range}: the original graph runs at other "
                         "sizes, where it does fewer multiply-adds (a branch on the size)")
        elif self.size_range:
            lines.append(f"  guarded to {self.size_range}: the other form does fewer "
                         "multiply-adds beyond (Dynamo compiles again there)")
        return "\n".join(lines)


def _us(seconds: float) -> str:
    """A cost-model estimate (seconds) in microseconds."""
    return f"{seconds * 1e6:.4g} µs"


QUICK_CHECK = 1 << 22   # iteration points the interpreter checks in well under a second


def compile_region(region, reference: dict, options, show=None) -> RegionReport:
    report = RegionReport(region.root.name, [_op_name(m) for m in region.members], region.expr)
    tensors = {name: reference[node] for name, node in region.inputs.items()}
    expected = reference[region.root]
    store = cache.Cache(options.cache_dir) if options.cache else None
    key = cache.region_key(region.expr, tensors) if store else None
    # processes sharing the folder (the ranks of a job) derive each decision once
    with decision_lock(store, key) if store else nullcontext():
        entry = store.get(key) if store else None
        if not entry or entry.get("decision") == Outcome.ADOPTED.value:  # checked below
            report.allowed_error = allowance(region, reference)
        if _from_cache(report, entry, tensors, expected, options):  # within noise: `ollie tune`
            return report
        with progress.progress(options.progress) if show is None else nullcontext(show) as show:
            _derive_and_choose(report, region, reference, tensors, expected, options, show)
        if store and report.decision.outcome in decisions.STORED:  # failures: derived again
            store.put(key, report.cache_entry())
    return report


def _from_cache(report, entry, tensors, expected, options) -> bool:
    """Reuse a stored decision: no derivation, no measurement; an adopted program is still
    checked once on these inputs (a stale or damaged entry is ignored, never trusted)."""
    decision = decisions.stored(entry)
    if decision is None:
        return False
    report.cached, report.decision = True, decision
    report.rule_chain = tuple(entry.get("rule_chain", ()))
    report.cost_before, report.cost_after = entry.get("cost_before", 0), entry.get("cost_after", 0)
    report.original_lowered = bool(entry.get("original_lowered"))
    if not decision.adopted:
        try:  # the best derived program, not used: what a size range is judged against
            report.chosen = ir.parse(entry["program"]) if entry.get("program") else None
        except Exception:
            report.chosen = None
        return True
    try:
        report.chosen = ir.parse(entry["program"])
        report.backend = entry.get("backend") or choose.cached_backend(options)
        kernel = codegen.lower(report.chosen, backend=report.backend, fused=options.inductor)
        with torch.no_grad():
            out = kernel(*[tensors[n] for n in kernel.input_names])
        report.error = max_relative_error(out, expected)
    except Exception:
        return False
    if out.dtype != expected.dtype or not report.error <= report.allowed_error:
        return False
    choose.adopt(report, kernel)
    return True


def _derive_and_choose(report, region, reference, tensors, expected, options, show) -> None:
    cost = cost_model.default(options.cache_dir)
    report.cost_before = ir.analysis.program_cost(region.expr, cost)
    try:
        t0 = time.perf_counter()
        start = inline_views(region.expr)  # ATen's data movement folded into the reads
        budget = derivations.Budget(nodes=options.max_nodes, seconds=options.budget_s)
        derivation = derivations.derive(start, budget,
                                        on_iteration=show.derivation(report.root_name))
        # every candidate is run against the original on sample data below: the reference
        # interpreter checks only those small enough to be quick
        candidates = derivation.candidates(options.candidates, cost, verify_limit=QUICK_CHECK)
        second_opinion = _analytic_pick(region.expr, derivation, candidates, cost)
        if start != region.expr:
            candidates, second_opinion = ([replace(c, rule_chain=("inline_views",) + c.rule_chain)
                                           for c in cs] for cs in (candidates, second_opinion))
        report.derive_s = time.perf_counter() - t0
        report.derivation = derivation.report
    except Exception as e:  # a derivation bug must not break the user's function
        report.decision = Decision(Outcome.KEPT, reason=f"derivation failed: {first_line(e)}")
        return
    report.candidates = candidates + second_opinion
    choose.choose(report, region, as_program(region, reference), start, candidates,
                  second_opinion, tensors, expected, options, show)


def _analytic_pick(original: ir.Scope, derivation, candidates: list, cost) -> list:
    """The program the analytic (flops and bytes) cost likes best, when the learned model
    left it out of its top k: a second opinion for programs unlike the model's training
    data (a banded product joined from chunks, say). It is priced by the learned model and
    ordered by the candidate ranker like the others, and only measurement decides."""
    analytic = ir.analysis.analytic_cost
    best = derivation.candidates(1, analytic, verify_limit=QUICK_CHECK)[0]
    if not best.rule_chain or \
            best.cost >= ir.analysis.program_cost(original, analytic) * 0.95 or \
            any(ir.fingerprint(c.program) == ir.fingerprint(best.program) for c in candidates):
        return []
    return [replace(best, cost=ir.analysis.program_cost(best.program, cost))]


def _op_name(node) -> str:
    packet = getattr(node.target, "overloadpacket", None)
    return str(packet) if packet is not None else getattr(node.target, "__name__", str(node.target))


def allowance(region, values: dict) -> float:
    """How far a derived program may be from the region's original value in ``values``
    (``numerics.allowed_error``, the original's rounding error sampled three times)."""
    exact = exact_value(region, values)
    resampled = () if exact is None else resampled_errors(
        lambda convert: as_program(region, values, convert)())
    return allowed_error(values[region.root], exact, resampled)


def exact_value(region, values: dict) -> torch.Tensor | None:
    """The region's root computed in float64 from the same inputs as ``values`` (the
    original's value in its own dtype), or None where it is not a float computation or does
    not run in float64."""
    root = values.get(region.root)
    if not isinstance(root, torch.Tensor) or root.dtype not in LOW_PRECISION:
        return None
    try:
        with torch.no_grad():
            return as_program(region, values, widen)()
    except Exception:  # a value not at hand, an op with a fixed dtype or none in float64
        return None


def as_program(region, values: dict, convert=lambda value: value) -> Callable[[], Any]:
    """The region's ATen calls as one generated function (``fx.GraphModule``), called on
    ``values`` (``convert``ed) of what it reads: run as the graph's own code runs them,
    without an interpreter's cost per node (2-3 µs: a timing would count it, as much as a
    squeeze-excite block's gain). Where ``convert`` widens what it reads to float64, the
    tensors the region makes in a lower float dtype (``full``, ``arange``: an RNN's zero
    state) are made in float64 too: the same computation, in float64."""
    members, graph, env, reads = set(region.members), fx.Graph(), {}, []
    wide = False
    for m in region.members:
        for a in m.all_input_nodes:  # the region's inputs and the sizes it reads
            if a not in members and a not in env:
                env[a] = graph.placeholder(f"in{len(reads)}")
                reads.append(convert(values[a]))
                wide |= _widened(values[a], reads[-1])
    for m in region.members:
        env[m] = graph.node_copy(m, env.__getitem__)
        if wide and m.kwargs.get("dtype") in LOW_PRECISION:
            env[m].kwargs = {**m.kwargs, "dtype": torch.float64}
    graph.output(env[region.root])
    module = fx.GraphModule({}, graph)
    return lambda: module(*reads)


def _widened(value, converted) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype in LOW_PRECISION and \
        isinstance(converted, torch.Tensor) and converted.dtype == torch.float64


def run_node(node, env: dict):
    """Evaluate one ``call_function`` node, its inputs taken from ``env``."""
    args = fx.node.map_arg(node.args, env.__getitem__)
    kwargs = fx.node.map_arg(node.kwargs, env.__getitem__)
    return node.target(*args, **kwargs)


def _indent(text: str, n: int) -> str:
    return "\n".join(" " * n + line for line in text.splitlines())
