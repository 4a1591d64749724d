"""``ollie tune``: measure programs on this machine and (re)train the learned cost model.

Cases are operator expressions built with ``ir.ops`` over random shapes, grouped in
*families* (matmul, einsum, conv, reduction, elementwise, softmax, gather, banded). Each case
is lowered with codegen's torch backend and timed as a whole program; a program of several
scopes is also timed scope by scope (each alone, its sources as inputs), which is what
``LearnedCost.scope_cost`` prices. When ``derivations`` can derive, its candidates for a case
are measured too. Every timing becomes a dataset record (``ollie.cost.measure.make_record``).

    python -m ollie.cost.tune --build-default     # the shipped model + dataset in ollie/data
    python -m ollie.cost.tune --cases 60          # what `ollie tune` does: measure, retrain
    python -m ollie.cost.tune --evaluate          # held-out-family Spearman on the shipped data
"""
from __future__ import annotations

import argparse
import gzip
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import sympy
import torch

import ir
from ir import Tensor, ops
from ir.ops._util import iters, read, syms
from ollie.cost import features
from ollie.cost import measure
from ollie.cost.learned import (
    DEFAULT_DATASET, DEFAULT_MODEL, TUNED_MODEL, LearnedCost, held_out_spearman,
)

FAMILIES = ("matmul", "einsum", "conv", "reduction", "elementwise", "softmax", "gather",
            "banded")
MAX_FLOPS = 8e9           # keep each case to at most ~0.1 s on one core
MAX_BYTES = 128 << 20
MAX_GATHER = 1 << 26      # elements an index-table gather may materialise


@dataclass
class Case:
    family: str
    name: str
    program: ir.Scope


# -- random cases -------------------------------------------------------------------------------
def _size(rng, lo: int, hi: int) -> int:
    """log-uniform in [2^lo, 2^hi]; half the time rounded to a multiple of 8."""
    n = int(round(2 ** rng.uniform(lo, hi)))
    return max(8 * round(n / 8), 8) if rng.random() < 0.5 and n >= 8 else max(n, 1)


def _t(name, *shape) -> Tensor:
    return Tensor(name, tuple(int(s) for s in shape))


def _matmul(rng) -> tuple[str, ir.Scope]:
    m, k, n = (_size(rng, 3, 11) for _ in range(3))
    pick = rng.integers(5)
    if pick == 0:
        return f"mm {m}x{k}x{n}", ops.matmul(_t("a", m, k), _t("b", k, n))
    if pick == 1:
        b = _size(rng, 1, 5)
        return f"bmm {b}x{m}x{k}x{n}", ops.bmm(_t("a", b, m, k), _t("b", b, k, n))
    if pick == 2:
        y = ops.linear(_t("x", m, k), _t("w", n, k), _t("bias", n))
        return f"linear {m}x{k}->{n}", ops.relu(y) if rng.random() < 0.5 else y
    if pick == 3:
        p = _size(rng, 2, 9)
        a, b, c = _t("a", m, k), _t("b", k, n), _t("c", n, p)
        if rng.random() < 0.5:
            return f"(ab)c {m}x{k}x{n}x{p}", ops.matmul(ops.matmul(a, b), c)
        return f"a(bc) {m}x{k}x{n}x{p}", ops.matmul(a, ops.matmul(b, c))
    return f"mv {m}x{k}", ops.mv(_t("a", m, k), _t("v", k))


_EINSUMS = {
    "bij,bjk->bik": "bmm", "ij,kj->ik": "abT", "bhqd,bhkd->bhqk": "attn", "i,j->ij": "outer",
    "bik,kj->bij": "batched-linear", "ij,jk,kl->il": "3-chain", "bchw,oc->bohw": "1x1conv",
}


def _einsum(rng) -> tuple[str, ir.Scope]:
    eq = list(_EINSUMS)[rng.integers(len(_EINSUMS))]
    sizes = {ch: _size(rng, 2, 10) for ch in "ijklq"}
    sizes.update(b=_size(rng, 0, 5), h=_size(rng, 0, 4), d=_size(rng, 3, 7),
                 c=_size(rng, 2, 8), o=_size(rng, 2, 8), w=_size(rng, 2, 7))
    if eq == "ij,jk,kl->il":
        sizes.update({ch: _size(rng, 2, 9) for ch in "ijkl"})
    lhs = eq.split("->")[0].split(",")
    operands = [_t(f"x{n}", *(sizes[ch] for ch in term)) for n, term in enumerate(lhs)]
    shape = " ".join("x".join(str(sizes[ch]) for ch in term) for term in lhs)
    return f"einsum {eq} {shape}", ops.einsum(eq, *operands)


def _conv(rng) -> tuple[str, ir.Scope]:
    n, c, f = _size(rng, 0, 3), _size(rng, 1, 7), _size(rng, 2, 7)
    h = _size(rng, 3, 6)
    k = int(rng.choice([1, 3, 3, 5]))
    stride, dil = int(rng.choice([1, 1, 2])), int(rng.choice([1, 1, 1, 2]))
    pad = int(rng.choice([0, k // 2 * dil]))
    pick = rng.integers(6)
    if pick == 0:
        x, w = _t("x", n, c, h * 4), _t("w", f, c, k)
        return f"conv1d {n}x{c}x{h * 4} k{k} ->{f}", ops.conv1d(x, w, stride=stride, padding=pad)
    if pick == 1:
        x, w = _t("x", n, c, h, h), _t("w", c, f, k, k)
        return (f"convT2d {n}x{c}x{h}x{h} k{k} s{stride} ->{f}",
                ops.conv_transpose2d(x, w, stride=stride, padding=k // 2))
    groups = int(rng.choice([1, 1, 1, 2, 4]))
    c, f = c * groups, f * groups
    x, w = _t("x", n, c, h, h), _t("w", f, c // groups, k, k)
    y = ops.conv2d(x, w, _t("bias", f) if pick == 3 else None, stride=stride, padding=pad,
                   dilation=dil, groups=groups)
    name = f"conv2d {n}x{c}x{h}x{h} k{k} s{stride} d{dil} g{groups} ->{f}"
    return (name + " relu", ops.relu(y)) if pick == 4 else (name, y)


def _dims_shape(rng, rank: int | None = None) -> list[int]:
    rank = rank or int(rng.integers(1, 5))
    budget = rng.uniform(8, 21)  # log2 of the element count
    return [max(int(round(2 ** (budget / rank + rng.normal(0, 1.2)))), 1) for _ in range(rank)]


def _reduction(rng) -> tuple[str, ir.Scope]:
    shape = _dims_shape(rng, int(rng.integers(2, 5)))
    dim = int(rng.integers(len(shape)))
    op = [ops.sum, ops.mean, ops.amax][rng.integers(3)]
    return f"{op.__name__} {shape} dim{dim}", op(_t("x", *shape), dim)


def _elementwise(rng) -> tuple[str, ir.Scope]:
    shape = _dims_shape(rng)
    x, y = _t("x", *shape), _t("y", *shape)
    row = _t("r", *shape[-1:])
    steps = [ops.relu, ops.exp, ops.tanh, ops.sigmoid, lambda e: ops.mul(e, 0.5),
             lambda e: ops.add(e, y), lambda e: ops.mul(e, row)]
    e, names = x, []
    for _ in range(int(rng.integers(1, 4))):
        i = int(rng.integers(len(steps)))
        e, names = steps[i](e), names + [["relu", "exp", "tanh", "sigmoid", "scale", "add",
                                            "mul-row"][i]]
    return f"{'+'.join(names)} {shape}", e


def _softmax(rng) -> tuple[str, ir.Scope]:
    shape = _dims_shape(rng, int(rng.integers(2, 4)))
    dim = int(rng.choice([len(shape) - 1, int(rng.integers(len(shape)))]))
    op = ops.softmax if rng.random() < 0.7 else ops.log_softmax
    return f"{op.__name__} {shape} dim{dim}", op(_t("x", *shape), dim)


def _index_gather(rng) -> tuple[str, ir.Scope]:
    """eOperators with floor-div / mod indices: zero-upsampling, channel shuffle."""
    n, c, h = _size(rng, 0, 3), _size(rng, 1, 6), _size(rng, 2, 6)
    if rng.random() < 0.5:
        s = int(rng.choice([2, 3]))
        out = iters(["n", "c", "u", "v"], [n, c, s * h, s * h])
        nn, cc, u, v = syms(out)
        body = read(_t("x", n, c, h, h), nn, cc, sympy.floor(u / s) + h * sympy.Mod(u, s),
                    sympy.floor(v / s) + h * sympy.Mod(v, s))
        return f"upsample {n}x{c}x{h}x{h} s{s}", ir.Scope(out, (), body, name="upsample")
    g = int(rng.choice([2, 4, 8]))
    out = iters(["n", "c", "h", "w"], [n, c * g, h, h])
    nn, cc, hh, ww = syms(out)
    body = read(_t("x", n, c * g, h, h), nn, sympy.Mod(cc, g) * c + sympy.floor(cc / g), hh, ww)
    return f"channel-shuffle {n}x{c * g}x{h}x{h} g{g}", ir.Scope(out, (), body, name="shuffle")


def _gather(rng) -> tuple[str, ir.Scope]:
    shape = _dims_shape(rng, int(rng.integers(2, 5)))
    x = _t("x", *shape)
    pick = rng.integers(8)
    if pick >= 6:
        return _index_gather(rng)
    if pick == 0:
        perm = [int(p) for p in rng.permutation(len(shape))]
        return f"permute {shape} {perm}", ops.mul(ops.permute(x, *perm), 1.0)
    if pick == 1:
        p = [int(v) for v in rng.integers(0, 3, size=2 * min(len(shape), 2))]
        return f"pad {shape} {p}", ops.pad(x, p)
    if pick == 2:
        d = int(rng.integers(len(shape)))
        return f"slice {shape} dim{d}::2", ops.slice(x, d, 0, shape[d], 2)
    if pick == 3:
        return f"flatten-scale {shape}", ops.mul(ops.flatten(ops.transpose(x, 0, -1)), 2.0)
    if pick == 4:
        d = len(shape) - 1
        size = max(min(shape[d], 3), 1)
        return f"unfold {shape} {size}", ops.unfold(x, d, size, 1)
    return f"cat {shape}", ops.cat([x, _t("y", *shape)], int(rng.integers(len(shape))))


def _banded(rng) -> tuple[str, ir.Scope]:
    b, m, c = _size(rng, 0, 3), _size(rng, 6, 11), _size(rng, 3, 7)
    w, d = int(rng.integers(1, 65)), int(rng.choice([1, 1, 2, 4]))
    if rng.random() < 0.5:
        return (f"g2bmm {b}x{m}x{c} w{w} d{d}",
                ops.g2bmm(_t("q", b, m, c), _t("k", b, m, c), w, d))
    return (f"gbmm {b}x{m}x{c} w{w} d{d}",
            ops.gbmm(_t("a", b, m, 2 * w + 1), _t("v", b, m, c), w, d))


GENERATORS: dict[str, Callable] = {
    "matmul": _matmul, "einsum": _einsum, "conv": _conv, "reduction": _reduction,
    "elementwise": _elementwise, "softmax": _softmax, "gather": _gather, "banded": _banded,
}


def _affordable(program: ir.Scope) -> bool:
    fs = [features.scope_features(s) for s in ir.sub_scopes(program)]
    return (sum(f.flops for f in fs) <= MAX_FLOPS and max(f.bytes for f in fs) <= MAX_BYTES
            and sum(f.gather_space for f in fs) <= MAX_GATHER)


def cases(n: int, seed: int = 0, families=FAMILIES) -> list[Case]:
    """``n`` random cases, families in turn."""
    rng = np.random.default_rng(seed)
    out: list[Case] = []
    while len(out) < n:
        fam = families[len(out) % len(families)]
        try:
            name, program = GENERATORS[fam](rng)
        except (ValueError, ZeroDivisionError):  # a shape the op rejects: draw again
            continue
        if _affordable(program):
            out.append(Case(fam, name, program))
    return out


# -- measuring ----------------------------------------------------------------------------------
def _lower(program: ir.Scope):
    import codegen
    return codegen.lower(program, backend="torch")


def random_inputs(kernel, program: ir.Scope, device="cpu") -> tuple[torch.Tensor, ...]:
    tensors = ir.inputs(program)
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(tensors[n].shape, generator=g).to(device)
                 for n in kernel.input_names)


def time_program(program: ir.Scope, cap: float, repeat: int = 10):
    kernel = _lower(program)
    args = random_inputs(kernel, program)
    with torch.no_grad():
        return measure.measure(kernel, *args, warmup=1, repeat=repeat, time_cap_s=cap)


def measure_case(case: Case, cap: float = 0.1, scopes: bool = True,
                 derived: int = 0) -> list[dict]:
    """Records for a case: the program, each of its scopes alone, derived candidates."""
    labels = {"family": case.family, "case": case.name}
    programs = [("program", case.program)]
    if scopes and len(ir.sub_scopes(case.program)) > 1:
        programs += [("scope", features.standalone(s)) for s in ir.sub_scopes(case.program)]
    if derived:
        programs += [("derived", p) for p in _derived(case.program, derived)]
    out = []
    for level, program in programs:
        try:
            m = time_program(program, cap)
        except Exception:  # a lowering gap is not this tool's business: skip the program
            continue
        out.append(measure.make_record(program, m, dict(labels, level=level)))
    return out


def _derived(program: ir.Scope, k: int) -> list[ir.Scope]:
    try:
        from derivations import Budget, derive
        from ollie import cost
        found = derive(program, Budget(nodes=5000, seconds=0.5)).candidates(k, cost.default())
        return [c.program for c in found if c.program != program and _affordable(c.program)]
    except Exception:
        return []


def generate(n_cases: int, seed: int = 0, cap: float = 0.1, budget_s: float | None = None,
             derived: int = 0, out: Path | None = None, progress: bool = False,
             threads: int | None = None, derive_every: int = 1) -> list[dict]:
    """Measure ``n_cases`` random cases (stopping at ``budget_s``); append to ``out``.
    Every ``derive_every``-th case also has up to ``derived`` derived candidates measured.
    ``threads`` pins torch's CPU threads meanwhile (1 is robust on a busy machine)."""
    start, records = time.perf_counter(), []
    saved = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        for i, case in enumerate(cases(n_cases, seed)):
            if budget_s is not None and time.perf_counter() - start > budget_s:
                break
            new = measure_case(case, cap, derived=derived if i % derive_every == 0 else 0)
            for r in new:
                if out is not None:
                    measure.append_record(r, out)
            records += new
            if progress and new:
                print(f"[{i + 1}/{n_cases}] {case.family:<11} {case.name:<48} "
                      f"{new[0]['min'] * 1e3:9.3f} ms", flush=True)
    finally:
        torch.set_num_threads(saved)
    return records


# -- training and evaluation --------------------------------------------------------------------
def evaluate(records: list[dict], families=("conv", "matmul", "einsum", "softmax",
                                            "reduction", "elementwise", "gather", "banded")
             ) -> dict[str, tuple[float, int]]:
    """Held-out-family Spearman: train without a family, rank that family's programs."""
    present = {r.get("family") for r in records}
    return {f: held_out_spearman(records, f) for f in families if f in present}


def build_default(n_cases: int = 1200, budget_s: float = 270, seed: int = 0,
                  progress: bool = True) -> dict:
    """Regenerate ``ollie/data``: measure cases on this machine, train and save the model."""
    DEFAULT_DATASET.parent.mkdir(parents=True, exist_ok=True)
    plain = DEFAULT_DATASET.with_suffix("")  # default_dataset.jsonl, compressed at the end
    plain.unlink(missing_ok=True)
    generate(n_cases, seed, budget_s=budget_s, out=plain, progress=progress,
             threads=1, derived=2, derive_every=4)
    with open(plain, "rb") as src, gzip.GzipFile(DEFAULT_DATASET, "wb", mtime=0) as dst:
        shutil.copyfileobj(src, dst)
    plain.unlink()
    return train_default()


def train_default() -> dict:
    """Train the shipped model on the shipped dataset; score it family by family."""
    records = measure.load_records(DEFAULT_DATASET)
    scores = evaluate(records)
    model = LearnedCost.train(records)
    model.save(DEFAULT_MODEL, held_out_spearman={f: round(s, 3) for f, (s, _) in scores.items()})
    return {"records": len(records), "held_out_spearman": scores, "model": str(DEFAULT_MODEL)}


def tune(n_cases: int = 40, cache_dir=None, cap: float = 0.1, seed: int | None = None,
         budget_s: float | None = None, derived: int = 2, progress: bool = False) -> dict:
    """Measure ``n_cases`` new cases here, add them to the cache folder's dataset, retrain
    on this device's records (plus the shipped ones while there are few) and save the model
    there, where ``LearnedCost.load()`` finds it; then measure again, once, the cached
    decisions whose margin was within noise (``ollie.cost.remeasure``)."""
    from ollie.cache import Cache, CacheRefused
    from ollie.cost.remeasure import remeasure_noisy
    cache = Cache(cache_dir)
    why = cache.refusal()
    if why or not cache.ensure_dir():
        raise CacheRefused(why or f"cannot create the cache folder {cache.dir}")
    seed = int(time.time()) if seed is None else seed
    new = generate(n_cases, seed, cap, budget_s, derived, cache.measurements_path, progress)
    device = measure.device_string()
    local = measure.load_records(cache.measurements_path, device=device)
    shipped = measure.load_records(DEFAULT_DATASET) if len(local) < 300 else []
    model = LearnedCost.train(local + shipped)
    path = model.save(cache.dir / TUNED_MODEL, device=device)
    # the candidate ranker learns from the region candidates the compiler measured here,
    # beside its shipped data
    from ollie.cost.ranker import RANK_DATASET, TUNED_RANKER, Ranker
    ranked = Ranker.train([r for r in local if r.get("family") == "region"]
                          + measure.load_records(RANK_DATASET))
    ranked.save(cache.dir / TUNED_RANKER, device=device)
    return {"measured": len(new), "trained_on": len(local) + len(shipped),
            "device": device, "model": str(path), **remeasure_noisy(cache.dir)}


def tune_command(n_cases: int = 40, cache_dir=None, budget_s: float | None = None) -> str:
    """What ``ollie tune`` prints."""
    r = tune(n_cases, cache_dir, budget_s=budget_s, progress=True)
    noisy = (f"; {r['remeasured']} decision(s) within noise measured again "
             f"({r['flipped']} changed), {r['dropped']} dropped"
             if r["remeasured"] or r["dropped"] else "")
    return (f"ollie tune: measured {r['measured']} programs on {r['device']}; model trained "
            f"on {r['trained_on']} records saved to {r['model']}{noisy}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m ollie.cost.tune", description=__doc__.split("\n")[0])
    p.add_argument("--build-default", action="store_true", help="regenerate ollie/data")
    p.add_argument("--evaluate", action="store_true", help="held-out Spearman, shipped data")
    p.add_argument("--cases", type=int, default=40)
    p.add_argument("--budget", type=float, default=None, help="seconds of measuring at most")
    p.add_argument("--dir", default=None, help="cache folder for the dataset and the model")
    args = p.parse_args(argv)
    if args.build_default:
        print(json.dumps(build_default(max(args.cases, 400), args.budget or 270), indent=1))
    elif args.evaluate:
        for fam, (rho, n) in evaluate(measure.load_records(DEFAULT_DATASET)).items():
            print(f"held out {fam:<12} spearman {rho:6.3f} over {n} programs")
    else:
        print(tune_command(args.cases, args.dir, budget_s=args.budget))


if __name__ == "__main__":
    main()
