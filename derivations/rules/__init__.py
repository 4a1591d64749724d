"""Rulesets: data, grouped by theme, each named and with a one-line reason.

A :class:`Rules` is one egglog ruleset plus what the schedule and the reports need to know
about it. *Facts* rulesets (``analysis=True``) only add facts (free iterators, partitions)
and are run to saturation before every iteration; the others add new forms. Index rules
(Python over ``ir``, for what needs index arithmetic) are listed in
:mod:`derivations.rules.index`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from egglog import Ruleset


@dataclass(frozen=True)
class Rules:
    name: str
    reason: str
    ruleset: Ruleset
    analysis: bool = False
    needs: tuple["Rules", ...] = ()   # facts rulesets these rules read
    ops: tuple[str, ...] = ()   # unary ops (exp, log) every left side reads: the schedule
    #                             runs the ruleset only once the e-graph has one of them

    def __repr__(self) -> str:
        return f"Rules({self.name!r}: {self.reason})"


GENERATED_OPTION = "OLLIE_GENERATED_RULES"   # "1": add the synthesized ruleset, "0": do not
GENERATED_DEFAULT = True   # the must-show cases derive as fast with it (docs/rules.md)


def generated_enabled() -> bool:
    """Whether ``derive`` adds the synthesized ruleset (``derivations.rules.synthesized``):
    ``$OLLIE_GENERATED_RULES`` if set, else ``GENERATED_DEFAULT``."""
    value = os.environ.get(GENERATED_OPTION)
    if value is None:
        return GENERATED_DEFAULT
    return value.strip().lower() not in ("", "0", "false", "no", "off")


def default_rulesets(generated: bool | None = None) -> tuple[Rules, ...]:
    """The explorative rulesets ``derive`` runs when given none: the algebra, and the
    synthesized rules when ``generated`` (default: :func:`generated_enabled`)."""
    from derivations.rules.algebra import ALGEBRA
    if generated_enabled() if generated is None else generated:
        from derivations.rules.synthesized import GENERATED
        return ALGEBRA + (GENERATED,)
    return ALGEBRA
