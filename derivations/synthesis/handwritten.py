"""The hand-written algebra, restated as rules of the synthesis language.

To say which generated rules are *new* and which hand-written rules the generated set
*re-derives*, both have to be rules over the same terms. Each hand-written rule that acts on
this operator set is written here by what it does to such terms (on a scope body or across
a scope boundary; the e-graph's encoding adds what :data:`prune.BUILTIN` says):

* ``split`` / ``inline`` (egglog): a sum moves past a factor that does not read its
  iterator, and back; two contractions read by name merge into one.
* ``split_terms`` / ``fuse_terms`` (index rules): a sum of a sum of terms is a sum of sums.
* ``distribute`` / ``factor`` (index rules): a body becomes sympy's expanded or factored
  polynomial over its atoms: distributivity, and the reassociation and reordering of terms
  and factors that sympy's canonical order makes along the way. (A *model*: sympy also
  cancels, ``a*c + b*c - a*c -> b*c``; cancellation is left out because it drops reads,
  which NaN in, NaN out forbids -- see ``test_rule_soundness``.)

Rules that need index arithmetic or ranges (substitution, tightening, relaxing, inlining a
read at an index expression, range joining, iterator splitting, layouts) act on offsets and
bounds, which this operator set does not have; ``hoist`` moves a factor into its own scope
without changing any value: none of them is an identity between terms of this language.
"""
from __future__ import annotations

from derivations.synthesis.lang import Rule, parse_rule

__all__ = ["HAND_WRITTEN", "hand_written_rules"]

HAND_WRITTEN: dict[str, tuple[str, ...]] = {
    "split": (
        "sum(a * A) = a * sum(A)",                      # sum_j a*A[i,j] = a * sum_j A[i,j]
        "sum(a * x) = a * sum(x)",                      # sum_j a*x[j] = a * sum_j x[j]
        "sum(A * T(bcast(x))) = x * sum(A)",            # sum_j A[i,j]*x[i] = x[i] * sum_j A[i,j]
    ),
    "inline": (
        "sum(x) * sum(y) = sum(sum(T(bcast(x)) * bcast(y)))",   # (sum x)(sum y) = sum_ij x_i y_j
    ),
    "split_terms": (
        "sum(A + B) = sum(A) + sum(B)",                 # sum_j (A+B)[i,j] = sum_j A + sum_j B
        "sum(x + y) = sum(x) + sum(y)",
        "sum(A - B) = sum(A) - sum(B)",
        "sum(x - y) = sum(x) - sum(y)",
    ),
    "distribute": (
        "a * (b + c) = a * b + a * c",                  # a(b+c) = ab + ac
        "a * (b - c) = a * b - a * c",                  # a(b-c) = ab - ac
        "a + (b + c) = a + b + c",                      # sympy's sums are flat
        "a * (b * c) = a * b * c",                      # and so are its products
        "a - (b - c) = a - b + c",
        "a - (b + c) = a - b - c",
        "a + (b - c) = a + b - c",
    ),
}


def hand_written_rules() -> list[tuple[str, Rule]]:
    """(hand-written rule name, rule) for every rule above."""
    return [(name, parse_rule(text)) for name, texts in HAND_WRITTEN.items() for text in texts]
