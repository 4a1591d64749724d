"""Guided layout derivation, and a small breadth-first driver over index rules.

``densify`` is one *guided* index rule (EinNet's guided derivation: steer toward a known
operator) composed of the general rules of :mod:`derivations.rules.iterator_split` and
:mod:`derivations.rules.layout`, nothing else: for a factor ``a`` that the scope's strides
suggest (:func:`suggest_factors`),

1. split every iterator suggesting ``a`` (``i = a*i1 + i2``; a traversal split leaves a
   layout eOperator restoring the output),
2. layout-split every read that became ``a*X + Y`` with narrow ``Y`` (``k[b, a*X + i2, c] =
   L[b, i2, X, c]``), so the dilation / stride disappears from the indices,
3. merge the new iterators into neighbouring traversal iterators read together with them
   (the residues become batch-like dims), layout-merging the reads,
4. fuse the chain of layout eOperators on the output into one.

A dilated G2BMM (``k[b, i + d*(j-w), c]``) becomes a dense G2BMM batched over the residue of
``i`` mod ``d``; a dilated conv a dense conv over a batch of ``n`` x residues of ``h`` and
``w``. Why one composite rule: the index pass applies rules to each e-class's *smallest*
term, and the dense scope is reached only through a larger one (the layout-split form), so
chaining the single rules in the e-graph stops one step short of the fused program.
"""
from __future__ import annotations

from typing import Iterable, Iterator

from ir.canonical import fingerprint
from ir.nodes import Access, Scope, sub_scopes

from derivations.index_rules import STEERED, IndexRule
from derivations.rules.iterator_split import (
    SPLIT_RULES, is_layout, map_accesses, split, suggest_factors,
)
from derivations.rules.layout import (
    LAYOUT_RULES, fuse_chain, layout_splits, merge, merge_pairs,
)

__all__ = ["densify", "densify_by", "DENSIFY", "INDEX_RULES", "DEFAULT_INDEX_RULES",
           "replace_scope", "derive_layout_variants"]

STEPS = 16  # bound on the layout and merge steps of one densify (each strictly simplifies)


def replace_scope(root: Scope, old: Scope, new: Scope) -> Scope:
    """``root`` with the sub-scope ``old`` (by identity) replaced by ``new``, readers rebuilt."""
    memo: dict[int, Scope] = {}

    def visit(s: Scope) -> Scope:
        if s is old:
            return new
        if id(s) not in memo:
            body = map_accesses(s.body, lambda a: Access(visit(a.source), a.indices)
                                if isinstance(a.source, Scope) else a)
            memo[id(s)] = s if body == s.body else \
                Scope(s.traversal, s.summation, body, s.reduce, name=s.name, dtype=s.dtype)
        return memo[id(s)]

    return visit(root)


def _core(p: Scope) -> Scope:
    """The computing scope under ``p``'s chain of layout eOperators."""
    while is_layout(p) and isinstance(p.body.source, Scope):
        p = p.body.source
    return p


def _names(s: Scope) -> set[str]:
    return {it.name for it in s.traversal + s.summation}


def densify_by(scope: Scope, names: Iterable[str], a: int) -> Scope | None:
    """``scope`` with iterators ``names`` split by ``a`` and steps 2-4 of the module doc, or
    None when a split does not apply."""
    p, fresh = scope, set()
    for n in names:                                   # 1. split
        core = _core(p)
        s = split(core, n, a)
        if s is None:
            return None
        fresh |= _names(_core(s)) - _names(core)
        p = fuse_chain(replace_scope(p, core, s))
    for _ in range(STEPS):                            # 2. layout split
        core = _core(p)
        new = next(layout_splits(core), None)
        if new is None:
            break
        p = replace_scope(p, core, new)
    for _ in range(STEPS):                            # 3. merge the new iterators
        core = _core(p)
        pair = next(((x, y) for x, y in merge_pairs(core) if {x, y} & fresh), None)
        if pair is None:
            break
        merged = merge(core, *pair)
        fresh |= _names(_core(merged)) - _names(core)
        p = fuse_chain(replace_scope(p, core, merged))   # 4. fuse the output's layouts
    return p


def densify(scope: Scope) -> Iterator[Scope]:
    """For each suggested factor: all iterators suggesting it split together, then each alone."""
    by_factor: dict[int, list[str]] = {}
    for name, factors in suggest_factors(scope).items():
        for a in factors:
            by_factor.setdefault(a, []).append(name)
    seen = set()
    for a, names in sorted(by_factor.items()):
        for group in [names] + ([[n] for n in names] if len(names) > 1 else []):
            out = densify_by(scope, group, a)
            if out is not None and out not in seen:
                seen.add(out)
                yield out


DENSIFY = IndexRule(
    "densify", "guided: split by a suggested stride/dilation, re-layout the reads it makes dense, "
    "merge the residues into batch dims", densify, kind=STEERED)
# split; layout_split*; merge_traversal*; fuse
INDEX_RULES = SPLIT_RULES + LAYOUT_RULES + (DENSIFY,)  # every rule of these modules
DEFAULT_INDEX_RULES = tuple(r for r in INDEX_RULES if r.default)


def derive_layout_variants(scope: Scope, rules: Iterable[IndexRule] = INDEX_RULES,
                           depth: int = 4, limit: int = 2000) -> list[tuple[Scope, tuple]]:
    """Programs equal to ``scope`` reached by applying ``rules`` to any of its sub-scopes,
    breadth first, up to ``depth`` steps and ``limit`` programs, each with its rule chain;
    deduplicated up to iterator renaming (``ir.fingerprint``). The original comes first."""
    rules = tuple(rules)
    seen = {fingerprint(scope)}
    found = frontier = [(scope, ())]
    for _ in range(depth):
        nxt = []
        for program, chain in frontier:
            for s in sub_scopes(program):
                for rule in rules:
                    for r in rule.apply(s):
                        p = replace_scope(program, s, r)
                        key = fingerprint(p)
                        if key not in seen:
                            seen.add(key)
                            nxt.append((p, chain + (rule.name,)))
                            if len(seen) >= limit:
                                return found + nxt
        found, frontier = found + nxt, nxt
        if not frontier:
            break
    return found
