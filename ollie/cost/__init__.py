"""Costs used to rank candidate programs.

Extraction takes the cost as a callable of ONE scope (its own work, not the scopes it reads);
a program's cost is the sum over its scopes. The default is the learned model
(``ollie.cost.learned``: LightGBM on measured timings, shipped with a default trained on a
CPU and retrained per machine by ``ollie tune``); ``OLLIE_COST=analytic`` or a model that
cannot load selects the analytic cost (flops and bytes moved, ``ir.analysis``).
"""
from __future__ import annotations

import functools
import os
import warnings
from typing import Callable

import ir
from ir import analysis

ScopeCost = Callable[[ir.Scope], float]


def analytic(scope: ir.Scope) -> float:
    """Flops plus a weight on bytes moved: see ``ir.analysis.analytic_cost``."""
    return analysis.analytic_cost(scope)


@functools.lru_cache(maxsize=1)
def _learned() -> ScopeCost | None:
    try:
        from ollie.cost.learned import LearnedCost
        return LearnedCost.load()
    except Exception as e:  # missing lightgbm, damaged model file: rank analytically
        warnings.warn(f"ollie: learned cost model unavailable ({e}); using the analytic cost")
        return None


def default() -> ScopeCost:
    if os.environ.get("OLLIE_COST", "learned") == "analytic":
        return analytic
    return _learned() or analytic
