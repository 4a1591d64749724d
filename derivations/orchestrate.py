"""Korch's orchestration: which kernels to form and which tensors to write to memory, as a
binary linear program over candidate kernels, recomputation allowed.

A candidate kernel writes one tensor (its ``root``) and reads tensors other kernels write
(``reads``); what lies between is computed inside it, so a value inlined into two kernels is
computed twice. Variables: ``x_k`` in {0, 1} per candidate. The program:

    minimise    sum_k cost_k · x_k
    subject to  sum_{k writes t} x_k >= 1                  for every required tensor t
                x_k <= sum_{j writes t} x_j                for every kernel k and t in reads(k)

Tensors no candidate writes (inputs, a library call's results) are always there. Reads go
to ancestors only, so a solution is a DAG. Solved with scipy's ``milp`` (HiGHS) under a
time limit.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Hashable

import numpy as np

__all__ = ["Kernel", "orchestrate", "TIME_LIMIT"]

TIME_LIMIT = 1.0  # seconds HiGHS may take


@dataclass(frozen=True)
class Kernel:
    root: Hashable          # the tensor it writes
    reads: frozenset        # the tensors it reads that candidate kernels write
    cost: float             # modelled or measured seconds


def orchestrate(kernels: list[Kernel], required: set) -> list[Kernel] | None:
    """The cheapest set of kernels that writes every ``required`` tensor and everything a
    chosen kernel reads (None without scipy or without a solution in time)."""
    if not kernels:
        return None
    try:  # scipy is optional (see derivations.dag); imported (0.3 s) only to solve a program
        from scipy.optimize import Bounds, LinearConstraint, milp
    except ImportError:
        return None
    if not required:
        return []
    writers = defaultdict(list)
    for i, k in enumerate(kernels):
        writers[k.root].append(i)
    rows, lo = [], []
    for t in required:
        rows.append({i: 1.0 for i in writers[t]})
        lo.append(1.0)
    for i, k in enumerate(kernels):
        for t in k.reads:
            if t in writers:
                row = {j: 1.0 for j in writers[t]}
                row[i] = row.get(i, 0.0) - 1.0
                rows.append(row)
                lo.append(0.0)
    a = np.zeros((len(rows), len(kernels)))
    for r, row in enumerate(rows):
        for i, v in row.items():
            a[r, i] = v
    result = milp(np.array([k.cost for k in kernels]), integrality=np.ones(len(kernels)),
                  bounds=Bounds(0, 1), constraints=LinearConstraint(a, lo, np.inf),
                  options={"time_limit": TIME_LIMIT})
    if result.x is None:
        return None
    return [k for k, x in zip(kernels, result.x) if x > 0.5]
