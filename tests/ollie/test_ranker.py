"""The candidate ranker: features of the lowering's ATen calls, the shipped model, selection."""
import math
from types import SimpleNamespace

import numpy as np
import pytest

from ir import Tensor, ops
from ollie.cli.torch_text import build
from ollie.cost import lowered, measure, ranking
from ollie.cost.ranker import (
    MEASURE_TOP, RANK_DATASET, RANK_MODEL, Ranker, UNSURE, fit_rooflines, roofline_log_seconds,
    select, training_rows,
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


def _row_dots(k: int):
    """A row-wise dot product ``sum[j] a[i,j] * b[j,i]`` that the lowering runs as a batched
    matmul of 1 x k x 1 matrices, ``b``'s column read with a stride."""
    import ir
    return ir.parse(f"in0: f32[64, {k}]\nin1: f32[{k}, 64]\n"
                    "out[i] = sum[j] in0[i,j] * in1[j,i]")


def test_a_strided_matrix_operand_is_seen_where_blas_would_pack_it():
    wide = _row_dots(512)
    calls = [c for c in lowered.trace_calls(wide) if c[0] in lowered.MATMUL]
    assert [str(c[0]) for c in calls] == ["aten.bmm.default"]
    assert any(lowered._strided_operand(t) for t in calls[0][1])
    assert feature(wide, "log_strided_matrices") == pytest.approx(math.log2(1 + 64))
    assert feature(wide, "log_tiny_bmm_flops") == 0
    mm = ops.matmul(Tensor("a", (64, 32)), Tensor("b", (32, 64)))
    assert feature(mm, "log_strided_matrices") == 0


def test_a_tiny_batched_matmul_is_torchs_in_place_loop_not_blas():
    narrow = _row_dots(96)  # 1 x 96 x 1 < lowered.TINY_BMM: torch loops, no packing
    assert feature(narrow, "log_tiny_bmm_flops") == pytest.approx(math.log2(1 + 2 * 64 * 96))
    assert feature(narrow, "log_strided_matrices") == 0
    assert feature(narrow, "log_small_matmul_flops") == 0


def test_one_by_one_convolutions_are_counted_apart():
    both = build("F.conv2d(x, w) + F.conv2d(x, v, padding=1)",
                 {"x": (2, 8, 6, 6), "w": (4, 8, 1, 1), "v": (4, 8, 3, 3)})
    assert feature(both, "conv_calls") == 2
    assert feature(both, "pointwise_convs") == 1


def test_each_thread_count_has_its_own_roofline():
    # a per-call cost that only two threads pay (oneDNN's 1x1 convolutions on this CPU)
    rng = np.random.default_rng(0)
    X = np.zeros((80, len(lowered.NAMES)))
    X[:, lowered.column("threads")] = np.repeat([1, 2], 40)
    X[:, lowered.column("kernels")] = rng.integers(1, 5, 80)
    X[:, lowered.column("pointwise_convs")] = rng.integers(0, 3, 80)
    seconds = 1e-5 * X[:, lowered.column("kernels")] + np.where(
        X[:, lowered.column("threads")] == 2, 1e-4 * X[:, lowered.column("pointwise_convs")], 0)
    rooflines = fit_rooflines(X, np.log(seconds))
    assert set(rooflines) == {"1", "2"}
    assert rooflines["2"]["pointwise_conv_s"] > 30 * rooflines["1"]["pointwise_conv_s"]
    assert np.allclose(np.exp(roofline_log_seconds(X, rooflines)), seconds, rtol=0.05)
    four = X[40:].copy()  # a count never trained on takes the nearest count's rates
    four[:, lowered.column("threads")] = 4
    assert np.allclose(roofline_log_seconds(four, rooflines), roofline_log_seconds(X[40:], rooflines))


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
    # a wider measurement budget (``Options.measure_top``) measures further down the order
    wider = [c.program for c in select("orig", cands, FakeRanker(times), top=3).to_measure]
    assert wider == ["b", "d", "c", "f"]
    assert [c.program for c in select("orig", cands, FakeRanker(times), top=1).to_measure] \
        == ["b", "d", "f"]  # "d" within UNSURE of "b": close estimates do not decide
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
