"""The learned cost model: the shipped model, training, scope costs, held-out ranking."""
import numpy as np
import pytest

from ir import Tensor, analysis, ops, sub_scopes
from ollie.cost import learned as learned_cost
from ollie.cost import measure
from ollie.cost.learned import DEFAULT_DATASET, DEFAULT_MODEL, LearnedCost, held_out_spearman


@pytest.fixture(scope="module")
def model():
    return LearnedCost.load_default()


@pytest.fixture(scope="module")
def records():
    return measure.load_records(DEFAULT_DATASET)


def mm(m, k, n):
    return ops.matmul(Tensor("a", (m, k)), Tensor("b", (k, n)))


def test_shipped_files_are_small():
    assert DEFAULT_MODEL.stat().st_size < 1 << 20
    assert DEFAULT_DATASET.stat().st_size < 1 << 20


def test_predictions_are_finite_and_positive(model):
    programs = [mm(64, 64, 64), ops.softmax(Tensor("x", (32, 100)), dim=1),
                ops.conv2d(Tensor("x", (1, 3, 32, 32)), Tensor("w", (8, 3, 3, 3))),
                ops.relu(Tensor("x", (1000,))), ops.sum(Tensor("x", (10, 10)), 0)]
    seconds = model.predict_many(programs)
    assert np.isfinite(seconds).all() and (seconds > 0).all()
    assert model.predict(programs[0]) == pytest.approx(seconds[0])


def test_big_matmul_is_slower_than_small(model):
    assert model.predict(mm(1024, 1024, 1024)) > 10 * model.predict(mm(32, 32, 32))
    assert model.scope_cost(mm(512, 512, 512)) > model.scope_cost(mm(16, 512, 16))


def test_scope_cost_is_an_extraction_cost(model):
    chain = ops.matmul(ops.matmul(Tensor("a", (512, 1024)), Tensor("b", (1024, 1024))),
                       Tensor("c", (1024, 16)))
    better = ops.matmul(Tensor("a", (512, 1024)),
                        ops.matmul(Tensor("b", (1024, 1024)), Tensor("c", (1024, 16))))
    total = analysis.program_cost(chain, model)
    assert total == pytest.approx(sum(model(s) for s in sub_scopes(chain)))
    assert analysis.program_cost(better, model) < total


def test_train_save_and_load(tmp_path, records):
    small = records[::4]
    trained = LearnedCost.train(small, rounds=40)
    path = trained.save(tmp_path / "model.txt")
    loaded = LearnedCost.load(path)
    x = mm(100, 200, 300)
    assert loaded.predict(x) == pytest.approx(trained.predict(x))
    assert loaded.meta["records"] == len([r for r in small if r.get("min", 0) > 0])


def test_load_prefers_a_tuned_model_and_survives_a_damaged_one(tmp_path, records):
    tuned = LearnedCost.train(records[::8], rounds=10)
    tuned.save(tmp_path / learned_cost.TUNED_MODEL)
    assert LearnedCost.load(cache_dir=tmp_path).booster.num_trees() == 10
    (tmp_path / learned_cost.TUNED_MODEL).write_text("garbage")
    assert LearnedCost.load(cache_dir=tmp_path).booster.num_trees() > 10  # the default


def test_spearman_matches_numpy_average_ranks():
    a, b = [1, 2, 2, 5, 9], [0.1, 0.4, 0.3, 0.2, 0.9]
    np.testing.assert_allclose(learned_cost.spearman(a, b),
                               np.corrcoef(learned_cost._ranks(np.array(a, float)),
                                           learned_cost._ranks(np.array(b, float)))[0, 1])


@pytest.mark.parametrize("family", ["conv", "matmul"])
def test_held_out_family_is_ranked(records, family):
    """Trained without a whole family of operators, the model still ranks its programs."""
    rho, n = held_out_spearman(records, family, rounds=150)
    assert n >= 20 and rho >= 0.8, f"held-out {family}: spearman {rho:.3f} over {n}"


def test_extraction_with_the_learned_cost_reassociates_a_chain(model):
    derivations = pytest.importorskip("derivations")
    a, b, c = Tensor("a", (512, 1024)), Tensor("b", (1024, 1024)), Tensor("c", (1024, 16))
    found = derivations.derive(ops.matmul(ops.matmul(a, b), c),
                               derivations.Budget(nodes=5000, seconds=1.0)).candidates(3, model)
    best = min(found, key=lambda cand: cand.cost)
    assert [s.shape for s in sub_scopes(best.program)] == [(1024, 16), (512, 16)]


def test_tune_measures_and_saves_a_model_the_loader_finds(tmp_path):
    from ollie.cost import tune
    report = tune.tune(n_cases=3, cache_dir=tmp_path, seed=1, derived=0)
    assert report["measured"] >= 3 and (tmp_path / learned_cost.TUNED_MODEL).exists()
    assert len(measure.load_records(tmp_path / "measurements.jsonl")) == report["measured"]
    assert LearnedCost.load(cache_dir=tmp_path).meta["device"] == report["device"]
    from ollie.cost.ranker import TUNED_RANKER, Ranker
    assert Ranker.load(tmp_path).meta["device"] == report["device"]
    assert (tmp_path / TUNED_RANKER).exists()
