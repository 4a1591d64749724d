"""Costs used to rank candidate programs.

Extraction takes the cost as a callable of ONE scope (its own work, not the scopes it reads);
a program's cost is the sum over its scopes. The default is analytic (flops and bytes moved,
``ir.analysis``); a learned model will plug in behind the same callable.
"""
from __future__ import annotations

from typing import Callable

import ir
from ir import analysis

ScopeCost = Callable[[ir.Scope], float]


def analytic(scope: ir.Scope) -> float:
    """Flops plus a weight on bytes moved: see ``ir.analysis.analytic_cost``."""
    return analysis.analytic_cost(scope)


def default() -> ScopeCost:
    return analytic
