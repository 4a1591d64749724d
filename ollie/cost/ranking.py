"""How well a cost ranks derived candidates: every candidate of an expression timed.

A *rank case* is a PyTorch expression over declared shapes (the ``ollie derive --torch``
language). Its candidates are the original plus what the derivation extracts under the
learned and the analytic cost (deduplicated, each checked against the original on random
data). Each candidate is lowered with the torch backend and timed interleaved: rounds of one
block of back-to-back calls per candidate (at least ``BLOCK_S`` a block), the median per-call
time over the rounds. A timing is one dataset record (``measure.make_record``) labelled with
its case (``group``), the thread count and whether the case is held out of training.

    python -m ollie.cost.ranking collect --threads 1,2 --out ranks.jsonl
    python -m ollie.cost.ranking evaluate ranks.jsonl [--model M]
    python -m ollie.cost.ranking collect --threads 1,2 --variants 3 --out train.jsonl
    python -m ollie.cost.ranking ship train.jsonl   # the shipped ranker and its data

``evaluate`` reports, per thread count and for held-out cases apart: the mean Spearman of
the model's estimates against the times, how often the model's pick is the fastest or within
5 % of it, and the regret (the pick's time over the fastest).
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

import ir
from ollie.cost import lowered
from ollie.cost.ranker import MEASURE_TOP, UNSURE

BLOCK_S = 0.010        # seconds of back-to-back calls per timed block at least
ROUNDS = 9             # interleaved rounds per case
SLOW_S = 0.25          # a candidate slower than this per call is timed once a round at most
WITHIN = 1.05          # a pick "within 5 %" of the fastest


@dataclass(frozen=True)
class RankCase:
    name: str
    source: str                                  # torch expression over the shapes below
    shapes: tuple[tuple[str, tuple[int, ...]], ...]
    held_out: bool = False                       # never in the training data


def _case(name: str, source: str, held_out: bool = False, **shapes) -> RankCase:
    return RankCase(name, source, tuple(shapes.items()), held_out)


# Families as in research code: chains, distances, traces and diagonals, Kronecker products,
# bilinear forms, einsums, convolutions, softmax-like reductions, low-rank norms. The held-out
# ten are spellings and sizes unlike any trained one.
CASES: tuple[RankCase, ...] = (
    _case("chain_thin_last", "(a @ b) @ c", a=(512, 256), b=(256, 512), c=(512, 16)),
    _case("chain_thin_first", "(a @ b) @ c", a=(16, 512), b=(512, 512), c=(512, 256)),
    _case("chain4", "a @ b @ c @ d", a=(256, 64), b=(64, 512), c=(512, 32), d=(32, 256)),
    _case("chain_mv", "(a @ b) @ v", a=(384, 384), b=(384, 384), v=(384,)),
    _case("pairwise_sqdist", "((x[:, None, :] - y[None, :, :]) ** 2).sum(-1)",
          x=(256, 64), y=(192, 64)),
    _case("trace_ab", "torch.trace(a @ b)", a=(384, 384), b=(384, 384)),
    _case("diag_abt", "torch.diagonal(a @ b.T) * 2", a=(384, 256), b=(384, 256)),
    _case("kron_mv", "torch.kron(p, q) @ v", p=(24, 24), q=(24, 24), v=(576,)),
    _case("bilinear", "torch.einsum('i,ij,j->', x, a, y)", x=(512,), a=(512, 512), y=(512,)),
    _case("einsum_diag", "torch.einsum('ik,ki->i', a, b)", a=(256, 512), b=(512, 256)),
    _case("einsum3", "torch.einsum('ij,jk,kl->il', a, b, c)", a=(128, 256), b=(256, 256),
          c=(256, 8)),
    _case("batched_mm", "torch.einsum('bij,bjk->bik', a, b)", a=(8, 96, 64), b=(8, 64, 96)),
    _case("conv3x3", "F.conv2d(x, w, padding=1)", x=(1, 32, 28, 28), w=(32, 32, 3, 3)),
    _case("softmax_rows", "torch.softmax(x, -1)", x=(256, 512)),
    _case("frob_low_rank", "((a @ b) ** 2).sum()", a=(384, 16), b=(16, 384)),
    _case("outer_sum", "torch.outer(u, v).sum()", u=(1024,), v=(1024,)),
    _case("common_factor", "a @ b + c @ b", a=(256, 256), b=(256, 256), c=(256, 256)),
    _case("matmul_colsum", "(x @ w).sum(0)", x=(1024, 128), w=(128, 256)),
    _case("attention", "torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ v",
          q=(2, 128, 32), k=(2, 128, 32), v=(2, 128, 32)),
    _case("low_rank_proj", "x @ w1 @ w2", x=(256, 512), w1=(512, 512), w2=(512, 16)),
    _case("sum_then_mm", "(a + b) @ c", a=(256, 384), b=(256, 384), c=(384, 64)),
    _case("scores_bt", "torch.einsum('bij,bkj->bik', q, k)", q=(4, 96, 32), k=(4, 80, 32)),
    _case("chain_mv3", "a @ b @ c @ v", a=(192, 256), b=(256, 256), c=(256, 128), v=(128,)),
    _case("dot_einsum", "torch.einsum('i,i->', u, v)", u=(4096,), v=(4096,)),
    _case("relu_rowsum", "(x @ w).relu().sum(1)", x=(256, 128), w=(128, 192)),
    _case("softmax_linear", "torch.softmax(x @ w, -1)", x=(128, 256), w=(256, 320)),
    _case("centered_gram", "(x - x.mean(0)).T @ (x - x.mean(0))", x=(512, 48)),
    _case("kron_colsum", "torch.kron(p, q).sum(0)", p=(16, 20), q=(24, 12)),
    _case("mm_rowsum", "torch.einsum('ij,jk->ik', a, b).sum(1)", a=(256, 192), b=(192, 320)),
    _case("conv_pool", "F.conv2d(x, w, padding=1).sum((2, 3))", x=(1, 16, 24, 24),
          w=(24, 16, 3, 3)),
    _case("pointwise_conv_bias", "F.conv2d(x, w, b)", x=(4, 32, 10, 10), w=(48, 32, 1, 1),
          b=(48,)),
    _case("outer_mm", "torch.outer(u, v) @ w", u=(256,), v=(192,), w=(192, 128)),
    _case("scaled_rowsum", "(x * s[None, :]).sum(1)", x=(512, 384), s=(384,)),
    _case("max_shifted_exp", "torch.exp(x - x.amax(-1, keepdim=True)).sum(-1)", x=(192, 384)),
    _case("linear_bias", "x @ w + b", x=(256, 256), w=(256, 128), b=(128,)),
    _case("conv1x1_einsum", "torch.einsum('nchw,oc->nohw', x, w)", x=(1, 48, 16, 16),
          w=(32, 48)),
    _case("trace_spelled", "(a @ b).diagonal().sum()", a=(256, 320), b=(320, 256)),
    _case("bmm_batch_sum", "torch.bmm(a, b).sum(0)", a=(8, 64, 96), b=(8, 96, 80)),
    _case("quadratic_rows", "((x @ a) * x).sum(1)", x=(320, 96), a=(96, 96)),
    _case("two_sided", "a.T @ x @ b", a=(256, 48), x=(256, 256), b=(256, 32)),
    _case("norm_sq_diff", "((a - b) ** 2).sum()", a=(384, 384), b=(384, 384)),
    # held out
    _case("chain_mid_thin", "a @ (b @ c)", held_out=True, a=(256, 32), b=(32, 512),
          c=(512, 384)),
    _case("trace_abc", "torch.trace(a @ b @ c)", held_out=True, a=(128, 256), b=(256, 128),
          c=(128, 128)),
    _case("rowwise_dot", "(a * b).sum(1)", held_out=True, a=(512, 256), b=(512, 256)),
    _case("distance_dot", "(x * x).sum(1)[:, None] - 2 * x @ y.T + (y * y).sum(1)[None, :]",
          held_out=True, x=(192, 48), y=(160, 48)),
    _case("logsumexp_rows", "torch.logsumexp(x, -1)", held_out=True, x=(384, 256)),
    _case("xt_a_x", "x @ a @ x", held_out=True, x=(384,), a=(384, 384)),
    _case("diag_chain", "torch.diagonal(a @ b @ c)", held_out=True, a=(96, 192), b=(192, 96),
          c=(96, 96)),
    _case("sum_of_products", "(a @ b).sum()", held_out=True, a=(256, 384), b=(384, 256)),
    _case("conv1x1", "F.conv2d(x, w)", held_out=True, x=(2, 64, 14, 14), w=(32, 64, 1, 1)),
    _case("gram_trace", "torch.trace(a.T @ a)", held_out=True, a=(512, 96)),
)
BY_NAME = {c.name: c for c in CASES}


def variants(case: RankCase, n: int, seed: int = 0) -> list[RankCase]:
    """``n`` copies of a case at other sizes: each distinct dimension scaled by its own
    log-uniform factor in [1/2, 2] (so equal dims stay equal, as the expression needs)."""
    rng = np.random.default_rng([seed, sum(map(ord, case.name))])
    dims = sorted({d for _, shape in case.shapes for d in shape if d > 3})
    out: list[RankCase] = []
    for _ in range(10 * n):  # sizes the expression rejects (kron's product) are drawn again
        if len(out) == n:
            break
        scale = {d: max(4, round(d * 2 ** rng.uniform(-1, 1))) for d in dims}
        shapes = tuple((name, tuple(scale.get(d, d) for d in shape))
                       for name, shape in case.shapes)
        variant = RankCase(f"{case.name}@{len(out) + 1}", case.source, shapes, case.held_out)
        try:
            expression(variant)
        except Exception:
            continue
        out.append(variant)
    return out


def training_cases(n_variants: int = 3) -> list[RankCase]:
    """The cases that are not held out, each with ``n_variants`` size variants."""
    return [v for c in CASES if not c.held_out for v in [c] + variants(c, n_variants)]


def expression(case: RankCase) -> ir.Scope:
    from ollie.cli.torch_text import build
    return build(case.source, dict(case.shapes))


# -- candidates ---------------------------------------------------------------------------------
def candidate_programs(case: RankCase, k: int = 8, budget_s: float = 3.0) -> list[ir.Scope]:
    """The original, then the programs extraction picks under each cost, one per distinct
    work (``lowered.work_key``)."""
    from derivations import Budget, derive
    from ollie import cost
    original = expression(case)
    derivation = derive(original, Budget(nodes=20_000, seconds=budget_s))
    programs, seen = [original], {lowered.work_key(original)}
    for ranking in (cost.default(), cost.analytic):
        for c in derivation.candidates(k, ranking, verify_limit=1 << 22):
            try:
                key = lowered.work_key(c.program)
            except Exception:  # it does not lower: time_candidates drops it
                key = ir.fingerprint(c.program)
            if key not in seen:
                seen.add(key)
                programs.append(c.program)
    return programs


def time_interleaved(calls: Sequence[Callable[[], object]], rounds: int = ROUNDS) -> list[float]:
    """Median seconds per call of each callable, timed in interleaved rounds of blocks."""
    once = []
    for call in calls:  # warm up, and size each block
        call()
        t0 = time.perf_counter()
        call()
        once.append(time.perf_counter() - t0)
    blocks = [max(1, math.ceil(BLOCK_S / max(t, 1e-7))) if t < SLOW_S else 1 for t in once]
    samples: list[list[float]] = [[] for _ in calls]
    order = np.random.default_rng(0)
    for r in range(rounds):
        for i in order.permutation(len(calls)):  # no candidate always follows the same one
            call = calls[i]
            if once[i] >= SLOW_S and r >= 2:  # two more runs say enough of a slow one
                continue
            t0 = time.perf_counter()
            for _ in range(blocks[i]):
                call()
            samples[i].append((time.perf_counter() - t0) / blocks[i])
    return [statistics.median(s) for s in samples]


def time_candidates(programs: Sequence[ir.Scope]) -> list[float | None]:
    """Seconds per call of each program (None: it failed to lower or disagreed with the
    first program, the original, on random data)."""
    import codegen
    from ollie.cost.tune import random_inputs
    from ollie.numerics import max_relative_error
    kernels, calls, reference = [], [], None
    for p in programs:
        try:
            kernel = codegen.lower(p, backend="torch")
            args = random_inputs(kernel, p)
            with torch.no_grad():
                out = kernel(*args)
        except Exception:
            kernels.append(None)
            continue
        if reference is None:
            reference = out
        elif out.shape != reference.shape or not max_relative_error(out, reference) <= 1e-3:
            kernels.append(None)
            continue
        kernels.append(kernel)
        calls.append(lambda kernel=kernel, args=args: kernel(*args))
    with torch.no_grad():
        times = iter(time_interleaved(calls))
    return [next(times) if k is not None else None for k in kernels]


def collect(cases: Sequence[RankCase], threads: Sequence[int], out: Path,
            log=print) -> list[dict]:
    """Derive each case once, time its candidates at each thread count, append records."""
    from ollie.cost import measure
    records = []
    saved = torch.get_num_threads()
    try:
        for case in cases:
            t0 = time.perf_counter()
            programs = candidate_programs(case)
            for n in threads:
                torch.set_num_threads(n)
                times = time_candidates(programs)
                for i, (p, s) in enumerate(zip(programs, times)):
                    if s is None:
                        continue
                    m = measure.Measurement(s, s, 0.0, ROUNDS, measure.device_string())
                    r = measure.make_record(p, m, {
                        "family": "rank", "level": "candidate", "group": case.name,
                        "candidate": i, "threads": n, "held_out": case.held_out})
                    records.append(r)
                    with open(out, "a") as f:
                        f.write(json.dumps(r, sort_keys=True) + "\n")
            log(f"{case.name}: {len(programs)} candidates, {time.perf_counter() - t0:.1f} s")
    finally:
        torch.set_num_threads(saved)
    return records


# -- evaluation ---------------------------------------------------------------------------------
@dataclass
class GroupScore:
    group: str
    threads: int
    held_out: bool
    n: int
    spearman: float
    regret: float          # the model's pick's time over the fastest
    measured: int          # candidates the compiler would measure (``ranker.select``'s rule)
    measured_regret: float  # the fastest of those over the fastest of all

    @property
    def pick_ok(self) -> bool:
        return self.regret <= WITHIN


def score(records: Sequence[dict], estimate: Callable[[list[dict]], np.ndarray]
          ) -> list[GroupScore]:
    """Per (case, threads) group of records: how ``estimate`` (records -> seconds) ranks."""
    from ollie.cost.learned import spearman
    groups: dict[tuple[str, int], list[dict]] = {}
    for r in records:
        groups.setdefault((r["group"], int(r.get("threads", 0))), []).append(r)
    out = []
    for (group, threads), rs in sorted(groups.items()):
        if len(rs) < 2:
            continue
        est = np.asarray(estimate(rs), dtype=np.float64)
        secs = np.asarray([r["seconds"] for r in rs])
        rho = spearman(est, secs)
        order = np.argsort(est, kind="stable")
        measured = [i for rank, i in enumerate(order)
                    if rank < MEASURE_TOP or est[i] <= UNSURE * est[order[0]]]
        out.append(GroupScore(group, threads, bool(rs[0].get("held_out")), len(rs),
                              0.0 if math.isnan(rho) else rho,
                              float(secs[order[0]] / secs.min()), len(measured),
                              float(secs[measured].min() / secs.min())))
    return out


def summary(scores: Sequence[GroupScore]) -> str:
    lines = []
    for threads in sorted({s.threads for s in scores}):
        for label, held in (("trained", False), ("held out", True), ("all", None)):
            ss = [s for s in scores if s.threads == threads and (held is None
                                                                  or s.held_out == held)]
            if not ss:
                continue
            regrets = [s.regret for s in ss]
            lines.append(
                f"threads {threads} {label:>8}: {len(ss)} cases, "
                f"{sum(s.n for s in ss)} candidates; mean Spearman "
                f"{statistics.mean(s.spearman for s in ss):.2f}; pick within 5 % "
                f"{sum(s.pick_ok for s in ss)}/{len(ss)}; regret geomean "
                f"{math.exp(statistics.mean(map(math.log, regrets))):.3f}, worst "
                f"{max(regrets):.2f} ({max(ss, key=lambda s: s.regret).group}); measuring "
                f"{sum(s.measured for s in ss)} of {sum(s.n for s in ss)}: worst regret "
                f"{max(s.measured_regret for s in ss):.2f}")
    return "\n".join(lines)


def ranker_estimate(ranker) -> Callable[[list[dict]], np.ndarray]:
    """A ``Ranker``'s estimates for records, at the thread count each was measured at."""
    def estimate(rs: list[dict]) -> np.ndarray:
        return np.concatenate([ranker.seconds([ir.parse(r["program"])], int(r["threads"]))
                               for r in rs])
    return estimate


def extraction_estimate(cost) -> Callable[[list[dict]], np.ndarray]:
    """What extraction ranks by: the sum of ``cost`` over a program's scopes."""
    def estimate(rs: list[dict]) -> np.ndarray:
        return np.asarray([ir.analysis.program_cost(ir.parse(r["program"]), cost) for r in rs])
    return estimate


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m ollie.cost.ranking",
                                description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect", help="derive and time every candidate of the rank cases")
    c.add_argument("--threads", default="1,2", help="thread counts, comma separated")
    c.add_argument("--cases", default="", help="case names, comma separated (default: all)")
    c.add_argument("--variants", type=int, default=0,
                   help="also time this many size variants of each training case")
    c.add_argument("--out", required=True, type=Path)
    e = sub.add_parser("evaluate", help="score a ranking on collected timings")
    e.add_argument("data", type=Path)
    e.add_argument("--by", choices=("ranker", "extraction"), default="ranker",
                   help="the candidate ranker (default), or extraction's sum of learned "
                        "scope costs")
    e.add_argument("--model", default=None, help="a ranker model file (default: shipped)")
    e.add_argument("--per-case", action="store_true")
    t = sub.add_parser("ship", help="make collected timings the shipped rank dataset and "
                       "train the shipped ranker on them (held-out cases excluded)")
    t.add_argument("data", type=Path)
    args = p.parse_args(argv)
    if args.command == "ship":
        import gzip
        from ollie.cost.ranker import RANK_DATASET, train_default
        with gzip.GzipFile(RANK_DATASET, "wb", mtime=0) as out:
            out.write(args.data.read_bytes())
        print(train_default())
        return
    if args.command == "collect":
        names = [n for n in args.cases.split(",") if n]
        unknown = [n for n in names if n not in BY_NAME]
        if unknown:
            p.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(BY_NAME)}")
        cases = [BY_NAME[n] for n in names] if names else list(CASES)
        cases += [v for c in cases if not c.held_out for v in variants(c, args.variants)]
        collect(cases, [int(t) for t in args.threads.split(",")], args.out,
                log=lambda m: print(m, file=sys.stderr, flush=True))
        return
    from ollie.cost.measure import load_records
    records = [r for r in load_records(args.data) if r.get("family") == "rank"]
    if args.by == "extraction":
        from ollie.cost.learned import LearnedCost
        estimate = extraction_estimate(LearnedCost.load())
    else:
        from ollie.cost.ranker import Ranker
        estimate = ranker_estimate(Ranker.load_file(args.model) if args.model
                                   else Ranker.load())
    scores = score(records, estimate)
    if args.per_case:
        for s in scores:
            print(f"{s.group:>18} x{s.threads} {'held' if s.held_out else '    '} n={s.n:2d} "
                  f"rho={s.spearman:+.2f} regret={s.regret:.2f}")
    print(summary(scores))


if __name__ == "__main__":
    main()
