"""Whether a rewritten graph is worth Inductor's compile of its own.

Judging a rewrite of the whole graph takes a second Inductor compile, about as long as the
first (12–13 s of MobileNet-v3's first call on a 2-core CPU). It is skipped where it cannot
pay off: where what the rewrite saves is less than the adoption margin of the compiled
original's time. Two gains bound what the rewrite saves compiled:

- a region's, measured uncompiled: Inductor fuses the work around contractions in either
  form (a region's gain is its lead over the original's ATen calls or over the original
  lowered alike, the smaller);
- a merge of contractions (``graph_rules``' "merge" rows: several products or convolutions
  made one), by its contractions alone: the calls that differ between the two graphs, each
  run on the values it reads there, back to back, as Inductor's code calls the same
  libraries. The work a merge adds around them (slices, concatenations) only costs. (The
  whole graphs timed uncompiled do not bound it: their elementwise ops on the slices of a
  merged product run as separate strided calls there, which Inductor fuses: an LSTM's four
  gate products merged ran 1.3× faster compiled and 0.9× uncompiled.)

Other substitutions (folds, generated rules, rolled loops, orchestration) and folded products
of weights have no such bound, so a graph with them is always compiled. The figures are
stored, so a warm start decides alike without timing them.
"""
from __future__ import annotations

from collections import Counter

import torch
import torch.fx as fx

from ollie import cache
from ollie.capture import contractions, graph_rules
from ollie.capture.rewrite import copy_graph
from ollie.capture.samples import sample_like
from ollie.cost import measure
from ollie.decision import ADOPTION_MARGIN, Outcome

# the cache key suffix of this choice, next to the whole graph's comparison
SUFFIX = "-regions-gain-bound"
# the substitutions whose gain is their contractions' (``rolling``'s loops also batch the
# elementwise work, which Inductor's code of the unrolled loop runs otherwise)
MERGES = {r.name for r in graph_rules.RULES if r.kind == "merge"} - \
    {"rolled_sum", "rolled_cat"}


def uncompiled(gm: fx.GraphModule, rewritten: fx.GraphModule, wrap) -> tuple:
    """(the original graph, the rewritten one, how a callable of it reads its folded
    weights), taken before Inductor's compile edits ``gm``."""
    return copy_graph(gm)[0], rewritten, wrap


def can_pay_off(original, example_inputs, report, key: str, options, graphs=None) -> bool:
    """Whether the rewritten graph (``report``'s adopted regions and substitutions) could beat
    ``original`` (the compiled original graph, boxed) by the adoption margin; when not, the
    report's note says by how much it falls short. ``graphs``: ``uncompiled``'s, which time
    what merges save."""
    store = cache.Cache(options.cache_dir) if options.cache else None
    entry = (store.get(key + SUFFIX) if store else None) or {}
    regions = _regions_save(report)
    merges = entry.get("merges_save_s", 0.0 if not report.substitutions else None)
    if merges is None and graphs is not None and regions is not None and \
            all(line.split(":")[0] in MERGES for line in report.substitutions):
        try:
            merges = _merges_save(*graphs, example_inputs, options.measure_cap_s)
        except Exception:  # the graphs did not run on sample inputs: no bound, compile
            merges = None
    if regions is None or merges is None:
        return True
    saves = regions + merges
    compiled_s = entry.get("eager_s") or _time(original, example_inputs)
    if store:
        store.put(key + SUFFIX, {"eager_s": compiled_s, "merges_save_s": merges,
                                 "decision": Outcome.MEASURED.value})
    if saves >= (1 - ADOPTION_MARGIN) * compiled_s:
        return True
    report.note = (f"the rewritten graph is not compiled: it saves {saves * 1e3:.3f} ms at "
                   f"most (measured uncompiled), under {1 - ADOPTION_MARGIN:.0%} of the "
                   f"compiled original's {compiled_s * 1e3:.3f} ms, so it could not win")
    return False


def _regions_save(report) -> float | None:
    """What the adopted regions save a call, measured uncompiled (None: not all measured)."""
    figures = [(r.decision.baseline_s, r.decision.challenger_s) for r in report.adopted_regions]
    saves = [eager_s - ollie_s for eager_s, ollie_s in figures
             if eager_s is not None and ollie_s is not None]
    return sum(saves) if len(saves) == len(report.adopted_regions) else None


def _merges_save(before: fx.GraphModule, after: fx.GraphModule, wrap, example_inputs,
                 budget_s: float) -> float:
    """Seconds a call saves in the contractions that differ between ``before`` and ``after``
    (each on the values it reads when its graph runs on sample inputs)."""
    inputs = sample_like(example_inputs)
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        calls_before = _Contractions(before).calls(list(inputs))
        recorder = _Contractions(after)
        wrap(lambda args: recorder.run(*args))(list(inputs))
        calls_after = recorder.found
        ours, theirs = _differing(calls_before, calls_after), _differing(calls_after,
                                                                        calls_before)
        timing = measure.compare(lambda: [f(*a, **k) for f, a, k, _ in ours],
                                 lambda: [f(*a, **k) for f, a, k, _ in theirs],
                                 budget_s=budget_s)
    return timing.eager_median * (1 - 1 / timing.speedup)


def _differing(calls: list, others: list) -> list:
    """``calls`` but for as many of each call as ``others`` makes alike (same operator,
    work and operand layouts)."""
    left = Counter(_signature(c) for c in others)
    kept = []
    for call in calls:
        if left[_signature(call)] > 0:
            left[_signature(call)] -= 1
        else:
            kept.append(call)
    return kept


def _signature(call) -> tuple:
    target, args, kwargs, out = call
    return tuple(contractions.call_signature([(target, args, kwargs, out)]))


class _Contractions(fx.Interpreter):
    """A graph run that keeps each contraction's call: (operator, args, kwargs, output)."""

    def __init__(self, gm):
        super().__init__(gm)
        self.found = []

    def calls(self, inputs: list) -> list:
        self.run(*inputs)
        return self.found

    def call_function(self, target, args, kwargs):
        out = super().call_function(target, args, kwargs)
        if contractions.call_signature([(target, args, kwargs, out)]):
            self.found.append((target, args, kwargs, out))
        return out


def _time(compiled, example_inputs) -> float:
    inputs = sample_like(example_inputs)
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        return measure.measure(lambda: compiled(list(inputs))).median
