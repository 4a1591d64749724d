"""Measuring again, once, the cached decisions whose margin was within noise.

A decision is measured on whatever load the machine had at the time; when the measured
speed-up lay within its own spread of the adoption threshold (``ollie.cache_entry.
within_noise``) the other decision was as likely. ``ollie tune`` calls ``remeasure_noisy``:
an entry that keeps both programs as text (``original`` and ``program``) is lowered, checked
against itself and timed again here (interleaved rounds, ``ollie.cost.measure.compare``), and
rewritten with the new figures, the decision they give, and ``remeasured`` counted, so it is
measured once, not on every run. An entry without the programs cannot be measured here; it
is removed, and the next first call decides it afresh.
"""
from __future__ import annotations

from ollie import cache_entry, decision as decisions
from ollie.cache import Cache
from ollie.decision import Outcome


def remeasure_noisy(cache_dir=None, budget_s: float = 0.5) -> dict:
    """Re-measure (or drop) every cached decision that ``needs_remeasure``; counts of each."""
    cache = Cache(cache_dir)
    done = {"remeasured": 0, "flipped": 0, "dropped": 0}
    if not cache.usable:
        return done
    for key in cache.keys():
        entry = cache.get(key)
        stored = decisions.stored(entry)
        if stored is None or stored.outcome not in (Outcome.ADOPTED, Outcome.NOT_FASTER) \
                or not cache_entry.needs_remeasure(entry):
            continue
        try:
            timing = _measure(entry, budget_s)
        except Exception:  # a program that no longer lowers or runs here
            timing = None
        if timing is None:
            done["dropped"] += cache.drop(key)
            continue
        decision = decisions.decide(timing, stored.margin)
        done["flipped"] += decision.outcome is not stored.outcome
        done["remeasured"] += cache.put(key, {**entry, **decision.entry(),
                                              "remeasured": entry.get("remeasured", 0) + 1})
    return done


def _measure(entry: dict, budget_s: float):
    """``entry``'s original against its program, timed again (a ``measure.Comparison``;
    None: it cannot be measured here)."""
    import torch

    import codegen
    import ir
    from ollie.cost import measure
    from ollie.numerics import max_relative_error, tolerance

    if not entry.get("original") or not entry.get("program"):
        return None
    device = entry.get("device") or "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        return None
    device = "cuda" if device.startswith("cuda") else "cpu"
    original, program = ir.parse(entry["original"]), ir.parse(entry["program"])
    eager = codegen.lower(original, backend="torch")
    ollie = codegen.lower(program, backend=entry.get("backend") or "torch")
    g = torch.Generator().manual_seed(0)
    shapes = ir.inputs(original)
    tensors = {n: torch.randn(t.shape, generator=g).to(getattr(torch, t.dtype)).to(device)
               for n, t in shapes.items()}
    a = [tensors[n] for n in eager.input_names]
    b = [tensors[n] for n in ollie.input_names]
    with torch.no_grad():
        expected, got = eager(*a), ollie(*b)
        if max_relative_error(got, expected) > tolerance(expected.dtype):
            return None  # the stored program does not match its original: forget it
        return measure.compare(lambda: eager(*a), lambda: ollie(*b), budget_s=budget_s)
