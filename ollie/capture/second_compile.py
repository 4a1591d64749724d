"""Whether a rewritten graph is worth Inductor's compile of its own.

Judging a rewrite of the whole graph takes a second Inductor compile, about as long as the
first (12–13 s of MobileNet-v3's first call on a 2-core CPU). It is skipped where it cannot
pay off: where the regions' gains, measured uncompiled, add up to less than the adoption
margin of the compiled original's time. What a region saves uncompiled bounds what it saves
compiled, as Inductor fuses the work around contractions in either form (a region's gain is
its lead over the original's ATen calls or over the original lowered alike, the smaller).
Graph substitutions and folded products of weights have no such measurement, so a graph with
some is always compiled. The compiled original's time is stored, so a warm start decides
alike without timing it.
"""
from __future__ import annotations

import torch

from ollie import cache
from ollie.capture.samples import sample_like
from ollie.cost import measure
from ollie.decision import ADOPTION_MARGIN, Outcome

# the cache key suffix of this choice, next to the whole graph's comparison
SUFFIX = "-regions-gain-bound"


def can_pay_off(original, example_inputs, report, key: str, options) -> bool:
    """Whether the rewritten graph (``report``'s adopted regions) could beat ``original``
    (the compiled original graph, boxed) by the adoption margin; when not, the report's
    note says by how much it falls short."""
    figures = [(r.decision.baseline_s, r.decision.challenger_s) for r in report.adopted_regions]
    saves = [eager_s - ollie_s for eager_s, ollie_s in figures
             if eager_s is not None and ollie_s is not None]
    if report.substitutions or len(saves) < len(report.adopted_regions):
        return True
    store = cache.Cache(options.cache_dir) if options.cache else None
    entry = store.get(key + SUFFIX) if store else None
    if entry and entry.get("eager_s"):
        compiled_s = entry["eager_s"]
    else:
        inputs = sample_like(example_inputs)
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            compiled_s = measure.measure(lambda: original(list(inputs))).median
        if store:
            store.put(key + SUFFIX, {"eager_s": compiled_s, "decision": Outcome.MEASURED.value})
    if sum(saves) >= (1 - ADOPTION_MARGIN) * compiled_s:
        return True
    report.note = (f"the rewritten graph is not compiled: its regions save "
                   f"{sum(saves) * 1e3:.3f} ms measured uncompiled, under "
                   f"{1 - ADOPTION_MARGIN:.0%} of the compiled original's "
                   f"{compiled_s * 1e3:.3f} ms, so it could not win")
    return False
