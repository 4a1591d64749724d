"""The candidate ranker: features of the lowering's ATen calls, the shipped model, selection."""
import math
from types import SimpleNamespace

import numpy as np
import pytest

from ir import Tensor, ops
from ollie.cli.torch_text import build
from ollie.cost import lowered, measure, ranking
from ollie.cost.ranker import (
    MEASURE_TOP, RANK_DATASET, RANK_MODEL, Ranker, UNSURE, select, training_rows,
)


def feature(program, name, threads=2):
    return lowered.program_features(program, threads)[lowered.column(name)]


def test_features_count_the_calls_the_lowering_makes():
    bmm = build("torch.einsum('bij,bjk->bik', a, b)", {"a": (6, 8, 16), "b": (6, 16, 4)})
    assert feature(bmm, "matmul_calls") == 1
    assert feature(bmm, "log_matmul_matrices") == pytest.approx(math.log2(1 + 6))
    assert feature(bmm, "log_matmul_flops") == pytest.approx(math.log2(1 + 2 * 6 * 8 * 4 * 16))
    chain = build("torch.tanh(x * y + 1).exp()", {"x": (32, 8), "y": (32, 8)})
    assert feature(chain, "matmul_calls") == 0
    assert feature(chain, "pointwise_calls") >= 3  # eager: one kernel per operator
    assert feature(chain, "threads", threads=1) == 1


def test_a_strided_matrix_operand_is_seen():
    # einsum("ik,ki->i") as a batched matmul reads b's column with stride: slow in BLAS
    rows = build("torch.einsum('ik,ki->i', a, b)", {"a": (64, 32), "b": (32, 64)})
    calls = [c for c in lowered.trace_calls(rows) if c[0] in lowered.MATMUL]
    strided = feature(rows, "log_strided_matrices")
    assert (strided > 0) == any(lowered._strided_operand(t) for _, ins, *_ in calls for t in ins)
    mm = ops.matmul(Tensor("a", (64, 32)), Tensor("b", (32, 64)))
    assert feature(mm, "log_strided_matrices") == 0


@pytest.fixture(scope="module")
def shipped():
    return Ranker.load_file(RANK_MODEL)


def test_shipped_ranker_knows_its_provenance_and_is_small(shipped):
    assert RANK_MODEL.stat().st_size < 1 << 20 and RANK_DATASET.stat().st_size < 1 << 20
    assert shipped.meta["threads"] == [1, 2] and shipped.meta["records"] > 1000
    assert "torch" in shipped.meta["versions"]


def test_held_out_cases_never_train():
    records = measure.load_records(RANK_DATASET)
    held = [r for r in records if r.get("held_out")]
    assert {r["group"] for r in held} == {c.name for c in ranking.CASES if c.held_out}
    X, y, ops = training_rows(held[:20])
    assert len(y) == 0


def test_shipped_ranker_ranks_held_out_cases_better_than_extraction_cost(shipped):
    from ollie.cost.learned import LearnedCost
    records = [r for r in measure.load_records(RANK_DATASET) if r.get("held_out")]
    by_ranker = ranking.score(records, ranking.ranker_estimate(shipped))
    by_extraction = ranking.score(records, ranking.extraction_estimate(
        LearnedCost.load_default()))
    regret = lambda scores: np.exp(np.mean([np.log(s.regret) for s in scores]))  # noqa: E731
    assert regret(by_ranker) < regret(by_extraction)
    assert np.mean([s.spearman for s in by_ranker]) > np.mean([s.spearman
                                                                for s in by_extraction])


class FakeRanker:
    def __init__(self, times):
        self.times = times

    def familiar(self, program, fused=False):
        return True

    def seconds(self, programs, threads=None, fused=False):
        return np.asarray([self.times[p] for p in programs], dtype=float)


def test_select_measures_the_top_two_and_close_estimates_only():
    cands = [SimpleNamespace(program=name) for name in "abcdef"]
    times = {"orig": 10.0, "a": 4.0, "b": 1.0, "c": 1.1 * UNSURE, "d": 1.2,
             "e": 9.9, "f": math.nan}
    sel = select("orig", cands, FakeRanker(times))
    picked = [c.program for c in sel.to_measure]
    assert picked[:MEASURE_TOP] == ["b", "d"]   # best first
    assert "a" not in picked and "c" not in picked  # estimated clearly slower than "b"
    assert "e" not in picked                      # no gain over the original
    assert picked[-1] == "f"                      # unpriced: measured
    assert sel.skipped == len(cands) - len(picked)
    # where the ranker sees no gain at all, extraction's own estimate still gets one measured
    slow = {name: 20.0 + k for k, name in enumerate("abcdef")} | {"orig": 10.0}
    assert select("orig", cands, FakeRanker(slow)).to_measure == []
    sel = select("orig", cands, FakeRanker(slow), gain=lambda c: c.program in "ef")
    assert [c.program for c in sel.to_measure] == ["e", "f"]
    # without a ranker: what extraction's estimate accepts, in its order
    sel = select("orig", cands, None, gain=lambda c: c.program in "ace")
    assert [c.program for c in sel.to_measure] == ["a", "c", "e"]


def test_train_save_load_round_trip_and_damage(tmp_path):
    records = [r for r in measure.load_records(RANK_DATASET) if not r.get("held_out")][:60]
    model = Ranker.train(records, rounds=10)
    path = model.save(tmp_path / "r.txt")
    again = Ranker.load_file(path)
    program = build("a @ b", {"a": (16, 8), "b": (8, 4)})
    assert again.seconds([program], 1)[0] == pytest.approx(model.seconds([program], 1)[0])
    path.write_text(path.read_text().replace("tree", "tref", 1))
    with pytest.raises(ValueError, match="checksum"):
        Ranker.load_file(path)


def test_a_candidate_calling_operators_never_trained_on_is_unfamiliar():
    chains = [r for r in measure.load_records(RANK_DATASET)
              if r["group"].startswith("chain_thin_last")]
    model = Ranker.train(chains, rounds=5)
    assert model.familiar(build("a @ b", {"a": (16, 8), "b": (8, 4)}))
    conv = build("F.conv2d(x, w)", {"x": (1, 4, 8, 8), "w": (2, 4, 3, 3)})
    assert not model.familiar(conv)
    # select measures an unfamiliar candidate whatever its estimate
    cands = [SimpleNamespace(program=conv)]
    assert select(build("a @ b", {"a": (16, 8), "b": (8, 4)}), cands, model).to_measure == cands
