"""Analytic cost of one scope level (its sources are separate levels: use ``program_cost``).

A roofline-ish estimate in *flop-equivalents*: a scope costs the larger of its arithmetic and
its memory traffic (bytes weighted by ``BALANCE`` flops per byte, about what a CPU or a GPU's
CUDA cores sustain), plus a fixed ``LAUNCH`` charge so that fusing levels pays off. The
arithmetic of a scope a tuned library runs (a matmul, a convolution, a banded product:
``ir.patterns.classify``) counts ``LIBRARY_SPEEDUP`` times less: BLAS and cuDNN reach close
to peak, a generated loop nest over the same points (an elementwise body reduced, say) does
not.
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Callable

from ir.index_math import index_range
from ir.nodes import Access, Binary, Scope, Unary, accesses, sub_scopes, walk

BALANCE = 8.0  # flops per byte moved at which compute and memory take equally long
LAUNCH = 1024.0  # per-scope fixed cost (kernel launch, loop setup), in flop-equivalents
LIBRARY_SPEEDUP = 8.0  # flops per second of a library operator over a generated loop nest
LIBRARY = frozenset({"matmul", "batch_matmul", "conv", "g2bmm", "gbmm"})


def iteration_points(scope: Scope) -> int:
    """Product of the extents of all traversal and summation iterators."""
    return math.prod(it.extent for it in scope.traversal + scope.summation)


def numel(source) -> int:
    return math.prod(source.shape)


def flops(scope: Scope) -> int:
    """Iteration points × (distinct operators in the body -- a repeated sub-expression is
    computed once by the lowerings --, + 1 for the accumulate of a reduction)."""
    ops = len({n for n in walk(scope.body) if isinstance(n, (Binary, Unary))})
    return iteration_points(scope) * (ops + bool(scope.summation))


def bytes_moved(scope: Scope, itemsize: int = 4) -> int:
    """(Output elements + for each distinct source the elements its reads can touch, at most
    its size and the iteration points) × itemsize. A read's reach is the box its indices
    span over the iterators' ranges, clipped to the source (``A[i, k]`` with ``i`` in 0:6
    touches 6 rows of ``A``, not all of it)."""
    points = iteration_points(scope)
    ranges = {it.name: (it.lo, it.hi) for it in scope.traversal + scope.summation}
    reach: dict = {}
    for a in accesses(scope.body):
        reach[a.source] = reach.get(a.source, 0) + _reach(a, ranges)
    return (numel(scope) + sum(min(numel(s), points, n) for s, n in reach.items())) * itemsize


def _reach(a: Access, ranges) -> int:
    """Elements of ``a.source`` inside the box ``a``'s indices span (all of it if unknown)."""
    if any(hi <= lo for lo, hi in ranges.values()):
        return 0
    total = 1
    for idx, (lo, hi) in zip(a.indices, a.source.bounds()):
        try:
            ilo, ihi = index_range(idx, ranges)
        except (ValueError, KeyError):
            ilo, ihi = lo, hi - 1
        total *= max(0, min(ihi, hi - 1) - max(ilo, lo) + 1)
    return total


def analytic_cost(scope: Scope, itemsize: int = 4) -> float:
    """max(flops, BALANCE × bytes) + LAUNCH: compute- or memory-bound, whichever dominates
    (a library operator's flops divided by LIBRARY_SPEEDUP)."""
    work = flops(scope)
    if scope.summation and _library(scope):
        work /= LIBRARY_SPEEDUP
    return max(work, BALANCE * bytes_moved(scope, itemsize)) + LAUNCH


@lru_cache(maxsize=1 << 16)
def _library(scope: Scope) -> bool:
    from ir.patterns import classify  # patterns build on nodes; analysis is imported first
    return classify(scope) in LIBRARY


def program_cost(root: Scope, node_cost: Callable[[Scope], float] = analytic_cost) -> float:
    """Sum of ``node_cost`` over every distinct scope of the program (``sub_scopes``)."""
    return sum(node_cost(s) for s in sub_scopes(root))
