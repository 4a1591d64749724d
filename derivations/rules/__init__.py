"""Rulesets: data, grouped by theme, each named and with a one-line reason.

A :class:`Rules` is one egglog ruleset plus what the schedule and the reports need to know
about it. *Facts* rulesets (``analysis=True``) only add facts (free iterators, partitions)
and are run to saturation before every iteration; the others add new forms. Index rules
(Python over ``ir``, for what needs index arithmetic) are listed in
:mod:`derivations.rules.index`.
"""
from __future__ import annotations

from dataclasses import dataclass

from egglog import Ruleset


@dataclass(frozen=True)
class Rules:
    name: str
    reason: str
    ruleset: Ruleset
    analysis: bool = False
    needs: tuple["Rules", ...] = ()   # facts rulesets these rules read

    def __repr__(self) -> str:
        return f"Rules({self.name!r}: {self.reason})"


def default_rulesets() -> tuple[Rules, ...]:
    """The explorative rulesets ``derive`` runs when given none."""
    from derivations.rules.algebra import ALGEBRA
    return ALGEBRA
