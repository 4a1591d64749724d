"""Whole-graph rewrites beside the regions' programs, each kept only where the rewritten graph
gives every output on sample inputs within the error allowed against the original graph run
in float64: unrolled loops rolled up before the regions (``ollie.capture.rolling``), the
graph substitutions after them (``ollie.capture.graph_rules``), and the substitutions on the
graph before the regions' rewrite, kept as an alternative to it.
"""
from __future__ import annotations

import torch
import torch.fx as fx

from ollie.capture import contractions, graph_rules, rolling
from ollie.capture.samples import sample_like
from ollie.decision import Outcome
from ollie.log import first_line
from ollie.numerics import allowed_error, max_relative_error


def rolled(gm, example_inputs, report) -> fx.GraphModule | None:
    """``gm`` with its unrolled loops rolled up (``ollie.capture.rolling``), where that gives
    every output on sample inputs; None where nothing is rolled."""
    try:
        new, applied = rolling.roll(gm, example_inputs, graph_rules.ON)
    except Exception as e:  # rolling failed on this graph: the graph as it is
        report.left.append(("rolling", "", f"not applied: {first_line(e)}"))
        return None
    if new is None:
        return None
    wrong = differing_output(new, gm, gm, example_inputs)
    if wrong is not None:
        report.left.append(("rolling", "", f"not applied: output {wrong} differs after it"))
        return None
    report.rolled = applied
    return new


def with_rolled(new, rolled_graph, report):
    """The rewritten graph (``rolled_graph`` where nothing else changed), the report's lines
    of substitutions headed by the rolling's."""
    report.substitutions = report.rolled + report.substitutions
    return new if new is not None else rolled_graph


def substitutions_alone(gm, original, example_inputs, report, alone, inductor: bool,
                        portable: bool = False) -> None:
    """The graph substitutions on the graph before the regions' rewrite (``gm``, which may
    have been rolled up from ``original``), kept in the report as an alternative to the
    regions' rewrite where they merge more than they do after it (``alone``: an empty report,
    for them)."""
    alternative = substitute(gm, original, example_inputs, alone, inductor, portable)
    merges = [line for line in alone.substitutions if not graph_rules.only_folds([line])]
    if alternative is not None and len(merges) > sum(
            not graph_rules.only_folds([line]) for line in report.substitutions):
        report.alternative, report.alternative_substitutions = alternative, alone.substitutions


def take_alternative(report) -> fx.GraphModule:
    """The alternative in place of the regions' rewrite: its substitutions are the report's,
    and no region's program runs."""
    for r in report.regions:
        if r.kernel is not None:
            r.kernel = None
            r.decision = r.decision.overruled(
                Outcome.KEPT, "the graph substitutions on the original graph ran faster than "
                "the graph with this region's program")
    report.substitutions = report.rolled + report.alternative_substitutions
    report.size_branch = None  # no region's choice left to depend on the sizes
    return report.alternative


def substitute(gm, original, example_inputs, report, inductor: bool, portable: bool = False
               ) -> fx.GraphModule | None:
    """``gm`` with the graph substitutions applied, when they give every output of ``gm``
    on sample inputs, within the error allowed against ``original`` (the graph before any
    rewrite) run in float64 (None when none applies or the check fails; the report says
    which). Under Inductor, folds that leave every contraction's work as it was (a scale
    folded into a convolution, a shift into a product's bias) are not kept: Inductor fuses
    that elementwise work into one kernel in either form, and judging them would take a
    second compile. ``portable``: for a
    program exported to run anywhere, so no Inductor hint (which values to write to memory)
    is written into it."""
    try:
        new, applied = graph_rules.substitute(gm, example_inputs,
                                              orchestrate=inductor and not portable)
    except Exception as e:  # a rule that does not fit this graph: the graph as it is
        report.left.append(("graph substitutions", "", f"not applied: {first_line(e)}"))
        return None
    if new is None:
        return None
    if inductor and graph_rules.only_folds(applied) and \
            contractions.work(new.graph.nodes) == contractions.work(gm.graph.nodes):
        report.left.append(("graph substitutions", "", "not kept: every contraction does the "
                            "work it did; Inductor fuses the rest in either form"))
        return None
    wrong = differing_output(new, gm, original, example_inputs)
    if wrong is not None:
        report.left.append(("graph substitutions", "",
                            f"not applied: output {wrong} differs after them"))
        return None
    report.substitutions = applied
    return new


def differing_output(new, gm, original, example_inputs) -> int | None:
    """The first output of ``new`` that differs from ``gm``'s on sample inputs by more than
    the error allowed against ``original`` (the graph before any rewrite) run in float64;
    None when every output agrees."""
    inputs = sample_like(example_inputs)
    fresh = lambda: [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        expected = torch.utils._pytree.tree_leaves(gm(*fresh()))
        got = torch.utils._pytree.tree_leaves(new(*fresh()))
        exact = _float64_outputs(original, fresh())
    for i, (e, g) in enumerate(zip(expected, got)):
        if isinstance(e, torch.Tensor) and not \
                max_relative_error(g, e) <= allowed_error(e, exact[i] if exact else None):
            return i
    return None


def _float64_outputs(gm, inputs) -> list | None:
    """``gm``'s outputs computed in float64, every floating value widened as it is made
    (a constant the graph creates as float32 too); None where the graph does not run so."""
    try:
        with torch.no_grad():
            return torch.utils._pytree.tree_leaves(_Widened(gm).run(*inputs))
    except Exception:  # an op with a fixed dtype, or none in float64
        return None


class _Widened(fx.Interpreter):
    def run_node(self, n):
        return torch.utils._pytree.tree_map(_wide, super().run_node(n))


def _wide(x):
    return x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
