"""The index pass in the schedule: egglog text unions, provenance, firings, budgets, guidance."""
from __future__ import annotations

import dataclasses
import time

import pytest

from egglog import EGraph

from ir import Tensor, analytic_cost, flops, ops

from derivations import Budget, derive
from derivations.encode import encode
from derivations.guided import Guide, operators
from derivations.index_pass import IndexPass, declare, egg_names
from derivations.send import Sender
from derivations.lang import Iterator, Root
from derivations.rules.index import DEFAULT, EXPLORATIVE, SUBSTITUTE
from derivations.schedule import egraph_size
from derivations.term import to_egglog
from derivation_helpers import all_verified


def _conv():
    return ops.conv2d(Tensor("x", (1, 3, 5, 5)), Tensor("w", (2, 3, 3, 3)), padding=1)


def _conv_t():
    return ops.conv_transpose2d(Tensor("x", (1, 2, 2, 2)), Tensor("w", (2, 3, 4, 4)), stride=2,
                                padding=1)


def test_the_commands_of_a_term_build_the_term_python_registers():
    term, enc = encode(ops.matmul(ops.matmul(Tensor("a", (2, 3)), Tensor("b", (3, 4))),
                                  Tensor("c", (4, 5))))
    egraph = EGraph()
    egraph.register(*(Iterator(n) for n in enc.iters))
    egraph.register(Root(to_egglog(term)))
    declare(egraph)
    before = egraph_size(egraph)[0]
    sender = Sender(egg_names(egraph))
    sender.union(term, term)
    commands, slotted = sender.take()
    egraph._state.egraph.run_program(*commands)
    assert egraph_size(egraph)[0] == before  # hash-consed onto the registered nodes
    assert sender.slots.keys() == set(slotted)
    assert sorted(t.op for t in slotted).count("sum") == 2  # its two scopes (and factors)


def test_a_scope_sent_once_is_named_by_its_slot_later():
    """A wide scope's results repeat its sub-scopes: each is spelled once, then named by
    its slot, so a union costs its new nodes (egglog's cost per node is high)."""
    pieces = [ops.tanh(Tensor(f"x{i}", (16,))) for i in range(8)]
    wide = ops.cat(pieces)
    term, enc = encode(wide)
    egraph = EGraph()
    egraph.register(*(Iterator(n) for n in enc.iters))
    egraph.register(Root(to_egglog(term)))
    declare(egraph)
    sender = Sender(egg_names(egraph))
    sender.union(term, term)
    first, slotted = sender.take()
    egraph._state.egraph.run_program(*first)
    sender.new_pass()
    sender.union(term, term)
    again, _ = sender.take()
    assert len(slotted) >= len(pieces) + 1 and len(again) == 1
    assert str(again[0]).count("slot_scope") == 2 and "tanh" not in str(again[0])
    egraph._state.egraph.run_program(*again)


def test_index_rules_fire_in_the_egraph_and_name_themselves_in_rule_chains():
    d = derive(_conv())
    assert d.report.firings.get("substitute", 0) >= 1 and d.report.index_seconds > 0
    assert "substitute" in d.report.rulesets and "substitute=" in str(d.report)
    cands = all_verified(d, k=4)
    mm = [c for c in cands if c.operators == ("matmul", "eoperator")]
    assert mm and mm[0].rule_chain == ("substitute",)
    assert all(c.operators == operators(c.program) for c in cands)
    assert next(c for c in cands if not c.rule_chain).operators == ("conv",)


def test_chains_of_index_rules_are_recorded_in_order():
    cands = all_verified(derive(_conv_t()), k=6)
    chains = {c.rule_chain for c in cands if c.operators == ("matmul", "eoperator")}
    assert ("inline_read", "substitute") in chains


def test_the_pass_converges_the_guided_runs_saturate():
    for e in (_conv(), _conv_t()):
        d = derive(e)
        assert d.report.stop == "saturated" and not d.report.errors, d.report


def test_node_budget_holds_with_index_rules():
    for limit in (12, 30):
        d = derive(_conv_t(), Budget(nodes=limit), index_rules=EXPLORATIVE, guide=None)
        assert d.report.stop == "nodes" and d.report.nodes <= limit, d.report
        assert d.candidates(2, flops) and d.rejected == []


def test_time_budget_holds_with_index_rules():
    start = time.perf_counter()
    d = derive(_conv_t(), Budget(seconds=1.0, nodes=10**7), index_rules=EXPLORATIVE, guide=None)
    elapsed = time.perf_counter() - start
    assert d.report.stop == "seconds", d.report
    assert elapsed < 1.0 + 4.0, (elapsed, d.report)  # up to one iteration over
    assert d.candidates(2, analytic_cost) and d.rejected == []


def test_a_run_with_only_index_rules_works():
    d = derive(_conv(), rulesets=(), index_rules=(SUBSTITUTE,))
    assert d.report.rulesets == ("substitute",) and d.report.stop == "saturated"
    assert any(c.rule_chain == ("substitute",) for c in all_verified(d))


def test_guide_keeps_only_results_that_instantiate_operators():
    e = _conv()
    results = list(SUBSTITUTE.apply(e))
    kept = Guide(DEFAULT)(SUBSTITUTE, e, results)
    assert 1 <= len(kept) < len(results)
    for k in kept:
        assert "matmul" in operators(k)


def test_the_guide_reads_a_rules_kind_from_its_row_not_its_name():
    e = _conv()
    results = list(SUBSTITUTE.apply(e))
    assert SUBSTITUTE.kind == "steered"
    as_canonical = dataclasses.replace(SUBSTITUTE, kind="canonical")
    assert Guide(DEFAULT)(as_canonical, e, results) == results  # canonical forms: all kept
    assert len(Guide(DEFAULT)(SUBSTITUTE, e, results)) < len(results)
    with pytest.raises(AssertionError, match="unknown kind"):
        dataclasses.replace(SUBSTITUTE, kind="sometimes")


def test_the_default_layout_rules_are_the_rows_marked_default():
    from derivations.rules.densify import DEFAULT_INDEX_RULES, INDEX_RULES
    assert DEFAULT_INDEX_RULES == tuple(r for r in INDEX_RULES if r.default)
    assert {r.name for r in INDEX_RULES if not r.default} == {"layout_permute"}


def test_unguided_exploration_finds_more_forms_than_guided():
    guided = derive(_conv())
    free = derive(_conv(), index_rules=DEFAULT, guide=None)
    assert free.report.nodes > guided.report.nodes


def test_index_pass_can_be_driven_directly():
    term, enc = encode(_conv())
    egraph = EGraph()
    egraph.register(*(Iterator(n) for n in enc.iters))
    egraph.register(Root(to_egglog(term)))
    index = IndexPass(enc, (SUBSTITUTE,))
    passed = index.run(egraph)
    assert passed.unions == passed.firings["substitute"] >= 2 and passed.complete
    size = egraph_size(egraph)[0]
    late = index.run(egraph, deadline=time.perf_counter() - 1)  # past its deadline: no work
    assert late.unions == 0 and not late.complete and egraph_size(egraph)[0] == size
