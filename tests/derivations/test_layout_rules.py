"""Iterator splitting and data-layout rules: each preserves meaning on its own, factors come
from the expression's strides, and together they turn dilated G2BMM / GBMM / conv2d into the
dense operator plus layout eOperators (inside the e-graph too)."""
from __future__ import annotations

import time

import pytest
import sympy
from hypothesis import HealthCheck, given, settings, strategies as st

from ir import Iter, Reduce, Scope, Tensor, analytic_cost, ops, sub_scopes
from ir.check import check
from ir.equiv import compare
from ir.patterns import match_conv, match_g2bmm, match_gbmm

from derivations import Budget, derive
from derivations.rules.densify import (
    DEFAULT_INDEX_RULES, DENSIFY, INDEX_RULES, densify, derive_layout_variants, replace_scope,
)
from derivations.rules.iterator_split import (
    SPLIT_ITERATOR, index_range, is_layout, simplify_index, split, subst, suggest_factors,
)
from derivations.rules.layout import FUSE_LAYOUT, LAYOUT_MERGE, LAYOUT_SPLIT, MERGE_TRAVERSAL, fuse

NAMES = "ijkl"
SETTINGS = settings(max_examples=100, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


# -- random programs -----------------------------------------------------------------------------
@st.composite
def affine_index(draw, its: list[Iter]) -> sympy.Expr:
    used = draw(st.lists(st.sampled_from(its), min_size=1, max_size=2,
                         unique_by=lambda it: it.name))
    coeffs = [draw(st.sampled_from([1, 1, 2, 3, 4, -1, -2])) for _ in used]
    return sum(c * it.symbol for c, it in zip(coeffs, used)) + draw(st.integers(-3, 3))


@st.composite
def dims(draw, its: list[Iter]) -> list[sympy.Expr]:
    """One or two dims of an access: a plain iterator, an affine index (strides, offsets,
    reads out of bounds), ``floor`` / ``mod`` of one, or a ``(E // Q, E % Q)`` pair."""
    kind = draw(st.sampled_from(["plain", "plain", "affine", "affine", "floor", "mod", "pair"]))
    if kind == "plain":
        return [draw(st.sampled_from(its)).symbol + draw(st.sampled_from([0, 0, 1]))]
    e = draw(affine_index(its))
    q = draw(st.sampled_from([2, 3]))
    if kind == "floor":
        return [sympy.floor(e / q)]
    if kind == "mod":
        return [sympy.Mod(e, q)]
    if kind == "pair":
        return [sympy.floor(e / q) + draw(st.integers(-1, 1)), sympy.Mod(e, q)]
    return [e]


@st.composite
def programs(draw) -> Scope:
    """A sum (or max) of a product of 1-3 reads of small tensors over 2-4 iterators, whose
    ranges may start below 0, sometimes with two batch iterators read plainly by every read;
    a read may go through a layout eOperator, and the root may be a chain of layout
    eOperators over that scope."""
    n = draw(st.integers(2, len(NAMES)))
    its = []
    for name in NAMES[:n]:
        lo = draw(st.sampled_from([-1, 0, 0, 1]))
        its.append(Iter(name, lo, lo + draw(st.integers(1, 6))))
    n_trav = draw(st.integers(1, n))
    batch = []
    for d in range(draw(st.sampled_from([0, 0, 2]))):
        lo = draw(st.sampled_from([-1, 0, 0, 1]))
        batch.append(Iter(f"b{d}", lo, lo + draw(st.integers(1, 3))))
    reads = []
    for q in range(draw(st.integers(1, 3))):
        idx = [b.symbol for b in batch] + \
            [d for _ in range(draw(st.integers(1, 2))) for d in draw(dims(its))]
        t = Tensor(f"t{q}", tuple(draw(st.integers(1, 8)) for _ in idx))
        src = t
        if draw(st.integers(0, 3)) == 0:  # read through a layout eOperator
            lo = draw(st.sampled_from([-1, 0, 1]))
            us = [Iter(f"u{d}", lo, lo + (n_ + 1) // 2 + 1) for d, n_ in enumerate(t.shape)]
            shift = draw(st.integers(-1, 1))
            src = Scope(tuple(us), (), t[tuple(2 * u.symbol + shift for u in us)])
        reads.append(src[tuple(idx)])
    body = reads[0]
    for r in reads[1:]:
        body = body * r
    reduce = draw(st.sampled_from(["sum"] * 5 + ["max"]))
    scope = Scope(tuple(batch + its[:n_trav]), tuple(its[n_trav:]), body,
                  Reduce(reduce) if its[n_trav:] else Reduce.SUM)
    for _ in range(draw(st.integers(0, 2))):  # outer layout eOperators: a re-indexed copy
        a = draw(st.sampled_from([2, 3]))
        t0 = scope.traversal[0]
        outer = Iter(f"o{t0.name}", t0.lo, t0.hi)
        rest = scope.traversal[1:]
        wrap = [Iter(f"{outer.name}a", (t0.lo // a), -(-t0.hi // a)), Iter(f"{outer.name}b", 0, a)]
        inner = Scope(tuple(wrap) + rest, (), scope[(a * wrap[0].symbol + wrap[1].symbol,)
                                                      + tuple(r.symbol for r in rest)])
        restore = (sympy.floor(outer.symbol / a), sympy.Mod(outer.symbol, a))
        scope = Scope((outer,) + rest, (), inner[restore + tuple(r.symbol for r in rest)])
    return scope


def check_rule_on_program(rule, program: Scope) -> int:
    """Apply ``rule`` to every sub-scope of ``program``; each result must keep the scope's
    traversal, be valid, and leave the program's values unchanged. Returns the firings."""
    fired = 0
    for s in sub_scopes(program):
        for out in rule.apply(s):
            fired += 1
            assert {(i.name, i.lo, i.hi) for i in out.traversal} == \
                {(i.name, i.lo, i.hi) for i in s.traversal}, f"{rule.name} changed the traversal"
            check(out)
            result = compare(program, replace_scope(program, s, out))
            assert result.ok, f"{rule.name}: {result.reason}\n--- before:\n{s}\n--- after:\n{out}"
    return fired


@pytest.mark.parametrize("rule", INDEX_RULES, ids=lambda r: r.name)
@SETTINGS
@given(program=programs())
def test_rule_preserves_meaning_on_random_programs(rule, program):
    check_rule_on_program(rule, program)


# -- index arithmetic ------------------------------------------------------------------------------
@SETTINGS
@given(data=st.data())
def test_index_range_is_sound_and_simplify_keeps_values(data):
    los = data.draw(st.lists(st.integers(-3, 3), min_size=2, max_size=2))
    its = [Iter(n, lo, lo + data.draw(st.integers(1, 6))) for n, lo in zip("ij", los)]
    e = data.draw(dims(its))[0]
    ranges = {it.name: (it.lo, it.hi) for it in its}
    simple = simplify_index(e, ranges)
    lo, hi = index_range(e, ranges)
    for vi in range(*ranges["i"]):
        for vj in range(*ranges["j"]):
            at = {its[0].symbol: vi, its[1].symbol: vj}
            value = int(e.subs(at))
            assert lo <= value <= hi, (e, lo, hi, at)
            assert int(sympy.sympify(simple).subs(at)) == value, (e, simple, at)


@SETTINGS
@given(data=st.data())
def test_substitution_keeps_values_through_nested_mods(data):
    i = Iter("i", -3, 9)
    (e, *_) = data.draw(dims([i]))
    o = sympy.Symbol("o", integer=True)
    q = data.draw(st.sampled_from([2, 3, 4]))
    by = data.draw(st.sampled_from([q * sympy.floor(o / q) + sympy.Mod(o, q), sympy.Mod(o, q),
                                    2 * sympy.Mod(o, q) + 1, sympy.floor(o / q) - 1]))
    out = subst(e, {i.symbol: by})
    for v in range(-4, 9):
        assert int(out.subs(o, v)) == int(sympy.sympify(e).subs(i.symbol, int(by.subs(o, v)))), \
            (e, by, out, v)


def test_sympy_nested_mod_bug_is_avoided():
    i, o = sympy.symbols("i o", integer=True)
    # sympy 1.14: Mod(2*Mod(o, 3), 3) -> 2*Mod(o, 3), which xreplace would have built here
    out = subst(sympy.Mod(2 * i, 3), {i: 3 * sympy.floor(o / 3) + sympy.Mod(o, 3)})
    assert [int(out.subs(o, v)) for v in range(6)] == [0, 2, 1, 0, 2, 1]


def test_simplify_removes_floors_and_mods_that_ranges_decide():
    i1, i2 = sympy.symbols("i1 i2", integer=True)
    ranges = {"i1": (0, 5), "i2": (0, 4)}
    assert simplify_index(sympy.floor((4 * i1 + i2) / 4), ranges) == i1
    assert simplify_index(sympy.Mod(4 * i1 + i2 + 8, 4), ranges) == i2
    nested = sympy.floor(sympy.floor(i1 / 2) / 3)
    assert simplify_index(nested, {"i1": (0, 50)}) == sympy.floor(i1 / 6)
    assert simplify_index(nested, ranges) == 0


# -- factor suggestion -----------------------------------------------------------------------------
Q, K = Tensor("q", (2, 18, 3)), Tensor("k", (2, 18, 3))
A, V = Tensor("a", (2, 18, 5)), Tensor("v", (2, 18, 3))
X, W = Tensor("x", (2, 3, 8, 7)), Tensor("w", (4, 3, 3, 3))
_I, _J = Iter("i", 0, 6), Iter("j", 0, 4)
FLOOR_MOD = Scope((_I,), (_J,), Tensor("t", (3, 4))[sympy.floor(_I.symbol / 2), _J.symbol]
                  * Tensor("u", (2, 4))[sympy.Mod(_I.symbol, 2), _J.symbol])  # t[i//2,j]*u[i%2,j]


@pytest.mark.parametrize("expr, want", [
    (ops.g2bmm(Q, K, 2, 4), {"i": (4,)}),
    (ops.gbmm(A, V, 2, 3), {"i": (3,)}),
    (ops.conv2d(X, W, padding=2, dilation=2), {"h": (2,), "w": (2,)}),
    (ops.conv2d(Tensor("x", (1, 3, 9, 13)), W, padding=1, dilation=(2, 3)), {"h": (2,), "w": (3,)}),
    (ops.conv2d(X, W, padding=1, stride=2), {"r": (2,), "s": (2,)}),
    (FLOOR_MOD, {"i": (2,)}),
], ids=["g2bmm_d4", "gbmm_d3", "conv_dilation2", "conv_dilation2x3", "conv_stride2",
        "floor_mod"])
def test_factors_come_from_strides_and_dilations(expr, want):
    assert suggest_factors(expr) == want


def test_factors_from_a_gcd_of_coefficients():
    i, j, k = Iter("i", 0, 6), Iter("j", 0, 3), Iter("k", 0, 3)
    t = Tensor("t", (40,))
    s = Scope((i,), (j, k), t[i.symbol + 4 * j.symbol + 6 * k.symbol])
    assert suggest_factors(s) == {"i": (2,)}


@pytest.mark.parametrize("expr", [
    ops.matmul(Tensor("m", (4, 5)), Tensor("n", (5, 3))),
    ops.conv2d(X, W, padding=1),
    ops.g2bmm(Q, K, 2, 1),
    ops.gbmm(A, V, 2, 1),
    ops.softmax(Tensor("s", (3, 5)), dim=-1),
], ids=["matmul", "conv", "g2bmm_d1", "gbmm_d1", "softmax"])
def test_plain_expressions_suggest_nothing(expr):
    assert all(suggest_factors(s) == {} for s in sub_scopes(expr))
    assert list(densify(expr)) == []


# -- single rules on the cases ---------------------------------------------------------------------
def test_summation_split_needs_divisibility_or_a_guard():
    i, j = Iter("i", 0, 4), Iter("j", 0, 5)
    t, u = Tensor("t", (4, 5)), Tensor("u", (9,))
    guarded = Scope((i,), (j,), t[i.symbol, j.symbol] * u[i.symbol + j.symbol])
    assert compare(guarded, split(guarded, "j", 2)).ok  # t[.., j] reads 0 at j = 5
    unguarded = Scope((i,), (j,), u[i.symbol + j.symbol])
    assert split(unguarded, "j", 2) is None
    assert split(Scope((i,), (Iter("j", 0, 6),), u[i.symbol + j.symbol]), "j", 2) is not None


def test_traversal_split_restores_the_output_through_a_layout():
    g = ops.g2bmm(Q, K, 2, 4)  # 18 rows: the split grid overhangs by 2
    out = split(g, "i", 4)
    assert is_layout(out) and out.traversal == g.traversal and compare(g, out).ok
    inner = out.body.source
    assert [it.extent for it in inner.traversal] == [2, 5, 4, 5]


def test_layout_split_makes_the_dilated_read_dense():
    inner = split(ops.g2bmm(Q, K, 2, 4), "i", 4).body.source
    outs = list(LAYOUT_SPLIT.apply(inner))
    k_read = [a for o in outs for a in [o.body.rhs] if isinstance(a.source, Scope)]
    assert len(outs) == 2 and len(k_read) == 1  # q and k are each re-laid out once
    (i1, i2) = inner.traversal[1:3]
    assert k_read[0].indices[1:3] == (i2.symbol, i1.symbol + inner.traversal[3].symbol - 2)
    assert all(compare(inner, o).ok for o in outs)


def test_each_rule_fires_on_the_cases():
    g, c = ops.g2bmm(Q, K, 2, 4), ops.conv2d(X, W, padding=2, dilation=2)
    assert check_rule_on_program(SPLIT_ITERATOR, c) == 2  # h and w
    out = split(g, "i", 4)
    inner = out.body.source
    laid = next(LAYOUT_SPLIT.apply(next(LAYOUT_SPLIT.apply(inner))))
    assert check_rule_on_program(MERGE_TRAVERSAL, laid) >= 1  # b with the residue of i
    chained = replace_scope(out, inner, split(inner, "j", 2))
    assert fuse(chained) is not None and check_rule_on_program(FUSE_LAYOUT, chained) == 1
    assert check_rule_on_program(DENSIFY, g) == 1
    m, cc = Iter("m", 0, 12), Iter("c", 0, 3)
    t = Tensor("t", (4, 3, 3))
    pairs = Scope((m,), (cc,), t[sympy.floor(m.symbol / 3), cc.symbol, sympy.Mod(m.symbol, 3)])
    assert check_rule_on_program(LAYOUT_MERGE, pairs) == 1  # t[m//3, c, m%3] = L[m, c]


# -- the cases: dense operators from dilated ones ------------------------------------------
def _dense(program: Scope, match):
    return [m for s in sub_scopes(program) if (m := match(s)) is not None]


CASES = {
    "g2bmm_d4": (lambda: ops.g2bmm(Q, K, 2, 4), match_g2bmm, lambda m: m.d == 1 and m.w == 2),
    "g2bmm_d3_wide": (lambda: ops.g2bmm(Q, K, 3, 3), match_g2bmm, lambda m: m.d == 1 and m.w == 3),
    "gbmm_d4": (lambda: ops.gbmm(A, V, 2, 4), match_gbmm, lambda m: m.d == 1 and m.w == 2),
    "conv3x3_dilation2": (lambda: ops.conv2d(X, W, padding=2, dilation=2), match_conv,
                          lambda m: m.dilation == (1, 1) and m.stride == (1, 1)),
    "conv3x3_dilation2_valid": (lambda: ops.conv2d(X, W, dilation=2), match_conv,
                                lambda m: m.dilation == (1, 1)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_densify_gives_the_dense_operator(case):
    make, match, dense = CASES[case]
    expr = make()
    assert not any(dense(m) for m in _dense(expr, match))
    found = [p for p in densify(expr) if any(dense(m) for m in _dense(p, match))]
    assert found, f"no dense form among {list(densify(expr))}"
    for p in found:
        assert p.traversal == expr.traversal and compare(expr, p).ok
        layouts = [s for s in sub_scopes(p) if is_layout(s)]
        assert p in layouts and len(layouts) == len(sub_scopes(p)) - 1  # all else eOperators


@pytest.mark.parametrize("case, depth", [("g2bmm_d4", 3), ("gbmm_d4", 3), ("conv3x3_dilation2", 6)])
def test_the_single_rules_reach_the_dense_operator(case, depth):
    make, match, dense = CASES[case]
    expr = make()
    rules = (SPLIT_ITERATOR, LAYOUT_SPLIT, MERGE_TRAVERSAL, FUSE_LAYOUT)
    variants = derive_layout_variants(expr, rules, depth=depth)
    hits = [(p, chain) for p, chain in variants if any(dense(m) for m in _dense(p, match))]
    assert hits
    p, chain = hits[0]
    assert chain[0] == "split_iterator" and "layout_split" in chain and compare(expr, p).ok


# -- in the e-graph ------------------------------------------------------------------------
def _egraph_candidates(expr: Scope, seconds: float, k: int):
    """``derive`` with only these index rules (no algebra): the candidates by analytic cost."""
    d = derive(expr, Budget(seconds=seconds), rulesets=(), index_rules=DEFAULT_INDEX_RULES)
    return d, d.candidates(k, analytic_cost)


@pytest.mark.parametrize("case", ["g2bmm_d4", "gbmm_d4", "conv3x3_dilation2"])
def test_the_egraph_finds_and_verifies_the_dense_form(case):
    make, match, dense = CASES[case]
    d, cands = _egraph_candidates(make(), 5.0, 16)
    assert not d.report.errors and not d.rejected
    hits = [c for c in cands if any(dense(m) for m in _dense(c.program, match))]
    assert hits and all(c.verified is True for c in hits)


def test_longformer_sizes_reach_the_dense_g2bmm_in_seconds():
    q, k = Tensor("q", (8, 4096, 64)), Tensor("k", (8, 4096, 64))
    start = time.perf_counter()
    d, cands = _egraph_candidates(ops.g2bmm(q, k, 64, 4), 2.0, 8)
    elapsed = time.perf_counter() - start
    hits = [c for c in cands if any(m.d == 1 and m.w == 64 for m in _dense(c.program, match_g2bmm))]
    assert hits and d.report.stop == "saturated" and elapsed < 10, (elapsed, d.report)


def test_csrnet_sizes_reach_the_dense_conv_in_seconds():
    x, w = Tensor("x", (16, 512, 14, 14)), Tensor("w", (512, 512, 3, 3))
    start = time.perf_counter()
    d, cands = _egraph_candidates(ops.conv2d(x, w, padding=2, dilation=2), 5.0, 16)
    elapsed = time.perf_counter() - start
    hits = [c for c in cands if any(m.dilation == (1, 1) for m in _dense(c.program, match_conv))]
    assert hits and elapsed < 20, (elapsed, d.report)
