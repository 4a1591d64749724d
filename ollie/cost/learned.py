"""A learned cost: gradient-boosted trees (LightGBM) predicting log(seconds) from features.

The model reads ``ollie.cost.features.program_features`` and predicts the measured time of a
program on one device. It is trained on dataset records (``ollie.cost.measure.make_record``): a
whole program, or one of its scopes alone (its sources as inputs), with the seconds it took.
So the same model prices

- a whole program: ``predict(program)``;
- one scope's own work: ``scope_cost(scope)`` (also ``model(scope)``), the callable extraction
  takes (``ollie.cost``): a program's cost is the sum of its scopes' costs, in seconds.

``LearnedCost.load_default()`` is the model shipped in ``ollie/data`` (trained on CPU
measurements by ``python -m ollie.cost.tune --build-default``); ``LearnedCost.load()`` prefers a
model ``ollie tune`` trained on this machine, kept in the cache folder.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from ir.nodes import Scope, sub_scopes
from ollie.cost import features

DATA_DIR = Path(__file__).parents[1] / "data"
DEFAULT_MODEL = DATA_DIR / "default_model.txt"
DEFAULT_DATASET = DATA_DIR / "default_dataset.jsonl.gz"
TUNED_MODEL = "tuned_model.txt"
MODEL_CAP = 64 << 20  # bytes of a model file read at most (the shipped one is ~0.5 MiB)

# Small trees, many rows per leaf: a few hundred measurements, and kinds unseen in training
# must still land on sensible leaves. Time only grows with work: monotone in flops and bytes.
PARAMS = {
    "objective": "regression", "learning_rate": 0.05, "num_leaves": 15, "max_depth": 6,
    "min_data_in_leaf": 5, "feature_fraction": 0.8, "bagging_fraction": 0.9,
    "bagging_freq": 1, "lambda_l2": 1.0, "verbose": -1, "seed": 0, "num_threads": 1,
    "deterministic": True, "force_row_wise": True,
}
ROUNDS = 300
# The fastest of the timed runs: on a shared machine a median carries other processes' noise.
TARGET = "min"
MONOTONE = ()  # features the correction may only grow with (none: see the baseline)
# The trees learn a correction to a fitted roofline baseline, launch + flops/F + bytes/B:
# trees alone cannot extrapolate past the sizes they were trained on, the baseline can.
BASELINE = {"launch_s": 5e-6, "contraction_flops_per_s": 5e10, "flops_per_s": 5e9,
            "bytes_per_s": 1e10, "gathers_per_s": 1e9}
_COL = {n: k for k, n in enumerate(features.FEATURE_NAMES)}


def model_digest(text: bytes) -> str:
    """The checksum ``save`` writes beside a model and ``load_file`` checks."""
    import hashlib
    return hashlib.sha256(text).hexdigest()


def load_booster(path: str | os.PathLike):
    """(booster, metadata) at ``path``, after its checksum (kept in the ``.json`` beside it)
    matched: LightGBM aborts the whole process on some damaged model files, so it only ever
    sees the exact text ``save_booster`` wrote. ``ValueError`` for a damaged or foreign one."""
    from ollie import safe_files
    path = Path(path)
    try:
        text = safe_files.read_regular(path, MODEL_CAP)
        meta = safe_files.loads_bounded(
            safe_files.read_regular(path.with_suffix(".json"), MODEL_CAP))
    except OSError as e:
        raise ValueError(f"{path}: cannot read the model or its metadata ({e})") from None
    if not isinstance(meta, dict) or meta.get("model_sha256") != model_digest(text):
        raise ValueError(f"{path}: the model does not match the checksum saved with it "
                         "(damaged or written by something else); retrain with `ollie tune`")
    import lightgbm as lgb
    return lgb.Booster(model_str=text.decode("utf-8")), meta


def save_booster(booster, meta: dict, path: str | os.PathLike, **extra_meta) -> Path:
    """LightGBM text at ``path`` and ``meta`` beside it (``.json``, with the text's sha256),
    each written atomically; the metadata goes last, so a model replaced half-way (a killed
    ``ollie tune``) fails its checksum instead of loading."""
    from ollie.cache import atomic_write
    from ollie import safe_files
    path = Path(path)
    safe_files.make_private_dir(path.parent)
    text = booster.model_to_string().encode()
    meta.update(extra_meta, model_sha256=model_digest(text))
    atomic_write(path, text, mode=0o644)
    atomic_write(path.with_suffix(".json"),
                 json.dumps(meta, indent=1, sort_keys=True).encode(), mode=0o644)
    return path


def load_tuned_or_default(load_file, tuned_name: str, default: Path, cache_dir=None):
    """``load_file`` of the model ``ollie tune`` left in the cache folder under ``tuned_name``,
    if the folder is usable and the model loads; else of the shipped ``default``."""
    from ollie.cache import Cache
    cache = Cache(cache_dir)
    tuned = cache.dir / tuned_name
    if tuned.exists() and cache.usable:
        try:
            return load_file(tuned)
        except Exception:  # a damaged or stale tuned model: the shipped one
            pass
    return load_file(default)


def record_features(record: dict) -> np.ndarray | None:
    """A record's feature vector; recomputed from its program text if features changed."""
    if record.get("feature_version") == features.FEATURE_VERSION and \
            len(record.get("features", ())) == len(features.FEATURE_NAMES):
        return np.asarray(record["features"], dtype=np.float64)
    text = record.get("program")
    if not text:
        return None
    try:
        import ir
        return features.program_features(ir.parse(text))
    except Exception:
        return None


def _matrix(records: Sequence[dict], target: str = TARGET):
    rows, ys, kept = [], [], []
    for r in records:
        x = record_features(r)
        y = r.get(target)
        if x is None or not isinstance(y, (int, float)) or not y > 0:
            continue
        rows.append(x)
        ys.append(math.log(y))
        kept.append(r)
    if not rows:
        return np.zeros((0, len(features.FEATURE_NAMES))), np.zeros(0), kept
    return np.vstack(rows), np.asarray(ys), kept


def baseline_log_seconds(X: np.ndarray, b: dict = BASELINE) -> np.ndarray:
    """log of: launch x scopes + contraction flops / their rate + other flops / theirs +
    bytes / (bytes/s) + gathered elements / (gathers/s), per feature row."""
    X = np.atleast_2d(X)
    flops = np.exp2(X[:, _COL["log_flops"]]) - 1
    cflops = np.exp2(X[:, _COL["contraction_log_flops"]]) - 1
    nbytes = np.exp2(X[:, _COL["log_bytes"]]) - 1
    gathered = np.exp2(X[:, _COL["log_gather_space"]]) - 1
    t = (X[:, _COL["n_scopes"]] * b["launch_s"] + cflops / b["contraction_flops_per_s"]
         + np.maximum(flops - cflops, 0) / b["flops_per_s"] + nbytes / b["bytes_per_s"]
         + gathered / b["gathers_per_s"])
    return np.log(np.maximum(t, 1e-12))


def fit_baseline(X: np.ndarray, y: np.ndarray) -> dict:
    """The baseline's three rates fitted to log-seconds ``y`` (robust least squares)."""
    keys = list(BASELINE)
    x0 = np.log([BASELINE[k] for k in keys])
    try:
        from scipy.optimize import least_squares
    except ImportError:
        return dict(BASELINE)

    def residual(logp):
        return baseline_log_seconds(X, dict(zip(keys, np.exp(logp)))) - y

    fit = least_squares(residual, x0, loss="soft_l1", f_scale=0.5)
    return dict(zip(keys, (float(v) for v in np.exp(fit.x))))


class LearnedCost:
    """``predict(program) -> seconds``; ``scope_cost(scope) -> seconds``; callable as a
    ``ollie.cost.ScopeCost``."""

    def __init__(self, booster, meta: dict | None = None):
        self.booster = booster
        self.meta = dict(meta or {})
        self._scope_memo: dict[Scope, float] = {}

    # -- building ----------------------------------------------------------------------------
    @classmethod
    def train(cls, dataset: "Iterable[dict] | str | os.PathLike", target: str = TARGET,
              rounds: int = ROUNDS, params: dict | None = None) -> "LearnedCost":
        """Fit a model on records (a list, or a JSON-lines file of them)."""
        import lightgbm as lgb
        if isinstance(dataset, (str, os.PathLike)):
            from ollie.cost.measure import load_records
            dataset = load_records(dataset)
        X, y, kept = _matrix(list(dataset), target)
        if len(y) < 4:
            raise ValueError(f"LearnedCost.train: need at least 4 usable records, got {len(y)}")
        p = dict(PARAMS, **(params or {}))
        p["monotone_constraints"] = [1 if n in MONOTONE else 0 for n in features.FEATURE_NAMES]
        p["min_data_in_leaf"] = min(p["min_data_in_leaf"], max(len(y) // 4, 1))
        base = fit_baseline(X, y)
        data = lgb.Dataset(X, y, init_score=baseline_log_seconds(X, base),
                           feature_name=list(features.FEATURE_NAMES),
                           params={"min_data_in_bin": 1, "verbose": -1})
        booster = lgb.train(p, data, num_boost_round=rounds)
        devices = sorted({r.get("device", "?") for r in kept})
        return cls(booster, {"feature_version": features.FEATURE_VERSION,
                             "feature_names": list(features.FEATURE_NAMES), "baseline": base,
                             "records": len(y), "target": target, "devices": devices})

    @classmethod
    def load_default(cls) -> "LearnedCost":
        """The model shipped with Ollie (``ollie/data/default_model.txt``)."""
        return cls.load_file(DEFAULT_MODEL)

    @classmethod
    def load(cls, path: str | os.PathLike | None = None,
             cache_dir: str | os.PathLike | None = None) -> "LearnedCost":
        """``path`` if given; else the model ``ollie tune`` left in the cache folder, if it is
        usable (a trusted folder, an intact file); else the shipped default."""
        if path is not None:
            return cls.load_file(path)
        return load_tuned_or_default(cls.load_file, TUNED_MODEL, DEFAULT_MODEL, cache_dir)

    @classmethod
    def load_file(cls, path: str | os.PathLike) -> "LearnedCost":
        """The model at ``path`` (``load_booster``), trained on today's features."""
        booster, meta = load_booster(path)
        if meta.get("feature_version", features.FEATURE_VERSION) != features.FEATURE_VERSION \
                or booster.num_feature() != len(features.FEATURE_NAMES):
            raise ValueError(f"{path}: trained on other features (version "
                             f"{meta.get('feature_version')}); retrain with `ollie tune`")
        return cls(booster, meta)

    def save(self, path: str | os.PathLike, **extra_meta) -> Path:
        return save_booster(self.booster, self.meta, path, **extra_meta)

    # -- predicting --------------------------------------------------------------------------
    def predict_features(self, X: np.ndarray) -> np.ndarray:
        """Seconds for rows of feature vectors."""
        X = np.atleast_2d(np.asarray(X, dtype=np.float64))
        base = baseline_log_seconds(X, self.meta.get("baseline", BASELINE))
        return np.exp(self.booster.predict(X, num_threads=1) + base)

    def predict(self, program: Scope) -> float:
        """Predicted seconds of the whole program (all its scopes)."""
        return float(self.predict_features(features.program_features(program))[0])

    def predict_many(self, programs: Sequence[Scope]) -> np.ndarray:
        if not programs:
            return np.zeros(0)
        return self.predict_features(np.vstack([features.program_features(p) for p in programs]))

    def scope_cost(self, scope: Scope) -> float:
        """Predicted seconds of ``scope``'s own work, reading its sources as inputs."""
        cost = self._scope_memo.get(scope)
        if cost is None:
            x = features.program_features(scope, own_only=True)
            cost = float(self.predict_features(x)[0])
            if len(self._scope_memo) > 65536:
                self._scope_memo.clear()
            self._scope_memo[scope] = cost
        return cost

    __call__ = scope_cost

    def program_cost(self, root: Scope) -> float:
        """Sum of ``scope_cost`` over the program's scopes (what extraction minimises)."""
        return sum(self.scope_cost(s) for s in sub_scopes(root))

    def __repr__(self) -> str:
        return (f"<LearnedCost {self.booster.num_trees()} trees, trained on "
                f"{self.meta.get('records', '?')} records from {self.meta.get('devices', '?')}>")


# -- evaluation ------------------------------------------------------------------------------
def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman rank correlation (scipy if installed, else numpy with average ranks)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if len(a) < 2:
        return float("nan")
    try:
        import warnings
        from scipy.stats import spearmanr
        with warnings.catch_warnings():  # constant input: NaN, which callers handle
            warnings.simplefilter("ignore")
            return float(spearmanr(a, b).statistic)
    except ImportError:
        ra, rb = _ranks(a), _ranks(b)
        if ra.std() == 0 or rb.std() == 0:
            return float("nan")
        return float(np.corrcoef(ra, rb)[0, 1])


def _ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x), dtype=np.float64)
    for v in np.unique(x):  # ties share their average rank
        tie = x == v
        ranks[tie] = ranks[tie].mean()
    return ranks


def held_out_spearman(records: Sequence[dict], family: str, level: str | None = "program",
                      **train_kw) -> tuple[float, int]:
    """Train on every family but ``family``, then rank ``family``'s records: (rho, count).

    ``level`` keeps only test records of that level ("program" or "scope"; None: all)."""
    train = [r for r in records if r.get("family") != family]
    test = [r for r in records if r.get("family") == family
            and (level is None or r.get("level", "program") == level)]
    model = LearnedCost.train(train, **train_kw)
    X, y, _ = _matrix(test, train_kw.get("target", TARGET))
    if len(y) < 2:
        return float("nan"), len(y)
    return spearman(np.log(model.predict_features(X)), y), len(y)
