"""derive + candidates: the paper's motivating reassociations, ranking, checks, provenance."""
from __future__ import annotations

import time

import ir
from ir import Iter, Scope, Tensor, flops, ops
from ir.nodes import accesses, sub_scopes

import derivations.extract as extract
from derivations import Budget, derive
from derivations.normalize import inline_views
from derivation_helpers import all_verified, chain, chain_optimum, fingerprint, program_flops


def _reads(s: Scope) -> set[str]:
    return {a.source.name for a in accesses(s.body) if isinstance(a.source, Tensor)}


def test_matmul_chain_reassociates_to_the_cheap_order_in_under_two_seconds():
    a, b, c = Tensor("a", (512, 1024)), Tensor("b", (1024, 1024)), Tensor("c", (1024, 16))
    e = ops.matmul(ops.matmul(a, b), c)
    start = time.perf_counter()
    d = derive(e)
    best = d.candidates(3, flops)[0]
    seconds = time.perf_counter() - start
    assert seconds < 2.0, f"{seconds:.2f}s\n{d.report}"
    inner, outer = sub_scopes(best.program)  # A @ (B @ C)
    assert _reads(inner) == {"b", "c"} and _reads(outer) == {"a"}
    assert best.cost == 2 * (1024 * 1024 * 16 + 512 * 1024 * 16)
    assert best.rule_chain == ("inline", "split")
    assert best.verified is None  # 0.5G iteration points: too big for the interpreter check


def test_same_derivation_on_small_shapes_is_checked():
    a, b, c = Tensor("a", (8, 16)), Tensor("b", (16, 16)), Tensor("c", (16, 2))
    best = all_verified(derive(ops.matmul(ops.matmul(a, b), c)))[0]
    assert _reads(sub_scopes(best.program)[0]) == {"b", "c"}


def test_sum_moves_inward_past_independent_factors():
    x, w = Tensor("x", (100,)), Tensor("w", (50,))
    i, j = Iter("i", 0, 100), Iter("j", 0, 50)
    e = Scope((j,), (i,), x[i.symbol] * w[j.symbol])  # sum[i] x[i]*w[j]
    best = all_verified(derive(e))[0]
    inner, outer = sub_scopes(best.program)  # w[j] * (sum[i] x[i])
    assert inner.traversal == () and _reads(inner) == {"x"} and _reads(outer) == {"w"}
    assert best.cost == 100 + 50


DIMS = (8, 512, 4, 256, 2)  # optimum: m0 (m1 (m2 m3)), 14336 multiply-adds


def test_four_operand_einsum_gets_the_flop_optimal_order():
    start = time.perf_counter()
    d = derive(chain(DIMS))
    best = all_verified(d, k=3)[0]
    assert time.perf_counter() - start < 2.0
    assert best.cost == 2 * chain_optimum(DIMS) == 2 * 14336
    first, second, third = sub_scopes(best.program)
    assert _reads(first) == {"m2", "m3"} and _reads(second) == {"m1"} and _reads(third) == {"m0"}


def test_four_operand_nested_matmuls_get_the_flop_optimal_order():
    m = [Tensor(f"m{q}", (DIMS[q], DIMS[q + 1])) for q in range(4)]
    e = ops.matmul(ops.matmul(ops.matmul(m[0], m[1]), m[2]), m[3])  # ((m0 m1) m2) m3
    best = all_verified(derive(e), k=3)[0]
    assert best.cost == 2 * chain_optimum(DIMS)


def test_longer_chains_stay_optimal():
    for dims in [(64, 8, 256, 4, 128, 2, 64), (10, 30, 5, 60, 4, 50, 8, 20)]:
        d = derive(chain(dims))
        assert d.candidates(1, flops)[0].cost == 2 * chain_optimum(dims), d.report


def test_candidates_are_distinct_ranked_and_include_the_original():
    e = ops.matmul(ops.matmul(Tensor("a", (6, 5)), Tensor("b", (5, 7))), Tensor("c", (7, 3)))
    d = derive(e)
    cands = all_verified(d, k=3)
    assert len({fingerprint(c.program) for c in cands}) == len(cands) == 3
    assert [c.cost for c in cands] == sorted(c.cost for c in cands)
    assert any(c.program is e and c.rule_chain == () for c in cands)
    for c in cands:
        assert c.cost == program_flops(c.program)
    # k=1 returns the best, and the original as well when it is not the best
    one = d.candidates(1, flops)
    assert len(one) == 2 and one[-1].program is e


def test_a_candidate_that_fails_the_check_is_discarded_and_reported(monkeypatch):
    e = ops.matmul(ops.matmul(Tensor("a", (6, 5)), Tensor("b", (5, 7))), Tensor("c", (7, 3)))
    d = derive(e)
    monkeypatch.setattr(extract, "_verify", lambda a, b, limit=None: (False, "forced failure", 0))
    cands = d.candidates(3, flops)
    assert [c.program for c in cands] == [e]
    assert d.rejected and all(why == "forced failure" for _, why in d.rejected)


def test_verify_catches_a_wrong_program():
    a, b = Tensor("a", (3, 4)), Tensor("b", (4, 5))
    i, j, k = Iter("i", 0, 3), Iter("j", 0, 5), Iter("k", 0, 4)
    right = Scope((i, j), (k,), a[i.symbol, k.symbol] * b[k.symbol, j.symbol])
    wrong = Scope((i, j), (k,), a[i.symbol, k.symbol] * b[k.symbol, 0])
    assert extract._verify(right, right)[0] is True
    ok, why, _ = extract._verify(right, wrong)
    assert ok is False and why


def test_checks_that_would_outlast_the_budget_are_cut_to_the_floor():
    d = derive(chain((3, 4, 5, 6)), Budget(seconds=2))
    d.deadline = time.perf_counter() - 1.0  # the budget is spent: only small checks run
    assert d._within_budget(1 << 30) == extract.VERIFY_FLOOR
    assert d._within_budget(1000) == 1000


def test_report_counts_classes_after_extraction():
    d = derive(chain((3, 4, 5, 6)), Budget(seconds=2))
    d.candidates(2, flops)
    assert d.report.classes and d.report.nodes >= d.report.classes
    assert "e-nodes" in str(d.report)


def test_a_malformed_decode_is_rejected_and_the_other_candidates_stay():
    """A backward graph's region (the gradient of tanh's square through a product) where a
    rule moves a broadcast constant read as ``div[k,j]`` out of the sum over ``k``: that
    decode reads an unbound iterator. It is rejected as invalid, and extraction still hands
    back the valid candidates (before: a KeyError failed the whole region)."""
    from ir.check import check
    text = """
    expand[i,j] = in1[] where i in 0:256, j in 0:512
    div[i,j] = expand[i,j] / 131072
    pow[i,j] = pow(in2[i,j], 1)
    mul[i,j] = pow[i,j] * 2
    T0[i,j] = div[i,j] * mul[i,j]
    T1[i,j] = in2[i,j] * in2[i,j]
    sub[i,j] = 1 - T1[i,j]
    T2[i,j] = T0[i,j] * sub[i,j]
    mm[i,j] = sum[k] in0[i,k] * T2[k,j]
    """
    expr = ir.parse(text, tensors={"in0": (512, 256), "in1": (), "in2": (256, 512)})
    derivation = derive(inline_views(expr), Budget(nodes=20_000, seconds=2.0))
    candidates = derivation.candidates(4, ir.analysis.analytic_cost, verify_limit=1 << 22)
    assert any(c.rule_chain for c in candidates)
    for c in candidates:
        check(c.program)
    assert all("unbound iterator" in why for _, why in derivation.rejected
               if why.startswith("invalid program"))
