"""Derivations: ``ir`` expressions in an egglog e-graph, rulesets, budgets, extraction.

    from derivations import derive, Budget
    d = derive(expr, Budget(seconds=2))
    best = d.candidates(k=3, cost=my_cost)[0].program   # .rule_chain, .operators

Two kinds of rules run: egglog rulesets (``derivations.rules``: the algebra of sums and
products by iterator names) and index rules (``derivations.index_rules``: Python functions
over ``ir`` that rewrite index expressions -- substitution, bounds, inlining, layouts),
applied between egglog iterations and steered toward library operators
(``derivations.guided``).

May import only ``ir``, egglog and the standard scientific stack (see DESIGN.md).
"""
from derivations.encode import Encoding, EncodeError, decode, encode  # noqa: F401
from derivations.extract import Candidate, Derivation, derive  # noqa: F401
from derivations.index_rules import IndexRule  # noqa: F401
from derivations.rules import Rules, default_rulesets  # noqa: F401
from derivations.schedule import Budget, InputTooDeep, Report  # noqa: F401
