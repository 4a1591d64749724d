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


@functools.lru_cache(maxsize=4)
def _learned(cache_dir: str | None = None) -> ScopeCost | None:
    try:
        from ollie.cost.learned import LearnedCost
        return LearnedCost.load(cache_dir=cache_dir)
    except Exception as e:  # missing lightgbm, damaged model file: rank analytically
        warnings.warn(f"ollie: learned cost model unavailable ({e}); using the analytic cost")
        return None


def default(cache_dir: str | os.PathLike | None = None) -> ScopeCost:
    """The ranking cost; the learned model is the one tuned in ``cache_dir`` (default: the
    default cache folder) if there is one."""
    if os.environ.get("OLLIE_COST", "learned") == "analytic":
        return analytic
    return _learned(None if cache_dir is None else str(cache_dir)) or analytic


@functools.lru_cache(maxsize=4)
def _ranker(cache_dir: str | None = None):
    try:
        from ollie.cost.ranker import Ranker
        return Ranker.load(cache_dir)
    except Exception as e:  # missing lightgbm, damaged model: every candidate is measured
        warnings.warn(f"ollie: candidate ranker unavailable ({e}); measuring every candidate")
        return None


def candidate_ranker(cache_dir: str | os.PathLike | None = None):
    """The candidate ranker (``ollie.cost.ranker``), or None where it cannot load or
    ``OLLIE_COST=analytic`` (then every promising candidate is measured)."""
    if os.environ.get("OLLIE_COST", "learned") == "analytic":
        return None
    return _ranker(None if cache_dir is None else str(cache_dir))
