"""The whole synthesis: enumerate → fingerprint → candidate pairs → verify → prune.

``synthesize(size, ops)`` returns a :class:`Synthesis` with the counts and times of every
stage (what the issue's closing note asks for) and the kept rules, in the order pruning
chose them (smallest first).
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

from derivations.synthesis.enumerate import Enumeration, enumerate_terms, term_ops
from derivations.synthesis.lang import Rule, canonical_rule, size as term_size, to_text
from derivations.synthesis.verify import verify_rule

__all__ = ["Synthesis", "candidate_pairs", "synthesize", "DEFAULT_OPS"]

DEFAULT_OPS = ("add", "sub", "mul", "neg", "scale", "sum", "transpose", "broadcast", "diag",
               "exp", "log")


@dataclass
class Synthesis:
    size: int
    ops: tuple[str, ...]
    enumerated: int = 0
    duplicates: int = 0          # built terms equal to an enumerated one up to ir.canonical
    classes: int = 0             # fingerprint classes
    pairs: int = 0               # candidate pairs: a class member and its representative
    distinct: int = 0            # candidate rules, up to renaming operands
    verified: list[Rule] = field(default_factory=list)
    failed: Counter = field(default_factory=Counter)   # why candidates failed verification
    kept: list[Rule] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    def summary(self) -> str:
        s = self.seconds
        conditional = sum(1 for r in self.verified if r.positive)
        return (f"size {self.size}: {self.enumerated} terms enumerated ({self.duplicates} "
                f"duplicates up to ir.canonical), {self.classes} fingerprint classes, "
                f"{self.pairs} candidate pairs ({self.distinct} up to renaming), "
                f"{len(self.verified)} verified ({conditional} with a side condition; failed: "
                f"{dict(sorted(self.failed.items())) or 'none'}), {len(self.kept)} kept after "
                f"pruning; {s.get('total', 0):.1f}s (enumerate+fingerprint "
                f"{s.get('enumerate', 0):.1f}s, verify {s.get('verify', 0):.1f}s, prune "
                f"{s.get('prune', 0):.1f}s)")


def candidate_pairs(en: Enumeration) -> list[Rule]:
    """Each class member with its representative; and for terms equal only on positive
    operands, each class's representative with the first such class's (conditional)."""
    out = []
    for members in en.classes.values():
        out.extend(Rule(m, members[0]) for m in members[1:])
    for members in en.positive.values():
        reps, seen = [], set()
        for m in members:
            cls = en.prints[m].mixed
            if cls not in seen:
                seen.add(cls)
                reps.append(en.classes[cls][0])
        out.extend(Rule(r, reps[0]) for r in reps[1:])
    return out


def synthesize(size: int, ops=DEFAULT_OPS, prune: bool = True) -> Synthesis:
    start = time.perf_counter()
    out = Synthesis(size, tuple(ops))
    en = enumerate_terms(size, term_ops(ops))
    out.enumerated, out.duplicates, out.classes = len(en.terms), en.duplicates, len(en.classes)
    out.seconds["enumerate"] = en.seconds
    t0 = time.perf_counter()
    pairs = candidate_pairs(en)
    out.pairs = len(pairs)
    distinct = sorted({canonical_rule(p) for p in pairs}, key=_order)
    out.distinct = len(distinct)
    verified = set()
    for cand in distinct:
        v = verify_rule(cand.lhs, cand.rhs)
        if v:
            verified.add(canonical_rule(Rule(cand.lhs, cand.rhs, v.positive)))
        else:
            out.failed[v.kind or "other"] += 1
    out.verified = sorted(verified, key=_order)
    out.seconds["verify"] = time.perf_counter() - t0
    if prune:
        from derivations.synthesis.prune import minimize, prune as prune_rules
        t0 = time.perf_counter()
        out.kept = minimize(prune_rules(out.verified))
        out.seconds["prune"] = time.perf_counter() - t0
    out.seconds["total"] = time.perf_counter() - start
    return out


def _order(r: Rule):
    return (term_size(r.lhs) + term_size(r.rhs), term_size(r.lhs), len(r.positive),
            to_text(r.lhs), to_text(r.rhs))
