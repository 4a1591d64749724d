"""Index rules, each on its own: they preserve meaning (reads out of bounds included), keep the
traversal, name new iterators deterministically, and do what their reason says."""
from __future__ import annotations

import pytest
import sympy
from hypothesis import HealthCheck, given, settings, strategies as st

from ir import Iter, Reduce, Scope, Tensor, ops
from ir.nodes import Binary, BinOp, Const, UnOp, Unary, accesses, sub_scopes
from ir.patterns import classify, match_matmul

from derivations.index_rules import IndexRule, fresh_name, index_bounds, live_range, renamed
from derivations.rules.bounds import tighten
from derivations.rules.fusion import distribute, factor
from derivations.rules.index import DEFAULT, EXPLORATIVE
from derivations.rules.merging import inline_reads
from derivations.rules.substitution import substitute_split, substitutions
from derivation_helpers import check_equiv


def _results(rule: IndexRule, e: Scope) -> list[Scope]:
    out = list(rule.apply(e))
    for r in out:
        assert {(t.name, t.lo, t.hi) for t in r.traversal} == \
            {(t.name, t.lo, t.hi) for t in e.traversal}, f"{rule.name} changed the traversal"
        check_equiv(e, r)
    return out


def _it(name, lo, hi):
    return Iter(name, lo, hi)


# -- helpers -----------------------------------------------------------------------------
def test_index_bounds_are_exact_for_small_domains_and_sound_beyond():
    h, r = sympy.Symbol("h", integer=True), sympy.Symbol("r", integer=True)
    assert index_bounds(h + r - 1, {"h": (0, 7), "r": (0, 3)}) == (-1, 8)
    u = h + r - 2
    e = sympy.floor(u / 2) + 2 * sympy.Mod(u, 2)
    assert index_bounds(e, {"h": (0, 4), "r": (0, 4)}) == (-1, 4)  # exact, by enumeration
    lo, hi = index_bounds(h + r, {"h": (0, 1000), "r": (0, 1000)})  # interval arithmetic
    assert (lo, hi) == (0, 1999)


def test_names_are_deterministic_and_range_changes_rename():
    h = sympy.Symbol("h", integer=True)
    assert fresh_name("hr", h + 1, 0, 7) == fresh_name("hr", h + 1, 0, 7)
    assert fresh_name("hr", h + 1, 0, 7) != fresh_name("hr", h + 1, 0, 8)
    r = _it("r", 0, 5)
    grown = renamed(r, 0, 6)
    assert grown.name != "r" and renamed(renamed(grown, 0, 5), 0, 6) == grown  # converges
    assert renamed(r, 0, 5) is r


def test_live_range_finds_where_guarding_reads_are_in_bounds():
    x = Tensor("x", (5,))
    i, j = _it("i", -3, 10), _it("j", 0, 2)
    body = x[i.symbol + j.symbol]
    assert live_range(body, i, {"i": (-3, 10), "j": (0, 2)}) == (-1, 5)


# -- variable substitution + summation splitting ------------------------------------------
def _conv(n=1, c=4, hw=5, f=3, k=3, pad=1) -> Scope:
    return ops.conv2d(Tensor("x", (n, c, hw, hw)), Tensor("w", (f, c, k, k)), padding=pad)


def test_substitution_turns_a_conv_into_matmul_and_offset_reduce():
    e = _conv()
    (sub,) = [s for s in _results(_rule("substitute"), e)
              if {it.name for it in s.summation} == {"r", "s"}]
    inner, outer = sub_scopes(sub)
    assert outer is sub and classify(inner) == "matmul" and classify(outer) == "eoperator"
    m = match_matmul(inner)
    assert set(m.k) == {"c"} and len(m.m) == 3 and len(m.n) == 3  # (n,x,y) x (f,r,s)
    # the fresh iterators x = h+r-1, y = w+s-1 are narrowed to the input's bounds
    fresh = [it for it in inner.traversal if it.name not in {"n", "f", "r", "s"}]
    assert [(it.lo, it.hi) for it in fresh] == [(0, 5), (0, 5)]


def test_substitution_result_is_deterministic():
    e = _conv()
    assert substitutions(e) == substitutions(e)


def test_substitution_of_plain_iterators_is_left_to_the_egglog_split():
    a, b = Tensor("a", (3, 4)), Tensor("b", (4, 5))
    i, j, k = _it("i", 0, 3), _it("j", 0, 5), _it("k", 0, 4)
    l = _it("l", 0, 2)
    e = Scope((i,), (k, j, l), a[i.symbol, k.symbol] * b[k.symbol, j.symbol] * Const(2.0))
    assert substitute_split(e, frozenset({"k"})) is None


def test_substitution_abstracts_floor_and_mod_indices():
    e = ops.conv_transpose2d(Tensor("x", (1, 2, 2, 2)), Tensor("w", (2, 3, 4, 4)), stride=2,
                             padding=1)
    (flat,) = inline_reads(e)
    subs = _results(_rule("substitute"), flat)
    matmuls = [s for s in subs if any(classify(x) == "matmul" for x in sub_scopes(s)[:-1])]
    assert matmuls
    inner = sub_scopes(matmuls[0])[0]
    # the floor/mod expression became one iterator over x's two rows only
    fresh = [it for it in inner.traversal if it.name not in {"n", "o"}]
    assert [(it.lo, it.hi) for it in fresh].count((0, 2)) == 2  # rows, columns of x


def test_substitution_skips_non_sum_scopes():
    x = Tensor("x", (4, 3))
    i, j = _it("i", 0, 4), _it("j", 0, 3)
    e = Scope((i,), (j,), x[i.symbol, j.symbol + 1], Reduce.MAX)
    assert substitutions(e) == []


# -- boundary tightening and relaxing -------------------------------------------------------
def test_tighten_shrinks_a_summation_range_to_in_bounds_reads():
    x, w = Tensor("x", (7,)), Tensor("w", (9,))
    h, r = _it("h", 0, 7), _it("r", -2, 9)
    e = Scope((h,), (r,), x[h.symbol + r.symbol] * w[r.symbol])
    (t,) = _results(_rule("tighten"), e)
    (rr,) = t.summation
    assert (rr.lo, rr.hi) == (0, 7) and rr.name != "r"


def test_tighten_restricts_a_source_to_what_is_read_and_live():
    x = Tensor("x", (6,))
    u, i = _it("u", -4, 12), _it("i", 0, 4)
    src = Scope((u,), (), x[u.symbol], name="pad")
    e = Scope((i,), (), src[i.symbol + 1])
    (t,) = _results(_rule("tighten"), e)
    (new_src,) = [s for s in sub_scopes(t) if s is not t]
    assert new_src.bounds() == ((1, 5),)


def test_tighten_keeps_max_reductions_whole():
    x = Tensor("x", (3,))
    i, j = _it("i", 0, 2), _it("j", -1, 5)
    e = Scope((i,), (j,), x[j.symbol], Reduce.MAX)
    assert all(r.summation == e.summation for r in tighten(e))


def test_relax_grows_a_kernel_range_over_zeros_and_a_source_over_its_reads():
    x, w = Tensor("x", (1, 8)), Tensor("w", (5,))
    h, r = _it("h", 0, 8), _it("r", 0, 5)
    e = Scope((h,), (r,), x[0, h.symbol + r.symbol - 2] * w[r.symbol])
    out = _results(_rule("relax"), e)
    assert {(it.lo, it.hi) for o in out for it in o.summation} >= {(0, 6)}
    u, i = _it("u", 0, 4), _it("i", 0, 6)
    y = Tensor("y", (4,))
    src = Scope((u,), (), y[u.symbol], name="copy")
    grown = _results(_rule("relax"), Scope((i,), (), src[i.symbol - 1]))
    assert any(s.bounds() == ((-1, 5),) for g in grown for s in sub_scopes(g) if s is not g)


# -- traversal merging: positional inlining --------------------------------------------------
def test_inline_guards_an_upsample_read_outside_its_range():
    e = ops.conv_transpose2d(Tensor("x", (1, 2, 2, 2)), Tensor("w", (2, 3, 4, 4)), stride=2,
                             padding=1)
    (flat,) = _results(_rule("inline_read"), e)
    assert len(sub_scopes(flat)) == 1
    assert any(isinstance(i, sympy.Expr) and i.has(sympy.floor) for a in accesses(flat.body)
               for i in a.indices)


def test_inline_needs_no_guard_where_the_body_is_zero_outside():
    x = Tensor("x", (5,))
    u, i = _it("u", 0, 5), _it("i", 0, 5)
    src = Scope((u,), (), x[u.symbol] * 2.0, name="twice")
    (flat,) = _results(_rule("inline_read"), Scope((i,), (), src[i.symbol + 2]))
    (a,) = accesses(flat.body)
    assert a.indices == (i.symbol + 2,)


def test_inline_renames_a_summation_iterator_that_would_clash():
    a, b = Tensor("a", (3, 4)), Tensor("b", (4, 3))
    i, k = _it("i", 0, 3), _it("k", 0, 4)
    inner = Scope((i,), (k,), a[i.symbol, k.symbol] * b[k.symbol, i.symbol], name="d")
    kk = _it("k", 0, 3)
    e = Scope((), (kk,), inner[kk.symbol])  # the reader's k is another iterator
    (flat,) = _results(_rule("inline_read"), e)
    assert len({it.name for it in flat.summation}) == 2


# -- splitting and fusing terms; distributivity and factoring -----------------------------
def _terms():
    a, b = Tensor("a", (3, 4)), Tensor("b", (3, 4))
    i, k = _it("i", 0, 3), _it("k", 0, 5)  # k reads past the end of a and b: zeros
    return Scope((i,), (k,), a[i.symbol, k.symbol] * 2.0 + b[i.symbol, k.symbol - 1],
                 name="two")


def test_split_terms_then_fuse_terms_round_trips():
    e = _terms()
    (split,) = _results(_rule("split_terms"), e)
    assert len(sub_scopes(split)) == 3 and not split.summation
    (fused,) = _results(_rule("fuse_terms"), split)
    assert len(sub_scopes(fused)) == 1 and len(fused.summation) == 1


def test_distribute_and_factor_use_canonical_forms():
    a, b, w = Tensor("a", (4,)), Tensor("b", (4,)), Tensor("w", (3,))
    i, j = _it("i", 0, 4), _it("j", 0, 3)
    e = Scope((j,), (i,), (a[i.symbol] + b[i.symbol]) * w[j.symbol])
    (d,) = _results(_rule("distribute"), e)
    assert isinstance(d.body, Binary) and d.body.op is BinOp.ADD
    (f,) = _results(_rule("factor"), d)
    assert isinstance(f.body, Binary) and f.body.op is BinOp.MUL  # (a + b) * w again
    assert distribute(d) == [] and factor(f) == []


def test_hoist_makes_a_computed_factor_a_tensor():
    a, b, c = Tensor("a", (3, 4)), Tensor("b", (4, 5)), Tensor("c", (4, 5))
    i, j, k = _it("i", 0, 3), _it("j", 0, 5), _it("k", 0, 4)
    e = Scope((i, j), (k,), a[i.symbol, k.symbol] * (b[k.symbol, j.symbol] +
                                                      c[k.symbol, j.symbol]))
    (h,) = _results(_rule("hoist"), e)
    assert [classify(s) for s in sub_scopes(h)] == ["elementwise", "matmul"]


def test_a_sum_of_two_matmuls_sharing_a_factor_becomes_one():
    from derivations import derive
    from ir import flops
    a = Tensor("a", (16, 8))
    e = ops.add(ops.matmul(a, Tensor("b", (8, 12))), ops.matmul(a, Tensor("c", (8, 12))))
    cands = derive(e).candidates(3, flops)
    best = cands[0]
    assert best.operators == ("elementwise", "matmul") and best.verified is True
    assert best.rule_chain == ("fuse_terms", "factor", "hoist")


def test_two_matmuls_sharing_a_factor_become_one_between_their_biases():
    """``(a b + p) + (a c + q)``: the products are not neighbours in the sum of terms."""
    from derivations import derive
    from ir import flops
    a = Tensor("a", (64, 32))
    e = ops.add(ops.add(ops.matmul(a, Tensor("b", (32, 48))), Tensor("p", (48,))),
                ops.add(ops.matmul(a, Tensor("c", (32, 48))), Tensor("q", (48,))))
    best = derive(e).candidates(3, flops)[0]
    assert best.operators == ("elementwise", "matmul", "elementwise") and best.verified is True
    assert best.rule_chain == ("fuse_terms", "factor", "hoist")


def test_rules_do_not_apply_where_they_should_not():
    x = Tensor("x", (3,))
    i = _it("i", 0, 3)
    plain = Scope((i,), (), x[i.symbol])
    for rule in EXPLORATIVE:
        assert list(rule.apply(plain)) == [], rule.name


def test_rules_are_named_and_explained():
    assert len({r.name for r in EXPLORATIVE}) == len(EXPLORATIVE)
    assert set(DEFAULT) <= set(EXPLORATIVE)
    for r in EXPLORATIVE:
        assert r.name and r.reason and callable(r.apply)


def _rule(name: str) -> IndexRule:
    return next(r for r in EXPLORATIVE if r.name == name)


# -- property: random expressions, every rule preserves meaning --------------------------------
@st.composite
def index_exprs(draw, its: list[Iter]):
    a, b = draw(st.sampled_from(its)).symbol, draw(st.sampled_from(its)).symbol
    c = draw(st.integers(-2, 2))
    kind = draw(st.sampled_from(["it", "off", "sum", "stride", "floor", "mod", "const"]))
    return {"it": a, "off": a + c, "sum": a + b + c, "stride": 2 * a + c,
            "floor": sympy.floor((a + b + c) / 2), "mod": sympy.Mod(a + c, 2) + c,
            "const": sympy.Integer(abs(c))}[kind]


@st.composite
def programs(draw) -> Scope:
    """A scope over 2-4 iterators (ranges that may start below 0 or run past the tensors),
    its body a product (sometimes a sum, a relu, a constant) of reads of 1-3 tensors and
    sometimes of a nested scope, at offsets, strides, floor/mod and sums of iterators."""
    n = draw(st.integers(2, 4))
    its = [Iter(name, lo, lo + draw(st.integers(1, 4)))
           for name, lo in zip("ijkl", [draw(st.sampled_from([-1, 0, 0, 1])) for _ in range(n)])]
    reads = []
    for t in range(draw(st.integers(1, 3))):
        rank = draw(st.integers(1, 2))
        tensor = Tensor(f"t{t}", tuple(draw(st.integers(2, 4)) for _ in range(rank)))
        reads.append(tensor[tuple(draw(index_exprs(its)) for _ in range(rank))])
    if draw(st.booleans()):  # a nested scope read at an index expression
        u, v = Iter("u", 0, draw(st.integers(2, 4))), Iter("v", 0, draw(st.integers(1, 3)))
        src_t = Tensor("s", (draw(st.integers(2, 5)), 3))
        inner_sums = (v,) if draw(st.booleans()) else ()
        body = src_t[u.symbol + (v.symbol if inner_sums else 0), draw(st.integers(0, 2))]
        src = Scope((u,), inner_sums, body, name="src")
        reads.append(src[draw(index_exprs(its))])
    body = reads[0]
    for r in reads[1:]:
        body = Binary(draw(st.sampled_from([BinOp.MUL, BinOp.MUL, BinOp.ADD])), body, r)
    if draw(st.integers(0, 3)) == 0:
        body = Unary(draw(st.sampled_from([UnOp.RELU, UnOp.NEG])), body)
    if draw(st.integers(0, 3)) == 0:
        body = body * Const(2.0)
    k = draw(st.integers(0, n - 1))
    return Scope(tuple(its[:k + 1]), tuple(its[k + 1:]), body, name="p")


PROPERTY = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@PROPERTY
@given(programs(), st.sampled_from([r.name for r in EXPLORATIVE]))
def test_every_rule_preserves_meaning_on_random_programs(e, name):
    _results(_rule(name), e)


@PROPERTY
@given(programs())
def test_two_steps_preserve_meaning(e):
    """Rules applied to rules' results (as the e-graph does) still agree with the original."""
    for first in _results(_rule("substitute"), e)[:2] + _results(_rule("inline_read"), e)[:2]:
        for rule in (_rule("tighten"), _rule("inline_read"), _rule("relax")):
            for second in list(rule.apply(first))[:2]:
                check_equiv(e, second)


def test_a_rule_that_raises_is_reported_not_fatal():
    from derivations import derive

    def broken(scope):
        raise RuntimeError("boom")

    d = derive(_conv(), index_rules=(IndexRule("broken", "always fails", broken),))
    assert d.report.errors and "boom" in d.report.errors[0]
    assert d.candidates(2, lambda s: 1.0)


@pytest.mark.parametrize("rule", EXPLORATIVE, ids=lambda r: r.name)
def test_applying_a_rule_twice_gives_equal_results(rule):
    for e in (_conv(), _terms()):
        assert list(rule.apply(e)) == list(rule.apply(e))
