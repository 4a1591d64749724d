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


class _Clock:
    """A clock that only the timed calls advance: ``compare``'s stopping rules, without the
    load of the machine that runs the tests."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now

    def call(self, seconds):
        """A callable that takes ``seconds`` a call, or ``seconds(k)`` at its k-th call."""
        count = [0]

        def fn():
            count[0] += 1
            self.now += seconds(count[0]) if callable(seconds) else seconds
        return fn


def test_compare_stops_early_only_when_the_decision_is_clear(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(measure, "time", clock)
    clear = measure.compare(clock.call(4e-3), clock.call(5e-4), budget_s=1.0, min_rounds=5)
    assert clear.rounds == 3 and clear.speedup == pytest.approx(8)
    capped = measure.compare(clock.call(0.06), clock.call(0.06), budget_s=0.05, min_rounds=5)
    assert capped.rounds == 2  # two rounds at least, then twice the budget is the limit
    close = measure.compare(clock.call(4e-3), clock.call(4e-3), budget_s=0.2, min_rounds=5)
    assert close.rounds > 5 and close.speedup == pytest.approx(1)  # a tie takes the budget
    # 1.5x apart in every round: settled after SETTLED_ROUNDS, long before the budget ends
    apart = measure.compare(clock.call(3e-3), clock.call(2e-3), budget_s=5.0, min_rounds=20)
    assert apart.rounds == measure.SETTLED_ROUNDS and apart.speedup == pytest.approx(1.5)


def test_one_disturbed_round_delays_settling_and_does_not_cancel_it(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(measure, "time", clock)
    calls_a_round = int(measure.BLOCK_S / 2e-3)  # the faster side's block
    # The faster side's second round meets a load that makes it as slow as the other.
    disturbed = clock.call(lambda k: 3e-3 if calls_a_round + 2 < k <= 2 * calls_a_round + 2
                           else 2e-3)
    apart = measure.compare(clock.call(3e-3), disturbed, budget_s=5.0, min_rounds=20)
    assert apart.rounds == measure.SETTLED_ROUNDS + 2
