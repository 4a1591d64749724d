"""TASO's generator over graph operators: identities between small graphs of matrix operators.

The operators are TASO's on matrices: ``mm``, ``add``, ``sub``, ``mul`` (elementwise),
``scale`` (by one scalar ``c``), ``T`` (transpose), ``cat0``/``cat1`` (concatenation along
rows/columns; a graph with two outputs is the pieces of a concatenation, so
``cat1(mm(X, W), mm(X, U)) = mm(X, cat1(W, U))`` reads "the two products are the two pieces
of one product") and its inverse, TASO's split: ``head0``/``tail0`` take the first piece of
the rows of a concatenation or the rest, ``head1``/``tail1`` of the columns (so
``head0(mm(cat0(X, Z), U)) = mm(X, U)`` reads "the first rows of a product are the product of
the first rows"). Operands are matrices with symbolic sizes::

    X, Z: (m, k)    Y: (m, p)    W, U: (k, n)    V: (p, n)

The stages are the point-free generator's (``derivations.synthesis``), for graphs:

    enumerate     every well-shaped term up to ``size`` operators, sums and products up to
                  commutativity
    fingerprint   exact int64 values at sizes m, k, n, p = 2, 3, 5, 7 (distinct, so a term's
                  shape tells its sizes apart) and c = 7 (no sum of at most 3 operators
                  scales by 7); one class per (shape, values)
    verify        each candidate ``member = representative`` in ``ir`` (``ir.ops.mm``,
                  ``cat``: the meaning the capture gives ATen's operators), exactly by sympy,
                  at every size of ``proof_sizes`` (why they prove every size: there)
    prune         a rule whose sides the smaller kept rules rewrite to one term is dropped
                  (ordered rewriting: toward the smaller term, so that commutations prune
                  too); rules of elementwise arithmetic alone prune but are not kept

The terms themselves (operators, shapes, most general typing, text, canonical form) are
``graph_terms``'s. ``ollie rules synthesize --graph`` writes the kept rules to
``derivations/rules/graph_generated.py``;
``ollie.capture.generated_rules`` matches them in ATen graphs.
"""
from __future__ import annotations

import itertools
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ir import ops
from ir.nodes import Tensor

from derivations.synthesis.graph_terms import (BINARY, CONVOLUTION, MATRICES, UNARY, VARS,
                                               GraphRule, canonical, kind, operators, parse, shape,
                                               size, to_text, typing, variables)
from derivations.synthesis.verify import compare_exact

__all__ = ["VARS", "GraphRule", "parse", "to_text", "shape", "synthesize", "verify",
           "proof_sizes", "consistent", "proven", "typing", "GraphSynthesis", "render",
           "parse_rule", "loaded_rules", "untransposed", "two_steps", "composed", "regroups",
           "contractions", "most_general", "GRAPH_PATH"]

FINGERPRINT_SIZES = {"m": 2, "k": 3, "n": 5, "p": 7, "o": 2, "c": 3, "q": 5, "d": 7}
FINGERPRINT_SCALE = 7
SCALE = Tensor("c", ())  # the scalar of ``scale`` in a proof: any real number
POINTWISE = {"add", "sub", "mul", "scale"}  # rules of these alone: the region derivation's
MAX_GRID = 400   # size assignments a proof may take; a rule needing more is not kept


# -- enumerate and fingerprint -------------------------------------------------------------------
def _enumerate(max_size: int) -> dict[tuple, np.ndarray]:
    """Every term of matrices, then every term of filters and images (no operator takes
    both), with its fingerprint."""
    rng = np.random.default_rng(0)
    value: dict[tuple, np.ndarray] = {}
    for operands in (MATRICES, CONVOLUTION):
        _enumerate_over(operands, max_size, value, rng)
    return value


def _enumerate_over(operands: dict, max_size: int, value: dict, rng) -> None:
    by_size = {0: [("var", v) for v in operands]}
    for v, dims in operands.items():
        value[("var", v)] = rng.integers(-4, 5, size=tuple(FINGERPRINT_SIZES[s] for s in dims))
    for s in range(1, max_size + 1):
        made = []
        for a in by_size[s - 1]:
            made.extend((op, a) for op in UNARY)
        for sa in range(s):
            for a in by_size[sa]:
                for b in by_size[s - 1 - sa]:
                    made.extend((op, a, b) for op in BINARY)
        by_size[s] = []
        for t in made:
            t = canonical(t)
            if t in value or shape(t) is None or t[0] == "sub" and t[1] == t[2]:
                continue  # (a term minus itself is a zero, which no graph computes)
            value[t] = _evaluate(t, value)
            by_size[s].append(t)


def _evaluate(t: tuple, value: dict) -> np.ndarray:
    args = [value[c] for c in t[1:]]
    if t[0] == "T":
        return args[0].T
    if t[0] == "scale":
        return FINGERPRINT_SCALE * args[0]
    if t[0][:4] in ("head", "tail"):
        d = int(t[0][-1])
        first = FINGERPRINT_SIZES[shape(t[1])[d][0]]
        return np.split(args[0], [first], axis=d)[t[0].startswith("tail")]
    if t[0] in ("mm", "conv"):
        return args[0] @ args[1]
    if t[0] == "add":
        return args[0] + args[1]
    if t[0] == "sub":
        return args[0] - args[1]
    if t[0] == "mul":
        return args[0] * args[1]
    return np.concatenate(args, axis=int(t[0][-1]))


def _classes(value: dict) -> list[list[tuple]]:
    classes: dict[tuple, list[tuple]] = {}
    for t, v in value.items():
        classes.setdefault((shape(t), v.tobytes()), []).append(t)
    return [sorted(c, key=_order) for c in classes.values() if len(c) > 1]


def _order(t: tuple):
    return size(t), to_text(t)


# -- verify --------------------------------------------------------------------------------------
def proof_sizes(rule: GraphRule) -> list[dict[str, int]]:
    """The size assignments that prove ``rule`` for every size.

    Why: a permutation of one symbol's range, applied to every dim piece of that symbol (a
    concatenation has one piece per operand), maps each side's values onto themselves permuted
    (``mm`` sums a whole range, ``T``, ``add`` and ``cat`` move elements). Fix an output point:
    each side is a sum over the tuples of its summation indices, and grouping the tuples of
    one symbol by equality type (as ``derivations.synthesis.verify`` argues for one extent)
    makes each side, for that symbol's size ``n >= a + d`` (``a`` the output indices, at most
    2, ``d`` its sums in the larger side), a polynomial in ``n`` of degree ``<= d``. So per
    symbol the sizes ``1 .. a + 2d`` decide every size, and their product over the symbols
    decides every assignment."""
    syms = sorted({s for dims in rule.dims.values() for s in dims})
    sums = {s: max(_sums(rule.lhs, s, rule.dims), _sums(rule.rhs, s, rule.dims)) for s in syms}
    ranges = [range(1, 2 + 2 * sums[s] + 1) for s in syms]
    return [dict(zip(syms, sizes)) for sizes in itertools.product(*ranges)]


def _sums(t: tuple, symbol: str, dims: dict) -> int:
    """Summation indices over ``symbol``: one per piece of a product's inner size."""
    own = shape(t[1], dims)[1].count(symbol) if t[0] in ("mm", "conv") else 0
    return own + sum(_sums(c, symbol, dims) for c in t[1:])


def to_ir(t: tuple, sizes: dict[str, int], dims: dict = VARS):
    """Term ``t`` as an ``ir`` scope with the operands' symbols (``dims``) at ``sizes``."""
    if t[0] == "var":
        return Tensor(t[1], tuple(sizes[s] for s in dims[t[1]]))
    args = [to_ir(c, sizes, dims) for c in t[1:]]
    if t[0] == "T":
        return ops.transpose(args[0], 0, 1)
    if t[0] == "scale":
        return ops.mul(args[0], SCALE)
    if t[0][:4] in ("head", "tail"):
        d = int(t[0][-1])
        first = sizes[shape(t[1], dims)[d][0]]
        return ops.slice(args[0], d, 0, first) if t[0].startswith("head") else \
            ops.slice(args[0], d, first, None)
    if t[0] == "conv":  # (a convolution's channel algebra: the module doc)
        return ops.mm(*args)
    if t[0] in ("mm", "add", "sub", "mul"):
        return getattr(ops, t[0])(*args)
    return ops.cat(args, int(t[0][-1]))


def proven(rule: GraphRule) -> tuple[GraphRule | None, str]:
    """The rule with the most general operand sizes it holds for (``typing``, else the
    enumeration's), or None and why it does not hold."""
    general = GraphRule(rule.lhs, rule.rhs, tuple(sorted(typing(rule).items())))
    why = verify(general)
    if not why:
        return general, ""
    plain = GraphRule(rule.lhs, rule.rhs)
    return (None, why) if verify(plain) else (plain, "")


def verify(rule: GraphRule) -> str:
    """"" when ``rule`` holds for every size of its symbols and every input, else why not."""
    grid = proof_sizes(rule)
    if len(grid) > MAX_GRID:
        return f"its proof takes {len(grid)} size assignments (at most {MAX_GRID})"
    for sizes in grid:
        lhs, rhs = to_ir(rule.lhs, sizes, rule.dims), to_ir(rule.rhs, sizes, rule.dims)
        if isinstance(lhs, Tensor) or isinstance(rhs, Tensor):
            lhs, rhs = ops.add(lhs, 0.0), ops.add(rhs, 0.0)
        verdict = compare_exact(lhs, rhs)
        if not verdict:
            return f"at {sizes}: {verdict.reason}"
    return ""


# -- prune ---------------------------------------------------------------------------------------
def _match(pattern: tuple, t: tuple, binding: dict) -> bool:
    if pattern[0] == "var":
        return binding.setdefault(pattern[1], t) == t
    if pattern[0] != t[0] or len(pattern) != len(t):
        return False
    return all(_match(p, c, binding) for p, c in zip(pattern[1:], t[1:]))


def consistent(rule: GraphRule, binding: dict, shape_of=None) -> bool:
    """Whether the bound operands give each of the rule's size symbols one size (a rule is
    proven for every size of its symbols, not for operands whose sizes part where its
    symbols agree: ``X`` and ``Z`` have the same shape in every rule that reads both)."""
    shape_of = shape_of or shape
    sizes: dict = {}
    return all(sizes.setdefault(s, d) == d for v, bound in binding.items()
               for s, d in zip(rule.dims[v], shape_of(bound)))


def _instance(t: tuple, binding: dict) -> tuple:
    if t[0] == "var":
        return binding[t[1]]
    return canonical((t[0], *(_instance(c, binding) for c in t[1:])))


def _normal(t: tuple, kept: list[GraphRule], depth: int = 0) -> tuple:
    """``t`` rewritten by the kept rules bottom-up, each in the direction that makes the term
    smaller in ``_order`` (ordered rewriting: a rule whose sides are equally large, like a
    commutation, still rewrites toward one normal form; the depth bounds the rest)."""
    if t[0] != "var":
        t = canonical((t[0], *(_normal(c, kept, depth) for c in t[1:])))
    if depth < 20:
        for r in kept:
            for source, target in ((r.lhs, r.rhs), (r.rhs, r.lhs)):
                binding: dict = {}
                if _match(source, t, binding) and consistent(r, binding) and \
                        variables(target) <= set(binding):
                    new = _instance(target, binding)
                    if _order(new) < _order(t):
                        return _normal(new, kept, depth + 1)
    return t


def _general_first(r: GraphRule):
    """Smaller rules first, and of those the ones with more operands (Ruler's order: a rule
    with ``X, Y, Z`` derives its instances with ``X, X, Y``)."""
    return size(r.lhs) + size(r.rhs), -len(variables(r.lhs) | variables(r.rhs)), str(r)


@dataclass
class GraphSynthesis:
    size: int
    terms: int = 0
    candidates: int = 0
    failed: list[str] = field(default_factory=list)
    kept: list[GraphRule] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> str:
        return (f"graph operators, size {self.size}: {self.terms} terms, {self.candidates} "
                f"candidate rules, {len(self.failed)} not proven, {len(self.kept)} kept after "
                f"pruning; {self.seconds:.1f}s")


def synthesize(max_size: int = 3, progress=None) -> GraphSynthesis:
    """Enumerate, fingerprint, verify and prune (the module doc); ``progress(i, n)`` is told
    how many candidates were looked at."""
    start = time.perf_counter()
    value = _enumerate(max_size)
    out = GraphSynthesis(max_size, terms=len(value))
    candidates = sorted((GraphRule(m, c[0]) for c in _classes(value) for m in c[1:]),
                        key=_general_first)
    out.candidates = len(candidates)
    proved: list[GraphRule] = []  # every rule kept so far, the sums' own ones too, to prune by
    for i, rule in enumerate(candidates):
        if progress:
            progress(i, len(candidates))
        if _normal(rule.lhs, proved) == _normal(rule.rhs, proved):
            continue
        rule, why = proven(rule)
        if rule is None:
            out.failed.append(f"{candidates[i]}: {why}")
            continue
        proved.append(rule)
        if (operators(rule.lhs) | operators(rule.rhs)) - POINTWISE:
            out.kept.append(rule)
    out.seconds = time.perf_counter() - start
    return out


# -- the checked-in file -------------------------------------------------------------------------
GRAPH_PATH = Path(__file__).resolve().parents[1] / "rules" / "graph_generated.py"


def render(syn: GraphSynthesis) -> str:
    """The text of ``derivations/rules/graph_generated.py`` for ``syn``'s kept rules."""
    rows = "".join(f"    ({str(GraphRule(r.lhs, r.rhs))!r}, {_sizes_text(r)!r}),\n"
                   for r in syn.kept)
    summary = textwrap.fill(
        f"From every term of up to {syn.size} operators over {', '.join(BINARY + UNARY)} "
        f"(``derivations.synthesis.graph``): {syn.terms} terms, {syn.candidates} candidate "
        f"rules, {len(syn.kept)} kept after verification and pruning.", 92)
    return (f'"""Generated rules over graph operators. Written by ``ollie rules synthesize '
            f'--graph``: do not edit,\nregenerate.\n\n{summary}\n\nOne rule a row: ``lhs = '
            f'rhs`` and the operand sizes it is proven for (every size of\nthose symbols). '
            f'``ollie.capture.generated_rules`` applies each in the direction that costs less.'
            f'\n"""\nSIZE = {syn.size}\n\nRULES = (\n{rows})\n')


def _sizes_text(r: GraphRule) -> str:
    return ", ".join(f"{v}: {' '.join(d)}" for v, d in sorted(r.dims.items()))


def parse_rule(text: str, sizes: str) -> GraphRule:
    """A rule from its row of the checked-in file."""
    lhs, rhs = (parse(side) for side in text.split("="))
    dims = tuple(sorted((v.strip(), tuple(d.split())) for v, d in
                        (item.split(":") for item in sizes.split(","))))
    return GraphRule(lhs, rhs, dims)


def loaded_rules() -> list[GraphRule]:
    """The checked-in rules."""
    from derivations.rules.graph_generated import RULES
    return [parse_rule(text, sizes) for text, sizes in RULES]


def untransposed(rule: GraphRule) -> GraphRule | None:
    """The instance of ``rule`` whose operands that it reads only transposed are given as
    transposes, ``V := T(V')``, with ``T(T(V')) = V'``: proven with the rule (an instance of
    it, for every size of ``V'``, whose sizes are ``V``'s swapped). The fixed operand sizes
    keep ``mm(mm(X, U), U)`` from being enumerated; ``mm(mm(X, U), T(V)) = mm(X, mm(U, T(V)))``
    gives it. None where no operand is read only transposed."""
    def bare(t: tuple) -> set[str]:  # operands read other than as T(operand)
        if t[0] == "var":
            return {t[1]}
        if t[0] == "T" and t[1][0] == "var":
            return set()
        return set().union(*(bare(c) for c in t[1:]))

    swapped = (variables(rule.lhs) | variables(rule.rhs)) - bare(rule.lhs) - bare(rule.rhs)
    if not swapped:
        return None

    def drop(t: tuple) -> tuple:
        if t[0] == "T" and t[1][0] == "var" and t[1][1] in swapped:
            return t[1]
        return t if t[0] == "var" else (t[0], *(drop(c) for c in t[1:]))

    dims = tuple((v, d[::-1] if v in swapped else d) for v, d in rule.dims.items())
    return GraphRule(drop(rule.lhs), drop(rule.rhs), tuple(sorted(dims)))


# -- two steps -----------------------------------------------------------------------------------
# A rule applied where it costs less never takes a step that costs more alone: reassociating
# ``(x @ A) @ B`` to ``x @ (A @ B)`` adds work unless a second rule then absorbs ``A @ B``
# (``x @ W + x @ (A @ B) = x @ (W + A @ B)``: a low-rank adapter merged into its weight).
# Composing the two gives one rule whose cost is judged as a whole. Each composition is a
# chain of two proven equalities, so it is proven too (the tests verify a sample).
POOLS = {"matrix": "XYZWUV", "filter": "FGH", "image": "ABC"}


def contractions(t: tuple) -> int:
    return 0 if t[0] == "var" else (t[0] in ("mm", "conv")) + sum(contractions(c)
                                                                 for c in t[1:])


def regroups(source: tuple, target: tuple) -> bool:
    """Whether ``source → target`` keeps its contractions but contracts operands together
    that ``source`` did not (``mm(mm(X, U), V) → mm(X, mm(U, V))`` pairs U with V)."""
    def pairs(t: tuple) -> set[frozenset]:
        if t[0] == "var":
            return set()
        leaves = all(c[0] == "var" or c[0] == "T" and c[1][0] == "var" for c in t[1:])
        here = {frozenset(variables(t))} if t[0] in ("mm", "conv") and leaves else set()
        return here.union(*(pairs(c) for c in t[1:]))
    return contractions(source) == contractions(target) and bool(pairs(target) - pairs(source))


def most_general(rule: GraphRule) -> bool:
    """Whether ``rule`` is proven for its most general operand sizes (``typing``), up to the
    names of the size symbols."""
    def pattern(dims: dict) -> list[int]:
        seen: dict[str, int] = {}
        return [seen.setdefault(s, len(seen)) for v in sorted(dims) for s in dims[v]]
    return pattern(rule.dims) == pattern(typing(rule))


def two_steps(directions: list[tuple[tuple, tuple, GraphRule]]) -> list[GraphRule]:
    """Every regrouping among ``directions`` (source, target, rule) composed with every one
    that saves a contraction. Only rules proven at their most general sizes compose (so the
    compositions are sound); slices stay at a source's root, so no rule with one composes."""
    slices = {"head0", "tail0", "head1", "tail1"}
    general = [(s, t) for s, t, r in directions if most_general(r) and not
               (operators(s) | operators(t)) & slices]
    saving = [(s, t) for s, t in general if contractions(t) < contractions(s)]
    return [r for s, t in general if regroups(s, t)
            for then in saving for r in composed((s, t), then)]


def composed(first: tuple[tuple, tuple], then: tuple[tuple, tuple]) -> list[GraphRule]:
    """The rules ``then``'s source, with a subterm that ``first``'s target is an instance of
    written as ``first``'s source, = ``then``'s target: one for each such subterm."""
    (s1, t1), (s2, t2) = first, then
    names = {}
    for v in sorted(variables(s1)):
        free = [n for n in POOLS[kind(("var", v))] if n not in variables(s2) and
                n not in names.values()]
        if not free:
            return []
        names[v] = free[0]
    renamed = {v: ("var", n) for v, n in names.items()}
    s1, t1 = _substituted(s1, renamed), _substituted(t1, renamed)
    out = []
    for path, sub in _subterms(s2):
        binding: dict = {}
        if not path or not _match(sub, t1, binding):
            continue
        lhs = _replaced(_substituted(s2, binding), path, s1)
        rule = GraphRule(lhs, _substituted(t2, binding))
        if variables(rule.rhs) <= variables(lhs):
            sizes = typing(rule)
            if shape(lhs, sizes) is not None and shape(rule.rhs, sizes) is not None:
                out.append(GraphRule(lhs, rule.rhs, tuple(sorted(sizes.items()))))
    return out


def _substituted(t: tuple, binding: dict) -> tuple:
    return binding.get(t[1], t) if t[0] == "var" else (t[0], *(_substituted(c, binding)
                                                                for c in t[1:]))


def _subterms(t: tuple, path: tuple = ()):
    if t[0] != "var":
        yield path, t
        for i, c in enumerate(t[1:], 1):
            yield from _subterms(c, path + (i,))


def _replaced(t: tuple, path: tuple, new: tuple) -> tuple:
    if not path:
        return new
    i = path[0]
    return (*t[:i], _replaced(t[i], path[1:], new), *t[i + 1:])
