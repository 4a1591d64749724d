"""The choose stage of a region: which derived candidates are measured, and whether the
fastest correct one replaces the region's ATen calls.

The candidate ranker (``ollie.cost.ranker``) orders the candidates by what their lowering
runs; its best ``Options.measure_top`` are lowered, checked against the original's value
(``measure.measure_candidates``, within the region's allowance) and timed, and the fastest
correct one is timed against the original in interleaved rounds (``measure.compare``). It is
adopted only when it leads by ``ADOPTION_MARGIN``.
"""
from __future__ import annotations

import math
import time
from typing import Callable

import torch

import codegen
from ollie import cost as cost_model
from ollie.decision import ADOPTION_MARGIN, Decision, Outcome, decide
from ollie.capture import contractions
from ollie.cost import lowered, measure, ranker


def choose(report, region, original: Callable[[], object], start, candidates: list,
           second_opinion: list, tensors: dict, expected, options, show) -> None:
    """Decide ``report`` (a ``region.RegionReport``) among the derivation's ``candidates``
    and the analytic cost's ``second_opinion``. ``original`` runs the region's ATen calls;
    ``start`` is the expression derived from (the original, ATen's views read in place)."""
    cheapest = min(candidates, key=lambda c: c.cost)
    report.chosen, report.rule_chain, report.cost_after = (
        cheapest.program, cheapest.rule_chain, cheapest.cost)
    derived = [c for c in candidates if c.rule_chain]
    signature = contractions.signature(region.members)
    if options.inductor:  # their gain over the region run eagerly is Inductor's fusion's too:
        # the original with ATen's views read in place (Inductor inlines views as well), and
        # any program running the original's contractions unchanged
        derived, second_opinion = ([c for c in cs if c.rule_chain != ("inline_views",)
                                    and not _contractions_unchanged(signature, c)]
                                   for cs in (derived, second_opinion))
        if not derived and not second_opinion:
            report.decision = Decision(Outcome.GLUE_ONLY)
            return
    # Extraction's estimate admits a candidate, and the analytic cost's pick; under Inductor,
    # so do fewer multiply-adds in its contractions; without Inductor, so does the ranker's
    # estimate. The ranker orders them all by what their lowering runs: its best
    # ``measure_top`` are measured, more where its estimates are close, and any it cannot
    # price (operators it never saw).
    original_flops = _contraction_flops(signature)
    analytic = {id(c) for c in second_opinion}
    selection = ranker.select(
        region.expr, derived + second_opinion, cost_model.candidate_ranker(options.cache_dir),
        gain=lambda c: id(c) in analytic or c.cost < report.cost_before * 0.95 or
        options.inductor and
        _contraction_flops(_lowered_contractions(c)) < ADOPTION_MARGIN * original_flops,
        fused=options.inductor, gate=not options.inductor, top=options.measure_top)
    promising = selection.to_measure
    report.unmeasured = selection.skipped
    if not promising:
        report.decision = Decision(Outcome.NOT_CHEAPER)
        return
    t0 = time.perf_counter()
    try:
        _measure_and_decide(report, original, tensors, expected, options, show, start,
                            selection, promising)
    finally:
        report.measure_s = time.perf_counter() - t0


def _measure_and_decide(report, original, tensors, expected, options, show, start,
                        selection, promising) -> None:
    """Time the promising candidates (on each backend), then the fastest correct one against
    the original; adopt it if it leads by the margin."""
    results, labels = [], []
    backends = _backends(options, tensors)
    total = len(backends) * len(promising)
    for backend in backends:  # measurement decides between backends too
        for candidate in promising:
            show.status(f"ollie: measuring {report.root_name}: candidate {len(results) + 1}"
                        f"/{total} ({backend})")
            results += measure.measure_candidates(
                [candidate], tensors, expected, cap=options.measure_cap_s, backend=backend,
                rtol=report.allowed_error, record=options.cache,
                labels={"family": "region", "case": report.root_name},
                cache_dir=options.cache_dir, fused=options.inductor)
            labels.append(backend)
    ranked = {id(c): s for c, s in zip(selection.to_measure, selection.estimates)}
    report.measured = [(r.candidate.rule_chain, r.candidate.cost,
                        ranked.get(id(r.candidate), math.nan), r.ok, r.seconds,
                        f"{backend}: {r.reason}" if r.reason else backend)
                       for r, backend in zip(results, labels)]
    winner = measure.best(results)
    timed = [r for r in results if r.ok]
    if timed:  # how good the ranker's first choice was: its time over the best measured
        report.model_pick_ratio = timed[0].seconds / min(r.seconds for r in timed)
    if winner is not None and winner is not timed[0]:
        winner = _interleaved_best(winner, timed[0], tensors, options)
    if winner is None:
        report.decision = Decision(Outcome.KEPT, reason="no derived program matched the "
                                   "original (" + "; ".join(r.reason for r in results) + ")")
        report.error = min((r.error for r in results), default=None)
        return
    report.chosen, report.rule_chain = winner.candidate.program, winner.candidate.rule_chain
    report.cost_after, report.error = winner.candidate.cost, winner.error
    report.backend = labels[results.index(winner)]
    inputs = [tensors[n] for n in winner.kernel.input_names]
    with torch.no_grad():
        timing = measure.compare(original, lambda: winner.kernel(*inputs),
                                 budget_s=options.measure_cap_s)
        if options.inductor and decide(timing).adopted:
            alike = _against_lowered_original(start, tensors, winner.kernel, inputs, options)
            if alike.speedup < timing.speedup:  # the smaller lead counts
                timing, report.original_lowered = alike, True
    report.decision = decide(timing)
    if report.decision.adopted:
        adopt(report, winner.kernel)


def _interleaved_best(measured_best, ranker_first, tensors: dict, options):
    """The faster of two candidates, timed in interleaved rounds: where the timings one after
    the other contradict the ranker's first choice, each may have met another load."""
    calls = [(lambda r=r, args=[tensors[n] for n in r.kernel.input_names]: r.kernel(*args))
             for r in (measured_best, ranker_first)]
    with torch.no_grad():
        timing = measure.compare(*calls, budget_s=options.measure_cap_s)
    return ranker_first if timing.speedup > 1 else measured_best


def _against_lowered_original(original, tensors: dict, kernel, inputs: list, options):
    """The derived ``kernel`` timed against the ``original`` expression lowered as it is.
    Inductor fuses the elementwise work around the original's ATen calls, as the lowering
    fuses the derived program's: a lead over the ATen calls run one by one may be only that
    fusion, which the compiled original has too."""
    alike = codegen.lower(original, fused=True)
    operands = [tensors[n] for n in alike.input_names]
    return measure.compare(lambda: alike(*operands), lambda: kernel(*inputs),
                           budget_s=options.measure_cap_s)


def _lowered_contractions(candidate) -> list | None:
    """``contractions.signature`` of the candidate's lowering (None: it does not lower on
    meta tensors, measurement will tell)."""
    try:
        calls = lowered.trace_calls(candidate.program, fused=True)
        return contractions.call_signature(
            (func, args, kwargs, outs[0] if len(outs) == 1 else tuple(outs))
            for func, _, outs, args, kwargs in calls)
    except Exception:
        return None


def _contraction_flops(signature: list | None) -> float:
    """The signature's multiply-adds (inf: unknown candidate; NaN: symbolic sizes)."""
    if signature is None:
        return math.inf
    try:
        return sum(float(flops) for _, flops, _ in signature)
    except ValueError:  # a count in size symbols
        return math.nan


def _contractions_unchanged(original: list, candidate) -> bool:
    """Whether the candidate's lowering runs the ``original`` contractions as they are (same
    operators, work and operand layouts; ``contractions.unchanged``), only reordering the
    work around them."""
    return contractions.unchanged(original, _lowered_contractions(candidate),
                                  1 - ADOPTION_MARGIN)


def adopt(report, kernel) -> None:
    """The region runs ``kernel`` (its decision: adopted)."""
    report.kernel, report.input_names = kernel, tuple(kernel.input_names)
    report.kernel_source = getattr(kernel, "source", "")


def cached_backend(options) -> str:
    """The backend a cached program is lowered with (the first one ``_backends`` tries)."""
    return "torch" if options.backend == "auto" else options.backend


def _backends(options, tensors: dict) -> list[str]:
    """Backends whose lowerings are measured: ``auto`` adds Triton when inputs are on a GPU."""
    if options.backend != "auto":
        return [options.backend]
    on_gpu = any(getattr(t, "is_cuda", False) for t in tensors.values())
    return ["torch", "triton"] if on_gpu else ["torch"]
