"""A decision measured within noise is measured again, once, by ``ollie tune``; a clear one is
left alone. (``ollie.cost.remeasure``, which ``tune`` calls after retraining.)"""
import pytest

import ir
from ir import Tensor, ops
from ollie.cache import Cache

A, B, C = Tensor("a", (64, 128)), Tensor("b", (128, 128)), Tensor("c", (128, 4))
ORIGINAL = ops.matmul(ops.matmul(A, B), C)         # (a @ b) @ c
DERIVED = ops.matmul(A, ops.matmul(B, C))          # a @ (b @ c): 20x fewer flops


def entry(decision: str, **fields) -> dict:
    return {"original": ir.to_text(ORIGINAL, declarations=True),
            "program": ir.to_text(DERIVED, declarations=True), "rule_chain": ["split"],
            "cost_before": 2.0, "cost_after": 1.0, "eager_s": 1e-3, "ollie_s": 0.97e-3,
            "error": 0.0, "decision": decision, "backend": "torch", "speedup": 1.03,
            "spread": 0.05, **fields}


@pytest.fixture
def decisions():
    from ollie.decision import Outcome
    return Outcome.ADOPTED.value, Outcome.NOT_FASTER.value


def test_a_noisy_decision_is_measured_again_once_and_a_clear_one_is_kept(tmp_path, decisions):
    from ollie.cost.remeasure import remeasure_noisy
    adopted, not_faster = decisions
    cache = Cache(tmp_path)
    cache.put("noisy", entry(not_faster))                        # 1.03x, +-5%: a coin toss
    cache.put("clear", entry(adopted, speedup=3.0, spread=0.02))
    cache.put("gone", entry(not_faster, original=None))          # nothing to measure here
    clear_before = cache.get("clear")

    done = remeasure_noisy(tmp_path, budget_s=0.3)
    assert done["remeasured"] == 1 and done["dropped"] == 1
    again = cache.get("noisy")
    assert again["remeasured"] == 1 and again["speedup"] != 1.03 and again["spread"] >= 0
    assert (again["decision"] == adopted) == (again["speedup"] > 1 / 0.95)  # the same rule
    assert cache.get("clear") == clear_before and cache.get("gone") is None

    assert remeasure_noisy(tmp_path, budget_s=0.3) == {"remeasured": 0, "flipped": 0,
                                                        "dropped": 0}  # once, not every run


def test_tune_reports_the_decisions_it_measured_again(tmp_path, decisions, monkeypatch):
    from ollie.cost import tune
    monkeypatch.setattr(tune, "generate", lambda *a, **k: [])  # no new cases: just retrain
    Cache(tmp_path).put("noisy", entry(decisions[1]))
    report = tune.tune(n_cases=1, cache_dir=tmp_path, seed=0)
    assert report["remeasured"] == 1
    assert Cache(tmp_path).get("noisy")["remeasured"] == 1
