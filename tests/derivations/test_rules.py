"""Each ruleset on its own preserves meaning, fires where it should, and records provenance."""
from __future__ import annotations

import pytest

from ir import Iter, Scope, Tensor, flops, ops
from ir.nodes import sub_scopes

from derivations import derive, default_rulesets
from derivations.rules.algebra import INLINE, SPLIT
from derivation_helpers import all_verified, chain

A, B, C = Tensor("A", (6, 5)), Tensor("B", (5, 7)), Tensor("C", (7, 3))


def _sum_inward() -> Scope:
    x, w = Tensor("x", (9,)), Tensor("w", (4,))
    i, j = Iter("i", 0, 9), Iter("j", 0, 4)
    return Scope((j,), (i,), x[i.symbol] * w[j.symbol], name="outer")


EXPRS = {
    "matmul_chain": lambda: ops.matmul(ops.matmul(A, B), C),
    "einsum_chain": lambda: chain((3, 8, 2, 6, 4)),
    "sum_inward": _sum_inward,
    "mean_of_scaled_matmul": lambda: ops.mean(ops.mul(ops.matmul(A, B), 2.0), dim=0),
    "log_softmax": lambda: ops.log_softmax(ops.matmul(A, B), dim=-1),
    "conv_bias_relu": lambda: ops.relu(ops.conv2d(Tensor("x", (1, 2, 5, 5)), Tensor("w", (3, 2, 3, 3)),
                                                  Tensor("b", (3,)), padding=1)),
}


@pytest.mark.parametrize("rules", [(INLINE,), (SPLIT,), (INLINE, SPLIT)], ids=["inline", "split", "both"])
@pytest.mark.parametrize("name", sorted(EXPRS))
def test_rules_preserve_meaning(rules, name):
    d = derive(EXPRS[name](), rulesets=rules)
    assert d.report.stop == "saturated"
    all_verified(d, k=6)


def test_inline_merges_a_contraction_read_by_name():
    d = derive(ops.matmul(ops.matmul(A, B), C), rulesets=(INLINE,))
    assert d.report.firings["inline"] >= 1
    flat = [c.program for c in all_verified(d) if len(sub_scopes(c.program)) == 1]
    assert len(flat) == 1 and len(flat[0].summation) == 2  # sum[j,k] A*B*C


def test_split_nests_a_flat_contraction():
    d = derive(chain((3, 8, 2, 6)), rulesets=(SPLIT,))
    assert d.report.firings["split"] >= 1
    assert any(len(sub_scopes(c.program)) == 2 for c in all_verified(d))


def test_split_moves_a_sum_past_factors_that_do_not_read_it():
    d = derive(_sum_inward(), rulesets=(SPLIT,))
    (best, *_) = all_verified(d)
    inner, outer = sub_scopes(best.program)
    assert inner.traversal == () and [it.name for it in inner.summation] == ["i"]
    assert outer.summation == ()


def test_inline_does_not_capture_names():
    """T[i,j] * T[j,i]-like reuse: the same contraction read twice stays correct."""
    t = ops.matmul(A, Tensor("Bt", (5, 6)))
    i, j = Iter("i", 0, 6), Iter("j", 0, 6)
    e = Scope((i,), (j,), t[i.symbol, j.symbol] * t[j.symbol, i.symbol])
    all_verified(derive(e))


def test_rule_chain_names_the_rules_that_made_the_form():
    d = derive(ops.matmul(ops.matmul(A, Tensor("B2", (5, 5))), Tensor("C2", (5, 1))))
    best = d.candidates(1, flops)[0]
    assert best.rule_chain == ("inline", "split")
    assert d.candidates(3, flops)[-1].rule_chain in {(), ("inline",)}


def test_rulesets_are_named_and_explained():
    for r in default_rulesets():
        assert r.name and r.reason and not r.analysis
        for dep in r.needs:
            assert dep.analysis and dep.reason

