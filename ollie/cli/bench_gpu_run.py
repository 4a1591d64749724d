"""``ollie bench --suite gpu``: EinNet's operators on a CUDA device, side by side.

For each case of ``ollie.cli.bench_gpu``: eager PyTorch, ``torch.compile(mode="max-autotune")``
and Ollie, timed with CUDA events (median after warm-up) in one process, their ratios, the
check of Ollie's output against eager, and the roofline lower bound for the device.
"""
from __future__ import annotations

import json
import sys

import torch

from ollie.cli.bench_gpu import PEAKS, gpu_cases
from ollie.cli.derive import UsageError
from ollie.numerics import max_relative_error, tolerance


def _device_peaks() -> str | None:
    name = torch.cuda.get_device_name().lower()
    return next((key for key in PEAKS if key in name), None)


def _time(fn, repeat: int) -> float:
    from ollie.cost.measure import measure

    with torch.no_grad():
        return measure(fn, warmup=3, repeat=repeat, time_cap_s=10.0).median


def run_case(case, repeat: int, budget_s: float, use_compile: bool, peaks: str | None) -> dict:
    import ollie

    args = case.inputs("cuda")
    fn = case.fn
    row = {"case": case.name, "description": case.description, "source": case.source}
    with torch.no_grad():
        expected = fn(*args)
    row["eager_ms"] = _time(lambda: fn(*args), repeat) * 1e3
    if use_compile:
        try:
            compiled = torch.compile(fn, mode="max-autotune")
            with torch.no_grad():
                compiled(*args)
            row["compile_ms"] = _time(lambda: compiled(*args), repeat) * 1e3
        except Exception as e:  # report, keep going
            row["compile_ms"], row["compile_note"] = None, str(e).splitlines()[0][:100]
    optimized = ollie.optimize(fn, budget_s=budget_s)
    with torch.no_grad():
        out = optimized(*args)
    row["max_rel_error"] = max_relative_error(out, expected)
    row["match"] = row["max_rel_error"] <= tolerance(expected.dtype) * 10
    row["ollie_ms"] = _time(lambda: optimized(*args), repeat) * 1e3
    row["eager_over_ollie"] = row["eager_ms"] / row["ollie_ms"]
    if row.get("compile_ms"):
        row["compile_over_ollie"] = row["compile_ms"] / row["ollie_ms"]
    if peaks:
        row["roofline_ms"] = case.roofline(peaks) * 1e3
    from ollie.capture.report import summary
    row["ollie_plan"] = summary(optimized.backend)
    return row


def run(args, out=None) -> int:
    from rich.console import Console
    from rich.table import Table

    out = out or sys.stdout
    if not torch.cuda.is_available():
        raise UsageError("the GPU suite needs a CUDA device and torch.cuda.is_available() is "
                         "False here; run `ollie bench` for the CPU suite")
    wanted = set(args.cases_text.split(",")) if getattr(args, "cases_text", None) else None
    cases = [c for c in gpu_cases() if wanted is None or c.name in wanted]
    unknown = (wanted or set()) - {c.name for c in gpu_cases()}
    if unknown:
        raise UsageError(f"unknown GPU case(s) {', '.join(sorted(unknown))}; choose from "
                         + ", ".join(c.name for c in gpu_cases()))
    peaks = _device_peaks()
    rows = []
    for case in cases:
        print(f"bench gpu: {case.name}", file=sys.stderr)
        try:
            rows.append(run_case(case, args.repeat, args.budget_s, not args.no_compile, peaks))
        except Exception as e:  # one broken case must not hide the others
            rows.append({"case": case.name, "error": str(e).splitlines()[0][:160]})
        torch.cuda.empty_cache()
    if args.json:
        print(json.dumps(rows, indent=2, default=str), file=out)
        return 0 if all(r.get("match") for r in rows) else 1
    t = Table(title=f"ollie bench --suite gpu ({torch.cuda.get_device_name()}; median ms)")
    for col in ("case", "eager", "max-autotune", "ollie", "eager/ollie", "compile/ollie",
                "roofline", "match", "ollie plan"):
        t.add_column(col)
    for r in rows:
        if "error" in r:
            t.add_row(r["case"], *["—"] * 6, "✗", r["error"])
            continue
        t.add_row(r["case"], f"{r['eager_ms']:.3f}", f"{r['compile_ms']:.3f}"
                  if r.get("compile_ms") else r.get("compile_note", "—"), f"{r['ollie_ms']:.3f}",
                  f"{r['eager_over_ollie']:.2f}×", f"{r['compile_over_ollie']:.2f}×"
                  if r.get("compile_over_ollie") else "—",
                  f"{r['roofline_ms']:.3f}" if "roofline_ms" in r else "—",
                  "✓" if r["match"] else "✗", r["ollie_plan"])
    Console(file=out, width=200).print(t)
    return 0 if all(r.get("match") for r in rows) else 1
