"""Side-by-side timing on a noisy machine: interleaved rounds, medians and bests."""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable


def interleaved_times(fns: list[Callable[[], Any]], budget_s: float = 0.5, min_rounds: int = 5,
                      max_rounds: int = 100) -> list[tuple[float, float]]:
    """(median, best) seconds of each function, timed in interleaved rounds after a warm-up.

    Interleaving makes every function see the same background load, so their ratio is
    meaningful on a noisy shared machine even when absolute times are not; the best time is
    what contention cannot inflate, so decisions compare best times.
    """
    for fn in fns:
        fn()
    times: list[list[float]] = [[] for _ in fns]
    start = time.perf_counter()
    rounds = 0
    while rounds < max_rounds and (rounds < min_rounds or time.perf_counter() - start < budget_s):
        for fn, ts in zip(fns, times):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        rounds += 1
    return [(statistics.median(ts), min(ts)) for ts in times]
