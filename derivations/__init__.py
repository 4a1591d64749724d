"""Derivations: ``ir`` expressions in an egglog e-graph, rulesets, budgets, extraction.

    from derivations import derive, Budget
    d = derive(expr, Budget(seconds=2))
    best = d.candidates(k=3, cost=my_cost)[0].program

May import only ``ir``, egglog and the standard scientific stack (see DESIGN.md).
"""
from derivations.encode import Encoding, EncodeError, decode, encode  # noqa: F401
from derivations.extract import Candidate, Derivation, derive  # noqa: F401
from derivations.rules import Rules, default_rulesets  # noqa: F401
from derivations.schedule import Budget, Report  # noqa: F401
