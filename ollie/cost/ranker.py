"""The candidate ranker: seconds of a whole candidate, from what its lowering runs.

Extraction prices scopes one at a time (``ollie.cost.learned``); once it has picked a few
whole programs, the ranker orders them, so that only the best one or two are measured. It
reads ``ollie.cost.lowered``'s features (the ATen calls of the lowering, at torch's thread
count) and predicts log seconds: gradient-boosted trees (LightGBM) learning a correction to a
roofline fitted on the same data, one per thread count (launches and views, matmul and conv
flops, small, tiny-batched and strided matrices, 1x1 convolutions, bytes, transcendental
elements), which extrapolates past the trained sizes where trees cannot.

Trained on every candidate of the rank cases (``ollie.cost.ranking``: derived candidates
timed interleaved at 1 and 2 threads, held-out cases excluded), shipped in ``ollie/data``.
The random operator programs the scope model learns from made its held-out ranking worse
(timed alone, at 1 thread): they are left out. ``ollie tune`` retrains it with the region
candidates the compiler measured on this machine, into the cache folder, where
``Ranker.load`` finds it.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

import ir
from ollie.cost import lowered
from ollie.cost.learned import (
    DATA_DIR, PARAMS, load_booster, load_tuned_or_default, save_booster,
)
from ollie.options import Options

RANK_MODEL = DATA_DIR / "rank_model.txt"
RANK_DATASET = DATA_DIR / "rank_dataset.jsonl.gz"
TUNED_RANKER = "tuned_rank_model.txt"
ROUNDS = 50  # chosen by cross-validation over the training cases (left out by family)
ROOFLINE = {  # name: (feature, initial value, how it enters: "per" unit or "rate")
    "launch_s": ("kernels", 5e-6, "per"),
    "view_s": ("views", 1e-6, "per"),
    "matmul_flops_per_s": ("log_matmul_flops", 5e10, "rate"),
    "small_matmul_flops_per_s": ("log_small_matmul_flops", 5e9, "rate"),
    "tiny_bmm_flops_per_s": ("log_tiny_bmm_flops", 1e9, "rate"),
    "matrix_s": ("log_matmul_matrices", 1e-7, "per"),
    "strided_matrix_s": ("log_strided_matrices", 1e-6, "per"),
    "conv_flops_per_s": ("log_conv_flops", 3e10, "rate"),
    "pointwise_conv_s": ("pointwise_convs", 1e-6, "per"),
    "bytes_per_s": ("log_total_bytes", 5e9, "rate"),
    "cached_bytes_per_s": ("log_cached_bytes", 5e10, "rate"),
    "special_per_s": ("log_special_elems", 5e8, "rate"),
}


def _roofline(X: np.ndarray, rates: dict) -> np.ndarray:
    t = np.zeros(len(X))
    for name, (feature, _, how) in ROOFLINE.items():
        col = X[:, lowered.column(feature)]
        amount = col if not feature.startswith("log_") else np.exp2(col) - 1
        t += amount * rates[name] if how == "per" else amount / rates[name]
    return np.log(np.maximum(t, 1e-9))


def roofline_log_seconds(X: np.ndarray, rooflines: dict) -> np.ndarray:
    """Log seconds by the roofline of each row's thread count (``rooflines``: rates per
    count, as ``fit_rooflines`` gives; a count never trained takes the nearest one's): a
    library's speed at 2 threads is not twice its speed at 1 -- oneDNN's 1x1 convolutions
    run slower -- so each count has its own rates."""
    X = np.atleast_2d(X)
    counts = np.asarray(sorted(int(k) for k in rooflines))
    threads = X[:, lowered.column("threads")]
    nearest = counts[np.abs(threads[:, None] - counts[None, :]).argmin(axis=1)]
    out = np.zeros(len(X))
    for n in np.unique(nearest):
        rows = nearest == n
        out[rows] = _roofline(X[rows], rooflines[str(n)])
    return out


def fit_rooflines(X: np.ndarray, y: np.ndarray) -> dict[str, dict]:
    """Roofline rates per thread count (JSON's string keys), fitted by robust least squares."""
    from scipy.optimize import least_squares
    keys = list(ROOFLINE)
    x0 = np.log([ROOFLINE[k][1] for k in keys])
    threads = X[:, lowered.column("threads")]
    out = {}
    for n in np.unique(threads):
        rows = threads == n
        fit = least_squares(lambda lp: _roofline(X[rows], dict(zip(keys, np.exp(lp))))
                            - y[rows], x0, loss="soft_l1", f_scale=0.3)
        out[str(int(n))] = dict(zip(keys, (float(v) for v in np.exp(fit.x))))
    return out


def record_threads(record: dict) -> int:
    """The thread count a record was measured at (its label, else its device string's xN)."""
    if record.get("threads"):
        return int(record["threads"])
    m = re.search(r" x(\d+)$", str(record.get("device", "")))
    return int(m.group(1)) if m else 1


def training_rows(records: Iterable[dict]):
    """(X, log seconds, the ATen operators their lowerings call) of the records whose
    program lowers; held-out cases never."""
    rows, ys, ops = [], [], set()
    for r in records:
        if r.get("held_out") or not (isinstance(r.get("seconds"), (int, float))
                                     and r["seconds"] > 0):
            continue
        try:
            program = ir.parse(r["program"])
            x = lowered.program_features(program, record_threads(r))
        except Exception:  # a program today's codegen cannot lower: not this model's data
            continue
        rows.append(x)
        ys.append(math.log(r["seconds"]))
        ops |= lowered.operators(program)
    return np.asarray(rows), np.asarray(ys), ops


class Ranker:
    """``seconds(programs)``: estimated seconds of each whole program, as lowered."""

    def __init__(self, booster, meta: dict):
        self.booster, self.meta = booster, dict(meta)

    @classmethod
    def train(cls, records: Sequence[dict], rounds: int = ROUNDS, **provenance) -> "Ranker":
        import lightgbm as lgb
        X, y, ops = training_rows(records)
        if len(y) < 8:
            raise ValueError(f"Ranker.train: need at least 8 usable records, got {len(y)}")
        rooflines = fit_rooflines(X, y)
        params = dict(PARAMS, min_data_in_leaf=min(PARAMS["min_data_in_leaf"], len(y) // 4))
        data = lgb.Dataset(X, y, init_score=roofline_log_seconds(X, rooflines),
                           feature_name=list(lowered.NAMES),
                           params={"min_data_in_bin": 1, "verbose": -1})
        booster = lgb.train(params, data, num_boost_round=rounds)
        devices = sorted({str(r.get("device", "?")).rsplit(" x", 1)[0] for r in records})
        threads = sorted({record_threads(r) for r in records})
        return cls(booster, {"feature_version": lowered.FEATURE_VERSION,
                             "feature_names": list(lowered.NAMES), "rooflines": rooflines,
                             "records": len(y), "devices": devices, "threads": threads,
                             "operators": sorted(ops),
                             **provenance})

    @classmethod
    def load_file(cls, path: str | os.PathLike) -> "Ranker":
        booster, meta = load_booster(path)
        if meta.get("feature_version") != lowered.FEATURE_VERSION or \
                booster.num_feature() != len(lowered.NAMES):
            raise ValueError(f"{path}: trained on other features; retrain with `ollie tune`")
        return cls(booster, meta)

    @classmethod
    def load(cls, cache_dir: str | os.PathLike | None = None) -> "Ranker":
        """The ranker ``ollie tune`` trained here, else the shipped one."""
        return load_tuned_or_default(cls.load_file, TUNED_RANKER, RANK_MODEL, cache_dir)

    def save(self, path: str | os.PathLike, **extra_meta) -> Path:
        return save_booster(self.booster, self.meta, path, **extra_meta)

    def familiar(self, program: ir.Scope, fused: bool = False) -> bool:
        """Whether every operator ``program``'s lowering calls was in the training data (an
        estimate for calls never timed is a guess; one that does not lower is unknown)."""
        try:
            return lowered.operators(program, fused) <= set(self.meta.get("operators", ()))
        except Exception:
            return False

    def seconds(self, programs: Sequence[ir.Scope], threads: int | None = None,
                fused: bool = False) -> np.ndarray:
        """Estimated seconds per program (lowered with ``fused``, see ``codegen.lower``);
        NaN where a program cannot be lowered."""
        rows, ok = [], []
        for p in programs:
            try:
                rows.append(lowered.program_features(p, threads, fused))
                ok.append(True)
            except Exception:
                rows.append(np.zeros(len(lowered.NAMES)))
                ok.append(False)
        if not rows:
            return np.zeros(0)
        X = np.vstack(rows)
        est = np.exp(self.booster.predict(X, num_threads=1)
                     + roofline_log_seconds(X, self.meta["rooflines"]))
        return np.where(ok, est, np.nan)

    def __repr__(self) -> str:
        return (f"<Ranker trained on {self.meta.get('records', '?')} records from "
                f"{self.meta.get('devices', '?')} at threads {self.meta.get('threads', '?')}>")


def train_default() -> Ranker:
    """Train the shipped ranker on the shipped rank dataset and save it in ``ollie/data``."""
    from ollie import cache
    from ollie.cost.measure import load_records
    model = Ranker.train(load_records(RANK_DATASET), versions=cache.current_versions())
    model.save(RANK_MODEL)
    return model


# -- using it: measure less -----------------------------------------------------------------------
MEASURE_TOP = Options.measure_top  # candidates measured whatever the estimates say
UNSURE = 1.25       # further candidates estimated within this factor of the best are measured too
WORTH = 0.95        # a candidate estimated above this share of the original's time is no gain


@dataclass(frozen=True)
class Selection:
    to_measure: list      # candidates, in the ranker's order
    estimates: list       # the ranker's seconds for each (NaN: it could not price one)
    original_s: float     # its estimate for the original program
    skipped: int          # candidates left unmeasured


def select(original: ir.Scope, candidates: Sequence, ranker: "Ranker | None",
           gain: Callable[[object], bool] = lambda c: False,
           threads: int | None = None, fused: bool = False, gate: bool = True,
           top: int = MEASURE_TOP) -> Selection:
    """Which candidates (objects with ``.program``) to measure, best first.

    Candidates doing the same work as the original or as another are dropped. A candidate
    is worth measuring where ``gain(candidate)`` says so, or, with ``gate``, where the
    ranker estimates it under ``WORTH`` of the original's time or cannot price it (it fails
    to lower, or calls operators the ranker was never trained on). The ranker prices the
    program run uncompiled: where a compiler fuses the work around the contractions, its
    gains there are not the compiled program's, and the caller passes ``gate=False``. Of
    those worth it, the ranker's ``top``, then any estimated within ``UNSURE``
    of the best (estimates that close do not decide), and the unpriced. Without a ranker:
    the candidates ``gain`` accepts, as given."""
    everything = candidates
    candidates = _distinct_work(original, candidates, fused)
    if ranker is None or not candidates:
        kept = [c for c in candidates if gain(c)]
        return Selection(kept, [math.nan] * len(kept), math.nan, len(everything) - len(kept))
    est = ranker.seconds([original] + [c.program for c in candidates], threads, fused)
    original_s, est = float(est[0]), [float(e) for e in est[1:]]
    for i, c in enumerate(candidates):  # a guess is no estimate: measure those
        if not ranker.familiar(c.program, fused):
            est[i] = math.nan
    worth = [i for i, c in enumerate(candidates) if gain(c) or gate and (
        math.isnan(est[i]) or est[i] < WORTH * original_s)]
    priced = sorted((i for i in worth if not math.isnan(est[i])), key=lambda i: est[i])
    chosen = [i for rank, i in enumerate(priced)
              if rank < top or est[i] <= UNSURE * est[priced[0]]]
    chosen += [i for i in worth if math.isnan(est[i])]
    return Selection([candidates[i] for i in chosen], [est[i] for i in chosen], original_s,
                     len(everything) - len(chosen))


def _distinct_work(original: ir.Scope, candidates: Sequence, fused: bool) -> list:
    """The candidates, less those doing the original's work or an earlier one's (the same
    calls on the same shapes and strides: measuring them again tells nothing)."""
    def key(program):
        try:
            return lowered.work_key(program, fused)
        except Exception:  # it does not lower here: keep it, measurement will tell
            return id(program)
    seen, out = {key(original)}, []
    for c in candidates:
        k = key(c.program)
        if k not in seen:
            seen.add(k)
            out.append(c)
    return out
