"""From kept rules to the checked-in data file ``derivations/rules/generated.py``.

Each kept rule is classified -- ``new`` when the hand-written algebra
(:mod:`derivations.synthesis.handwritten`) does not derive it in a small e-graph, else
``hand-written`` -- and written as one line: the rule, its tag, and its math in index
notation as a trailing comment. The header records the size bound, the operators, the
counts, and two digests: of the generator's sources and of the rule lines, so a test can
tell cheaply that the file is what the generator at hand would write.
"""
from __future__ import annotations

import hashlib
import itertools
import textwrap
from pathlib import Path

from derivations.synthesis.handwritten import hand_written_rules
from derivations.synthesis.lang import (
    BINARY, UNARY_POINTWISE, VARS, Rule, rank, rule_text,
)
from derivations.synthesis.prune import derivable
from derivations.synthesis.synthesize import Synthesis

__all__ = ["classify", "rederived", "math_text", "render", "generator_digest", "rules_digest",
           "GENERATED_PATH"]

GENERATED_PATH = Path(__file__).resolve().parents[1] / "rules" / "generated.py"
SOURCES = Path(__file__).resolve().parent


def classify(kept: list[Rule]) -> list[str]:
    """``new`` or ``hand-written`` for each kept rule."""
    model = [r for _, r in hand_written_rules()]
    return ["hand-written" if d else "new" for d in derivable(kept, model)]


def rederived(kept: list[Rule]) -> dict[str, list[tuple[Rule, bool]]]:
    """For each hand-written rule name: its rules here, and whether ``kept`` derives each."""
    pairs = hand_written_rules()
    found = derivable([r for _, r in pairs], kept)
    out: dict[str, list[tuple[Rule, bool]]] = {}
    for (name, r), ok in zip(pairs, found):
        out.setdefault(name, []).append((r, ok))
    return out


# -- math ------------------------------------------------------------------------------------
_SYM = {"add": "+", "sub": "−", "mul": "·"}


def _math(t: tuple, idx: tuple, fresh) -> str:
    op = t[0]
    if op == "var":
        return t[1] if not VARS[t[1]] else f"{t[1]}[{','.join(idx)}]"
    if op == "const":
        return str(t[1])
    if op in BINARY:  # parentheses as the tree has them (associativity is not implied)
        left = _math(t[1], idx if rank(t[1]) else (), fresh)
        right = _math(t[2], idx if rank(t[2]) else (), fresh)
        if t[1][0] in BINARY and op == "mul" and t[1][0] != "mul":
            left = f"({left})"
        if t[2][0] in BINARY and (op == "mul" or t[2][0] != "mul"):
            right = f"({right})"
        return f"{left} {_SYM[op]} {right}"
    if op in UNARY_POINTWISE:
        inner = _math(t[1], idx, fresh)
        if op == "neg":
            return f"−({inner})" if t[1][0] in BINARY else f"−{inner}"
        return f"exp({inner})" if op == "exp" else f"log({inner})"
    if op == "T":
        return _math(t[1], (idx[1], idx[0]), fresh)
    if op == "diag":
        return _math(t[1], (idx[0], idx[0]), fresh)
    if op == "bcast":
        return _math(t[1], (idx[1],), fresh)
    k = next(fresh)
    inner = _math(t[1], idx + (k,), fresh)
    return f"Σ_{k} ({inner})" if t[1][0] in BINARY else f"Σ_{k} {inner}"


def math_text(r: Rule) -> str:
    """The rule in index notation: ``Σ_k a·A[i,k] = a·Σ_k A[i,k]``."""
    idx = tuple("ij"[:rank(r.lhs)])
    sides = []
    for t in (r.lhs, r.rhs):
        sides.append(_math(t, idx, iter(itertools.chain("klmn", (f"k{q}" for q in
                                                               itertools.count())))))
    cond = f"  ({', '.join(p + ' > 0' for p in r.positive)})" if r.positive else ""
    return f"{sides[0]} = {sides[1]}{cond}"


# -- the file ----------------------------------------------------------------------------------
def generator_digest() -> str:
    """sha256 of the synthesis package's sources (what decides the generated rules); not
    the graph generator's (``graph*.py``), whose own file its test renders again in full."""
    h = hashlib.sha256()
    for path in sorted(p for p in SOURCES.glob("*.py") if not p.name.startswith("graph")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def rules_digest(rows) -> str:
    h = hashlib.sha256()
    for text, tag in rows:
        h.update(f"{text}|{tag}\n".encode())
    return h.hexdigest()[:16]


def render(syn: Synthesis, tags: list[str]) -> str:
    rows = [(rule_text(r), tag) for r, tag in zip(syn.kept, tags)]
    width = max((len(repr(t)) + len(repr(g)) for t, g in rows), default=0) + 6
    lines = []
    for (text, tag), r in zip(rows, syn.kept):
        entry = f"    ({text!r}, {tag!r}),"
        lines.append(f"{entry:<{width}}  # {math_text(r)}")
    new = sum(tag == "new" for tag in tags)
    about = textwrap.fill(
        f"Synthesized (:mod:`derivations.synthesis`) from every term of up to {syn.size} nodes "
        f"over {', '.join(syn.ops)}: {syn.enumerated} terms enumerated, {syn.pairs} candidate "
        f"pairs ({syn.distinct} up to renaming operands), {len(syn.verified)} verified, "
        f"{len(syn.kept)} kept after pruning ({new} new, {len(syn.kept) - new} derived by the "
        f"hand-written algebra).", width=92)
    return f'''"""Generated rules. Written by ``ollie rules synthesize``: do not edit, regenerate.

{about}

One rule a line: ``lhs = rhs`` (used in both directions; ``if a > 0``: only where the
e-graph proves ``a`` positive), its tag, and its math. ``derivations.rules.synthesized``
loads the new pointwise ones as the egglog ruleset ``generated``.
"""
SIZE = {syn.size}
OPS = {tuple(syn.ops)!r}
GENERATOR = {generator_digest()!r}   # digest of derivations/synthesis/*.py
RULES_DIGEST = {rules_digest(rows)!r}

RULES = (
{chr(10).join(lines)}
)
'''
