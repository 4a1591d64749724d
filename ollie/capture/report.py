"""``explain``: what Ollie did with each graph Dynamo captured, in plain text.

For each graph (forward, backward or inference): the regions derived, each with its captured
expression, derivation, rule chain, measured candidates and decision; the whole-graph timing
of the compiled original against the compiled rewrite; and the operators left to Inductor,
grouped, with the user's module type and source line and the reason. Dynamo's graph breaks
come first, one line each.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Explanation:
    name: str
    backend: object                                     # ollie.capture.backend.OllieBackend
    graph_breaks: dict = field(default_factory=dict)    # Dynamo's reason -> count

    def __str__(self) -> str:
        reports, notes = self.backend.reports, self.backend.notes
        lines = [f"ollie.explain({self.name})"]
        if not reports and not notes:
            return "\n".join(lines + ["  nothing compiled yet: call the function (or pass "
                                      "arguments to explain) first"])
        graphs = self.backend.graphs
        lines.append(f"  Dynamo captured {graphs} graph(s)"
                     + (f", with {sum(self.graph_breaks.values())} graph break(s):"
                        if self.graph_breaks else ""))
        for reason, n in self.graph_breaks.items():
            lines.append(f"    graph break{f' ×{n}' if n > 1 else ''}: {_break_reason(reason)}")
        for note in notes:
            lines.append(f"  {note}")
        for report in reports:
            lines.append("")
            lines.extend(describe_graph(report))
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_pretty_(self, p, cycle):  # IPython
        p.text(str(self))


def summary(backend) -> str:
    """One line: what runs, graph by graph ("inference graph 1: 1/1 regions rewritten")."""
    parts = list(backend.notes) + [graph_line(report) for report in backend.reports]
    return "; ".join(parts) or "nothing compiled"


def graph_line(report) -> str:
    """One ATen graph in a line: "forward graph 1: 1/2 regions rewritten (1.31× compiled)"."""
    adopted = len(report.adopted_regions) if report.adopted else 0
    text = f"{report.title}: {adopted}/{len(report.regions)} regions rewritten"
    if report.substitutions and report.adopted:
        text += f", {len(report.substitutions)} graph substitution(s)"
    if report.folded and report.adopted:
        text += f", {report.folded} weight computation(s) folded"
    if report.runs_eagerly and report.adopted:
        text += ", run uncompiled"
    if report.timing:
        text += f" ({report.timing[0] / report.timing[1]:.2f}× compiled)"
    elif report.note:
        text += f" ({report.note})"
    return text


def describe_graph(report) -> list[str]:
    adopted = report.adopted_regions if report.adopted else []
    lines = [f"  {report.title}: {len(report.regions)} region(s) derived, "
             f"{len(adopted)} rewritten"]
    if report.note:
        lines.append(f"    {report.note}")
    if report.substitutions:
        state = "adopted" if report.adopted else "not adopted"
        lines.append(f"    graph substitutions ({state}):")
        lines.extend(f"      {line}" for line in report.substitutions)
    if report.folded:
        lines.append(f"    {report.folded} computation(s) on weights alone folded: done once, "
                     "again when a weight changes")
    for r in report.regions:
        text = r.describe(adopted=r in adopted)
        lines.extend("    " + line for line in text.splitlines())
    if report.timing:
        original, rewritten = report.timing
        stored = " (stored in the disk cache)" if report.timing_cached else ""
        lines.append(f"    whole graph, compiled: original {original * 1e3:.3f} ms, rewritten "
                     f"{rewritten * 1e3:.3f} ms ({original / rewritten:.2f}×){stored}: "
                     + ("the rewritten graph runs" if report.adopted
                        else "the original graph runs (the rewrite was not clearly faster)"))
    if report.adopted and (report.eager_timing or report.runs_eagerly):
        if report.eager_timing:
            compiled, eager = report.eager_timing
            text = f"rewritten graph, uncompiled: {eager * 1e3:.3f} ms vs compiled " \
                f"{compiled * 1e3:.3f} ms: " + ("it runs uncompiled (library calls)"
                                               if report.runs_eagerly else "compiled")
        else:
            text = "rewritten graph, uncompiled: library calls and views only, nothing for " \
                "Inductor to fuse"
        lines.append(f"    {text}" + (f"; {report.by_size}" if report.by_size else ""))
    if report.left:
        lines.append("    left to Inductor:")
        for (op, where, why), n in Counter(report.left).items():
            at = f" ({where})" if where else ""
            lines.append(f"      {op}{at}{f' ×{n}' if n > 1 else ''}: {why}")
    return lines


def _break_reason(reason: str) -> str:
    """Dynamo's reason in one line: its headline and its explanation."""
    lines = [ln.strip() for ln in reason.strip().splitlines() if ln.strip()]
    head = lines[0] if lines else "unknown"
    why = next((ln.split(":", 1)[1].strip() for ln in lines[1:]
                if ln.startswith("Explanation:")), "")
    return f"{head} — {why}" if why else head
