"""Rules that are found, not only written: TASO/Ruler-style synthesis of Ollie's algebra.

    enumerate   (enumerate.py)    every term up to N nodes over an operator set, each once up
                                  to ir.canonical (iterator names, commutative order)
    fingerprint (fingerprint.py)  exact values on random integers (exp/log stay exact)
    verify      (verify.py)       for every input: sympy polynomial identity, or exact formal
                                  exp/log values; NaN domains and reads compared; side
                                  conditions found; small extents that prove all extents
    prune       (prune.py)        Ruler-style, in small e-graphs: keep a rule only if the
                                  kept ones cannot derive it
    emit        (emit.py)         derivations/rules/generated.py: one rule a line, its math

``ollie rules synthesize`` runs it; ``derivations.rules.synthesized`` loads the result as an
egglog ruleset. The same verifier checks every hand-written rule (test_rule_soundness).
``graph.py`` is the same generator over graph operators (``mm``, ``add``, ``sub``, transpose,
``cat``; their terms in ``graph_terms.py``):
``ollie rules synthesize --graph`` writes ``derivations/rules/graph_generated.py``, which
``ollie.capture.generated_rules`` applies to whole ATen graphs. See docs/rules.md.
"""
from derivations.synthesis.lang import Rule, parse, parse_rule, rule_text, to_ir  # noqa: F401
from derivations.synthesis.verify import compare_exact, verify_rule  # noqa: F401

__all__ = ["Rule", "parse", "parse_rule", "rule_text", "to_ir", "compare_exact", "verify_rule"]
