"""One region's journey: derive on the e-graph, pick a candidate, lower, verify, measure.

The region is adopted (its kernel replaces the eager nodes) only when the lowered program
matches eager on the real arguments and, if measuring, runs faster than the eager nodes it
replaces. Otherwise the eager nodes stay and the report says why.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

import codegen
import ir
from derivations import Budget, derive
from ollie import cost as cost_model
from ollie.plan import max_relative_error, median_times, run_node, tolerance


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
    error: float | None = None           # max relative error against eager
    eager_s: float | None = None
    ollie_s: float | None = None
    decision: str = ""
    kernel: Callable | None = None       # set when the region is adopted
    input_names: tuple[str, ...] = ()
    kernel_source: str = ""
    candidates: list = field(default_factory=list)

    def summary(self) -> str:
        speed = (f", eager {self.eager_s * 1e3:.3f} ms vs ollie {self.ollie_s * 1e3:.3f} ms"
                 if self.eager_s and self.ollie_s else "")
        return (f"ollie: region {self.root_name} ({' → '.join(self.ops)}): {self.decision}"
                f"; est. cost {self.cost_before:.3g} → {self.cost_after:.3g}{speed}")

    def describe(self) -> str:
        lines = [f"region {self.root_name}: {' → '.join(self.ops)}",
                 "  captured expression:", _indent(ir.to_text(self.original), 4)]
        if self.derivation is not None:
            lines.append(f"  derivation: {self.derivation}")
        if self.chosen is not None:
            lines.append("  rule chain: " + (" → ".join(self.rule_chain) or "(none: original form)"))
            lines.append("  chosen program:")
            lines.append(_indent(ir.to_text(self.chosen), 4))
        lines.append(f"  estimated cost: {self.cost_before:.4g} → {self.cost_after:.4g}"
                     + (f" ({self.cost_before / self.cost_after:.1f}× lower)"
                        if self.cost_after else ""))
        if self.error is not None:
            lines.append(f"  check against eager: max relative error {self.error:.2e}")
        if self.eager_s is not None and self.ollie_s is not None:
            lines.append(f"  measured: eager {self.eager_s * 1e3:.3f} ms, ollie "
                         f"{self.ollie_s * 1e3:.3f} ms ({self.eager_s / self.ollie_s:.2f}×)")
        lines.append(f"  decision: {self.decision}")
        return "\n".join(lines)


def compile_region(region, reference: dict, options) -> RegionReport:
    cost = cost_model.default()
    report = RegionReport(region.root.name, [_op_name(m) for m in region.members], region.expr)
    report.cost_before = ir.analysis.program_cost(region.expr, cost)
    try:
        t0 = time.perf_counter()
        derivation = derive(region.expr, Budget(nodes=options.max_nodes,
                                                seconds=options.budget_s))
        candidates = derivation.candidates(options.candidates, cost)
        report.derive_s = time.perf_counter() - t0
        report.derivation = derivation.report
    except Exception as e:  # a derivation bug must not break the user's function
        report.decision = f"eager: derivation failed: {_first_line(e)}"
        return report
    report.candidates = candidates
    best = min(candidates, key=lambda c: c.cost)
    report.chosen, report.rule_chain, report.cost_after = best.program, best.rule_chain, best.cost
    if best.cost >= report.cost_before * 0.95:
        report.decision = "eager: no derived form is cheaper than the captured one"
        return report
    backend = "torch" if options.backend == "auto" else options.backend
    try:
        kernel = codegen.lower(best.program, backend=backend)
    except Exception as e:
        report.decision = f"eager: lowering to {backend} failed: {_first_line(e)}"
        return report
    inputs = [reference[region.inputs[name]] for name in kernel.input_names]
    try:
        with torch.no_grad():
            out = kernel(*inputs)
    except Exception as e:
        report.decision = f"eager: the lowered kernel raised {_first_line(e)}"
        return report
    expected = reference[region.root]
    report.error = max_relative_error(out, expected)
    if report.error > tolerance(expected.dtype) or out.dtype != expected.dtype:
        report.decision = (f"eager: the derived program does not match eager "
                           f"(error {report.error:.2e}, dtype {out.dtype})")
        return report
    if options.measure:
        env = dict(reference)
        members = list(region.members)

        def eager_region():
            for m in members:
                env[m] = run_node(None, m, env)

        with torch.no_grad():
            report.eager_s, report.ollie_s = median_times([eager_region, lambda: kernel(*inputs)])
        if report.ollie_s >= report.eager_s:
            report.decision = "eager: the derived program measured no faster than eager"
            return report
    report.kernel, report.input_names = kernel, tuple(kernel.input_names)
    report.kernel_source = getattr(kernel, "source", "")
    report.decision = "adopted"
    return report


def _op_name(node) -> str:
    if node.op == "call_method":
        return f".{node.target}"
    return getattr(node.target, "__name__", str(node.target))


def _indent(text: str, n: int) -> str:
    return "\n".join(" " * n + line for line in text.splitlines())


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
