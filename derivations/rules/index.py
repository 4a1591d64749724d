"""The index rules, as data: one row per rule, its reason, and the math in a comment.

Each is an :class:`derivations.index_rules.IndexRule`: a pure function over ``ir`` scopes
(see that module for the contract). The schedule applies them to every scope e-node between
egglog iterations (:mod:`derivations.index_pass`).
"""
from __future__ import annotations

from derivations.index_rules import CANONICAL, STEERED, IndexRule
from derivations.rules.bounds import relax, tighten
from derivations.rules.digits import split_digits
from derivations.rules.fusion import distribute, factor, fuse_terms, hoist, split_terms
from derivations.rules.joining import join_ranges
from derivations.rules.merging import inline_reads
from derivations.rules.reduction import broadcast, merge_reductions, single_point, split_pieces
from derivations.rules.substitution import substitutions

SUBSTITUTE = IndexRule(
    "substitute", "variable substitution + summation splitting: sum over S2 in an inner scope "
    "over fresh iterators for the index expressions that do not read S2",
    substitutions, kind=STEERED)
# sum[S] F*G(e(t,s)) = sum[S-S2] F * W[e(t,s)],  W[x] = sum[S2] G(x)
TIGHTEN = IndexRule(
    "tighten", "boundary tightening: shrink ranges to where the reads that zero the body are "
    "in bounds", tighten, kind=STEERED)
# sum[r in 0:9] A[r-1]*B = sum[r' in 1:9] A[r'-1]*B  (A has 0:7)
RELAX = IndexRule(
    "relax", "boundary relaxing: grow ranges over points where the body is zero (padding)",
    relax, kind=STEERED)  # sum[r in 0:5] K[r]*X = sum[r' in 0:6] K[r']*X  (K[5] out of bounds: 0)
INLINE_READ = IndexRule(
    "inline_read", "traversal merging: inline a scope read at index expressions, with an "
    "explicit guard where its range mattered", inline_reads)  # S[e] -> body(S)[u := e]
SPLIT_TERMS = IndexRule(
    "split_terms", "expression splitting: a sum of terms becomes one scope per term",
    split_terms, kind=CANONICAL)  # sum[s] (P + Q) = A + B,  A = sum[s] P,  B = sum[s] Q
FUSE_TERMS = IndexRule(
    "fuse_terms", "expression fusion: scopes with equal summation ranges added become one",
    fuse_terms, kind=CANONICAL)  # A[t] + B[t] = sum[s] (P + Q)  when A = sum[s] P, B = sum[s'] Q
JOIN_RANGES = IndexRule(
    "join_ranges", "range joining: pieces of one computation over adjacent ranges (a cat of "
    "chunks, a sum of chunked sums) become one scope over their union",
    join_ranges)  # A[t] + B[t-8] = J[t]   when B(u) = A-body(u+8) and the ranges abut
HOIST = IndexRule(
    "hoist", "expression splitting: a computed factor reading fewer iterators becomes a tensor",
    hoist, kind=CANONICAL)  # sum[k] A[i,k]*(B[k,j] + C[k,j]) = sum[k] A[i,k]*H[k,j],  H = B + C
DISTRIBUTE = IndexRule(
    "distribute", "distributivity: a product of sums expanded (canonical polynomial form)",
    distribute, kind=CANONICAL)  # (a + b) * c = a*c + b*c
FACTOR = IndexRule(
    "factor", "factoring: common factors of a sum of products pulled out (canonical form)",
    factor, kind=CANONICAL)  # a*c + b*c = (a + b) * c,  then split moves sums inward past c

BROADCAST = IndexRule(
    "broadcast", "a reduction that ignores an output iterator is computed once and broadcast",
    broadcast)  # T[i,j] = sum[k] f(i,k)  =  W[i],  W[i] = sum[k] f(i,k)
SINGLE_POINT = IndexRule(
    "single_point", "a reduction over one point is its body at that point", single_point)
# sum[c in 2:3] f(c) = f(2)
MERGE_REDUCTIONS = IndexRule(
    "merge_reductions", "a max (min) of a max (min) read in range is one max over both",
    merge_reductions)  # max[r] M[e(r)],  M[u] = max[q] f(u,q)  =  max[r,q] f(e(r), q)
SPLIT_PIECES = IndexRule(
    "split_pieces", "a max (min) over a cat axis is the max (min) of each piece over its slab",
    split_pieces)  # max[c] (A[c] + B[c-n])  =  max(max[c in 0:n] A[c], max[c in n:..] B[c-n])

SPLIT_DIGITS = IndexRule(
    "split_digits", "digit splitting: iterators whose digits different factors read split "
    "together, so the sums separate (a Kronecker product consumed by a matrix product)",
    split_digits)  # sum[k] A[i//p, k//q] B[i%p, k%q] v[k] = sum[k1,k2] A[i1,k1] B[i2,k2] v[q*k1+k2]

EXPLORATIVE = (SUBSTITUTE, TIGHTEN, RELAX, INLINE_READ, SPLIT_TERMS, FUSE_TERMS, JOIN_RANGES,
               HOIST, DISTRIBUTE, FACTOR, BROADCAST, SINGLE_POINT, MERGE_REDUCTIONS, SPLIT_PIECES,
               SPLIT_DIGITS)
BY_NAME = {r.name: r for r in EXPLORATIVE}


def layout_rules() -> tuple[IndexRule, ...]:
    """Iterator splitting, layout transformations and the guided ``densify`` (modules
    :mod:`derivations.rules.iterator_split`, ``layout``, ``densify``: written separately,
    against the same interface), as their default selection."""
    try:
        from derivations.rules.densify import DEFAULT_INDEX_RULES
    except ImportError:
        return ()
    return tuple(r for r in DEFAULT_INDEX_RULES if isinstance(r, IndexRule))


# What ``derive`` runs by default: relaxing is left out (it only pays with iterator
# splitting to exact multiples, and growing then tightening every range multiplies forms).
DEFAULT = (SUBSTITUTE, TIGHTEN, INLINE_READ, SPLIT_TERMS, FUSE_TERMS, JOIN_RANGES, HOIST,
           DISTRIBUTE, FACTOR, BROADCAST, SINGLE_POINT, MERGE_REDUCTIONS, SPLIT_PIECES,
           SPLIT_DIGITS)


def default_index_rules() -> tuple[IndexRule, ...]:
    return DEFAULT + layout_rules()
