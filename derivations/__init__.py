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
import importlib

# Imported when first named: a warm start that derives nothing (Ollie's choice loaded from
# the compiler's cache) never loads egglog and the extractor's solver. (``derivations.encode``
# is the module; its function of that name is imported from it.)
_HOME = {
    "Encoding": "encode", "EncodeError": "encode", "decode": "encode",
    "Candidate": "extract", "Derivation": "extract", "derive": "extract",
    "IndexRule": "index_rules", "Rules": "rules", "default_rulesets": "rules",
    "Budget": "schedule", "InputTooDeep": "schedule", "Report": "schedule",
}
__all__ = sorted(_HOME)


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module 'derivations' has no attribute {name!r}")
    return getattr(importlib.import_module(f"derivations.{_HOME[name]}"), name)
