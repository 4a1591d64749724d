"""Property: for random small contraction programs, every candidate equals the original."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings, strategies as st

from ir import Iter, Scope, Tensor, flops
from ir.nodes import Const, UnOp, Unary

from derivations import Budget, derive
from derivations.rules.algebra import INLINE, SPLIT
from derivation_helpers import check_equiv, fingerprint, round_trip

NAMES = "ijklmn"


@st.composite
def contractions(draw) -> Scope:
    """Nested sums of products over 1-4 tensors, like a tree of matmuls/einsums.

    Iterators have extents 1-3 and sometimes start at 1 (so some reads fall outside the
    tensors and read 0); subtrees become scopes holding their own sums, read by name;
    some factors are constants, some scopes are wrapped in relu (blocking inlining).
    """
    n_iters = draw(st.integers(2, len(NAMES)))
    lo = {n: draw(st.sampled_from([0, 0, 1])) for n in NAMES[:n_iters]}
    extent = {n: draw(st.integers(1, 3)) for n in NAMES[:n_iters]}
    iters = {n: Iter(n, lo[n], lo[n] + extent[n]) for n in NAMES[:n_iters]}
    n_factors = draw(st.integers(1, 4))
    factors = []
    for q in range(n_factors):
        used = draw(st.lists(st.sampled_from(NAMES[:n_iters]), min_size=1, max_size=2, unique=True))
        shape = tuple(extent[n] + lo[n] for n in used)
        t = Tensor(f"t{q}", shape)
        factors.append((t[tuple(iters[n].symbol for n in used)], set(used)))
    all_used = set().union(*(u for _, u in factors))
    out = [n for n in NAMES[:n_iters] if n in all_used and draw(st.booleans())]

    def build(items, needed: set[str]):
        """(expression, iterators it reads) for a subtree over ``items``."""
        if len(items) == 1:
            return items[0]
        cut = draw(st.integers(1, len(items) - 1))
        left, right = items[:cut], items[cut:]
        used_l = set().union(*(u for _, u in left))
        used_r = set().union(*(u for _, u in right))
        le, lu = build(left, needed | used_r)
        re, ru = build(right, needed | used_l)
        body = le * re
        if draw(st.integers(0, 4)) == 0:
            body = body * Const(float(draw(st.sampled_from([2, -1, 0.5]))))
        used = lu | ru
        trav = [n for n in NAMES if n in used and n in needed]
        sums = [n for n in NAMES if n in used and n not in needed]
        inner = Scope(tuple(iters[n] for n in trav), tuple(iters[n] for n in sums), body)
        access = inner[tuple(iters[n].symbol for n in trav)]
        if draw(st.integers(0, 5)) == 0:
            wrap = Scope(inner.traversal, (), Unary(UnOp.RELU, access))
            access = wrap[tuple(iters[n].symbol for n in trav)]
        return access, set(trav)

    body, used = build(factors, set(out))
    sums = [n for n in NAMES if n in used and n not in out]
    return Scope(tuple(iters[n] for n in out), tuple(iters[n] for n in sums), body, name="root")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(contractions())
def test_every_candidate_equals_the_original(e):
    d = derive(e, Budget(seconds=2, nodes=5000))
    cands = d.candidates(4, flops)
    assert d.rejected == [], d.rejected
    assert any(c.program is e for c in cands)
    for c in cands:
        assert c.verified is True
        check_equiv(c.program, e)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(contractions(), st.sampled_from(["inline", "split"]))
def test_each_rule_alone_preserves_meaning(e, rule):
    d = derive(e, Budget(seconds=2, nodes=5000), rulesets=(INLINE,) if rule == "inline" else (SPLIT,))
    for c in d.candidates(4, flops):
        check_equiv(c.program, e)
    assert d.rejected == []


@settings(max_examples=40, deadline=None)
@given(contractions())
def test_round_trip_is_exact(e):
    back, _ = round_trip(e)
    assert fingerprint(back) == fingerprint(e)
