"""Measurement: medians, the time cap, wrong candidates, and the dataset on disk."""
import time
from types import SimpleNamespace

import pytest
import torch

import codegen
from ir import Tensor, ops
from ollie.cost import measure
from ollie.cost.measure import Measurement, best, measure_candidates


def sleeper(seconds):
    return lambda *args: time.sleep(seconds)


def test_median_of_a_known_duration():
    m = measure.measure(sleeper(0.002), warmup=1, repeat=7, time_cap_s=5)
    assert m.runs == 7 and not m.capped
    assert 0.002 <= m.min <= m.median < 0.02 and m.iqr >= 0
    assert m.device.startswith("cpu:") and m.versions["torch"] == torch.__version__


def test_time_cap_stops_a_slow_candidate():
    t0 = time.perf_counter()
    m = measure.measure(sleeper(0.03), warmup=1, repeat=100, time_cap_s=0.1, min_runs=2)
    assert m.capped and 2 <= m.runs < 10
    assert time.perf_counter() - t0 < 1.0


def test_one_run_when_a_single_run_exceeds_the_cap():
    m = measure.measure(sleeper(0.05), warmup=0, repeat=10, time_cap_s=0.01)
    assert m.runs == 1 and m.capped


def test_wrong_candidate_is_never_chosen():
    a, b = torch.randn(32, 16), torch.randn(16, 8)
    right = lambda x, y: x @ y                  # noqa: E731
    wrong_but_fast = lambda x, y: (x @ y) * 1.01  # noqa: E731
    broken = lambda x, y: x @ x                 # noqa: E731 - raises: shapes do not match
    results = measure_candidates([wrong_but_fast, broken, right], (a, b), a @ b, cap=0.05)
    assert [r.ok for r in results] == [False, False, True]
    assert "mismatch" in results[0].reason and "raised" in results[1].reason
    assert results[0].measurement is None and results[0].error > 1e-3
    assert best(results).candidate is right


def test_no_correct_candidate_means_none():
    a = torch.randn(4, 4)
    results = measure_candidates([lambda x: x + 1], (a,), a, cap=0.05)
    assert best(results) is None


def test_ir_candidates_are_lowered_checked_and_recorded(tmp_path):
    a, b, c = Tensor("a", (16, 32)), Tensor("b", (32, 32)), Tensor("c", (32, 4))
    left = ops.matmul(ops.matmul(a, b), c)
    right = ops.matmul(a, ops.matmul(b, c))
    not_equal = ops.matmul(ops.matmul(a, b), ops.relu(c))
    tensors = {n: torch.randn(*t.shape) for n, t in (("a", a), ("b", b), ("c", c))}
    reference = codegen.lower(left)(**tensors)
    cands = [SimpleNamespace(program=p) for p in (left, right, not_equal)]
    path = tmp_path / "measurements.jsonl"
    results = measure_candidates(cands, tensors, reference, cap=0.05, record=True, dataset=path,
                                 labels={"family": "matmul"})
    assert [r.ok for r in results] == [True, True, False]
    records = measure.load_records(path)
    assert len(records) == 2 and {r["family"] for r in records} == {"matmul"}
    assert all(r["seconds"] > 0 and r["device"] and r["versions"] and r["features"]
               for r in records)


def test_dataset_skips_torn_lines(tmp_path):
    path = tmp_path / "m.jsonl"
    m = Measurement(1e-3, 9e-4, 1e-4, 5, "cpu:test")
    measure.append_record({"seconds": m.median, "device": m.device}, path)
    with open(path, "a") as f:
        f.write('{"seconds": 0.1, "dev')  # a writer killed mid-line
    measure.append_record({"seconds": 2e-3, "device": "cpu:other"}, path)
    assert len(measure.load_records(path)) == 2
    assert len(measure.load_records(path, device="cpu:test")) == 1


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_events_time_a_cuda_matmul():
    a = torch.randn(1024, 1024, device="cuda")
    m = measure.measure(torch.mm, a, a, repeat=10)
    assert m.device.startswith("cuda:") and 0 < m.min <= m.median < 0.1


def test_compare_stops_early_only_when_the_decision_is_clear():
    import time as _time

    from ollie.cost.measure import compare

    slow = lambda: _time.sleep(0.004)  # noqa: E731
    fast = lambda: _time.sleep(0.0005)  # noqa: E731
    clear = compare(slow, fast, budget_s=1.0, min_rounds=5)
    assert clear.rounds == 3 and clear.speedup > 2
    very_slow = lambda: _time.sleep(0.06)  # noqa: E731
    capped = compare(very_slow, very_slow, budget_s=0.05, min_rounds=5)
    assert capped.rounds == 2  # two rounds at least, then twice the budget is the limit
    close = compare(slow, slow, budget_s=0.2, min_rounds=5)
    assert close.rounds > 5  # a tie is timed for the whole budget
    # 1.5x apart in every round: settled after SETTLED_ROUNDS, long before the budget ends
    apart = compare(lambda: _time.sleep(0.003), lambda: _time.sleep(0.002), budget_s=5.0,
                    min_rounds=20)
    assert apart.rounds == measure.SETTLED_ROUNDS and apart.speedup > measure.SETTLED
