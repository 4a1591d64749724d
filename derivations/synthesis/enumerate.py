"""Enumeration: every term up to a size bound, each once, grouped by fingerprint.

Bottom-up by size, Ruler-style: terms of size ``s`` apply an operator to *representatives*
(the first term of each fingerprint class) of smaller sizes. A term built over a
non-representative child equals one built over the representative by a smaller rule and
congruence, so leaving it out loses no rule that pruning would keep.

A term is enumerated once: its ``ir`` scope is put in canonical form (``ir.canonical``:
iterator names and commutative operand order do not count) and a term whose canonical form
was already seen is a *duplicate*, not enumerated again. Index bookkeeping (``T(T(A))``,
``diag(bcast(x))``) and commutativity (``b + a``) are therefore never rules: the e-graph's
encoding has them built in as well (names instead of positions, products as multisets).

Terms without an operand (``2 * 2``, ``exp(0)``) are left out beyond size 1: constant
folding is the interpreter's business, not a rewrite rule's.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from ir.canonical import fingerprint as canonical_key

from derivations.synthesis.fingerprint import N, Fingerprint, fingerprint
from derivations.synthesis.lang import BINARY, CONSTANTS, ENUMERATED, OPS, rank, to_ir, variables

__all__ = ["Enumeration", "enumerate_terms", "term_ops"]

COMMUTATIVE = frozenset({"add", "mul"})


def term_ops(op_names) -> frozenset[str]:
    """The term ops an operator list (``OPS`` names) enables; ``var`` always."""
    unknown = [o for o in op_names if o not in OPS]
    if unknown:
        raise ValueError(f"unknown operators {unknown}; choose from {sorted(OPS)}")
    return frozenset({"var"}).union(*(OPS[o] for o in op_names))


@dataclass
class Enumeration:
    max_size: int
    ops: frozenset[str]
    terms: list[tuple] = field(default_factory=list)            # enumerated, in order
    classes: dict[tuple, list[tuple]] = field(default_factory=dict)    # mixed fp -> terms
    positive: dict[tuple, list[tuple]] = field(default_factory=dict)   # positive fp -> terms
    prints: dict[tuple, Fingerprint] = field(default_factory=dict)
    duplicates: int = 0           # built terms whose canonical form was already enumerated
    per_size: dict[int, int] = field(default_factory=dict)
    seconds: float = 0.0


def _leaves(ops: frozenset[str]) -> list[tuple]:
    out = [("var", v) for v in ENUMERATED]
    if "const" in ops:
        out += [("const", c) for c in CONSTANTS]
    return out


def _built(s: int, reps: dict[int, list[tuple]], ops: frozenset[str]):
    for op in sorted(ops - {"var", "const"} - set(BINARY)):
        for child in reps.get(s - 1, ()):
            yield (op, child)
    for op in sorted(ops & set(BINARY)):
        for s1 in range(1, s - 1):
            s2 = s - 1 - s1
            if op in COMMUTATIVE and s1 > s2:
                continue
            left_terms, right_terms = reps.get(s1, ()), reps.get(s2, ())
            for i, left in enumerate(left_terms):
                start = i if op in COMMUTATIVE and s1 == s2 else 0
                for right in right_terms[start:]:
                    yield (op, left, right)


def enumerate_terms(max_size: int, ops: frozenset[str]) -> Enumeration:
    start = time.perf_counter()
    out = Enumeration(max_size, frozenset(ops))
    seen: set[str] = set()
    reps: dict[int, list[tuple]] = {}
    for s in range(1, max_size + 1):
        candidates = _leaves(out.ops) if s == 1 else _built(s, reps, out.ops)
        count = 0
        for t in candidates:
            if rank(t) is None or (s > 1 and not variables(t)):
                continue
            key = canonical_key(to_ir(t, N))
            if key in seen:
                out.duplicates += 1
                continue
            seen.add(key)
            count += 1
            out.terms.append(t)
            fp = fingerprint(t)
            out.prints[t] = fp
            members = out.classes.setdefault(fp.mixed, [])
            members.append(t)
            if len(members) == 1:
                reps.setdefault(s, []).append(t)
            out.positive.setdefault(fp.positive, []).append(t)
        out.per_size[s] = count
    out.seconds = time.perf_counter() - start
    return out
