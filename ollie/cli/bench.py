"""``ollie bench``: eager torch vs torch.compile vs Ollie, side by side in one process.

For each case: build the three callables, warm each up (torch.compile compiles and Ollie
derives here; neither is timed), check the outputs against eager, then time the three in
interleaved rounds so that they see the same machine state, and report medians and ratios.
Each compiled variant is compiled from its own copy of the function's code object (Dynamo
keeps one cache per code object), and the noise control is a second torch.compile of a
third copy.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import statistics
import sys
import time
import warnings
from typing import TYPE_CHECKING, Callable

from ollie.cli.args import UsageError, positive_float, positive_int

if TYPE_CHECKING:
    from ollie.cli.bench_suite import Case

MIN_SAMPLE_S = 10e-3  # calls per timing sample are batched until one sample takes this long


def max_relative_error(got, expected) -> float:
    """``ollie.numerics.max_relative_error``, imported when first used (it needs torch); of
    several outputs (a tuple, a list), the largest."""
    from torch.utils._pytree import tree_flatten

    from ollie.numerics import max_relative_error as error
    (got, got_spec), (expected, spec) = tree_flatten(got), tree_flatten(expected)
    if got_spec != spec:
        return float("inf")
    return max((error(g, e) for g, e in zip(got, expected)), default=0.0)


def tolerance(fn, args, expected) -> float:
    """How far a result may be from eager's (``ollie.numerics.allowed_error``): more where
    eager itself rounds far from the float64 value (``torch.linalg.norm`` in float32)."""
    import torch
    from torch.utils._pytree import tree_leaves

    from ollie.numerics import allowed_error, resampled_errors, widen
    try:
        with torch.no_grad():
            exact = fn(*map(widen, args))
    except Exception:  # float32 weights, or an op without float64: the dtype's tolerance
        exact = None
    if not isinstance(expected, torch.Tensor):  # several outputs: the strictest one's
        leaves, exact = tree_leaves(expected), tree_leaves(exact)
        exact = exact if len(exact) == len(leaves) else [None] * len(leaves)
        return min(allowed_error(e, x if isinstance(x, torch.Tensor) else None)
                   for e, x in zip(leaves, exact) if isinstance(e, torch.Tensor))
    if not isinstance(exact, torch.Tensor):
        return allowed_error(expected, None)
    return allowed_error(expected, exact,
                         resampled_errors(lambda convert: fn(*map(convert, args))))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print a JSON list of results")
    p.add_argument("--repeat", type=positive_int, default=15,
                   help="timed rounds per case (median)")
    p.add_argument("--cases", default=None, metavar="NAME,...",
                   help="run only these cases (an unknown name lists them)")
    p.add_argument("--scale", type=positive_float, default=1.0,
                   help="multiply the problem sizes by this factor (e.g. 0.1 for a quick run)")
    p.add_argument("--budget-s", type=positive_float, default=2.0,
                   help="Ollie's derivation budget")
    p.add_argument("--measure-top", type=positive_int, default=2,
                   help="Ollie measures the candidate ranker's best N per region, more where "
                   "its estimates are close (default 2; a large N measures every promising "
                   "candidate)")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile column")
    p.add_argument("--suite", choices=("cpu", "kernels", "models", "sizes", "gpu"),
                   default="cpu",
                   help="cpu: the built-in suite (default); kernels: one-line kernels and a "
                   "DCGAN generator, where Ollie should cost nothing; models: small real "
                   "models (ResNet-18, MobileNet-v3, BERT, GPT-2, MLP-Mixer, ...); sizes: "
                   "functions called at a dozen sizes each (dynamic shapes); gpu: "
                   "EinNet's operators at EinNet's sizes on a CUDA device, against "
                   "max-autotune, with a roofline")
    p.add_argument("--export", action="store_true",
                   help="also time the case deployed: torch.export + AOTInductor, and "
                   "ollie.export + AOTInductor (each package loaded back with "
                   "aoti_load_package)")
    p.add_argument("--first-call", action="store_true",
                   help="time first calls instead: torch.compile's and Ollie's, each in a "
                   "fresh process with fresh caches, then again in a second process with "
                   "the caches the first one left")


SUITES = {"cpu": "bench_suite", "kernels": "bench_kernels", "models": "bench_models",
          "sizes": "bench_sizes"}


def suite_cases(suite: str) -> "tuple[list[Case], dict[str, Case]]":
    """A suite's cases, and the same by name."""
    import importlib
    module = importlib.import_module(f"ollie.cli.{SUITES[suite]}")
    return module.CASES, module.BY_NAME


def _case_list(text: str, suite: str = "cpu") -> "list[Case]":
    by_name = suite_cases(suite)[1]
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in by_name]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown case(s) {', '.join(unknown) or '(none given)'}; "
            f"choose from {', '.join(by_name)}")
    return [by_name[n] for n in names]


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"[:120]


def measured_candidates(backend) -> dict:
    """Of a backend's graphs so far: the regions derived, the candidates timed in them and
    the seconds that timing took (the original's timing included)."""
    derived = [r for report in backend.reports for r in report.regions if not r.cached]
    return {"regions_derived": len(derived),
            "candidates_measured": sum(len(r.measured) for r in derived),
            "measure_s": round(sum(r.measure_s for r in derived), 3)}


def _ollie_plan(optimized) -> str:
    """What runs, graph by graph (``ollie.capture.report.summary``)."""
    from ollie.capture.report import summary
    return summary(optimized.backend)


def time_side_by_side(fns: dict[str, Callable[[], object]], repeat: int,
                      grad: bool = False) -> dict[str, float]:
    """Median seconds per call of each fn, timed in interleaved rounds of blocks of calls
    (under ``no_grad``, as the outputs were checked: a change of grad mode would recompile
    inside the timing; ``grad``: with grad, for training steps)."""
    import torch

    number = {}
    samples: dict[str, list[float]] = {name: [] for name in fns}
    with torch.enable_grad() if grad else torch.no_grad():
        for name, fn in fns.items():  # calibrate: calls per sample so a sample >= MIN_SAMPLE_S
            fn()  # warm: whatever a first call in this mode does is not timed
            t0 = time.perf_counter()
            fn()
            one = time.perf_counter() - t0
            number[name] = max(1, min(1000, int(MIN_SAMPLE_S / max(one, 1e-7)) + 1))
        order, shuffle = list(fns), random.Random(0).shuffle
        for _ in range(repeat):
            # each round in a new order: a block pays for what the block before it left
            # behind (another runtime's spinning OpenMP threads, evicted caches), so no
            # variant always follows the same other one
            shuffle(order)
            for name in order:
                fn = fns[name]
                t0 = time.perf_counter()
                for _ in range(number[name]):
                    fn()
                samples[name].append((time.perf_counter() - t0) / number[name])
    return {name: statistics.median(s) for name, s in samples.items()}


def run_case(case: "Case", scale: float, repeat: int, budget_s: float,
             use_compile: bool, export: bool = False, measure_top: int = 2) -> dict:
    import torch

    import ollie
    from ollie.capture.eager_or_compiled import own_code

    fn, args = case.make(scale)
    name = "bench_" + re.sub(r"\W", "_", case.name)  # Dynamo tells cases apart by name
    row = {"case": case.name, "description": case.description,
           "shapes": [list(a.shape) for a in args]}
    with torch.no_grad():
        expected = fn(*args)
    variants: dict[str, Callable] = {"eager": lambda: fn(*args)}

    if use_compile:
        t0 = time.perf_counter()
        try:
            compiled = torch.compile(own_code(fn, name))
            with torch.no_grad():
                out = compiled(*args)
            row["compile_error"] = max_relative_error(out, expected)
            # noise control: torch.compile again, from a code object of its own
            compiled_copy = torch.compile(own_code(fn, name))
            with torch.no_grad():
                compiled_copy(*args)
            variants["compile"] = lambda: compiled(*args)
            variants["compile_copy"] = lambda: compiled_copy(*args)
            row["compile_note"] = ""
        except Exception as e:  # compile failing is a result, not a crash
            row["compile_note"] = f"failed: {_first_line(e)}"
        row["compile_warmup_s"] = round(time.perf_counter() - t0, 3)
    else:
        row["compile_note"] = "skipped"

    optimized = ollie.optimize(own_code(fn, name), budget_s=budget_s, measure_top=measure_top)
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.no_grad():
            out = optimized(*args)
    row["ollie_warmup_s"] = round(time.perf_counter() - t0, 3)
    with torch.no_grad():
        while optimized.racing:  # eager against compiled at the first calls: not yet settled
            optimized(*args)
    row["max_rel_error"] = max_relative_error(out, expected)
    row["allowed_error"] = tolerance(fn, args, expected)
    row["match"] = row["max_rel_error"] <= row["allowed_error"]
    row["ollie_plan"] = _ollie_plan(optimized)
    row.update(measured_candidates(optimized.backend))
    row["ollie_warnings"] = [str(w.message).splitlines()[0] for w in caught]
    variants["ollie"] = lambda: optimized(*args)
    if export:
        _add_exported(fn, args, expected, budget_s, row, variants)

    times = time_side_by_side(variants, repeat)
    row["eager_ms"] = times["eager"] * 1e3
    row["compile_ms"] = times["compile"] * 1e3 if "compile" in times else None
    row["ollie_ms"] = times["ollie"] * 1e3
    row["eager_over_ollie"] = times["eager"] / times["ollie"]
    row["compile_over_ollie"] = (times["compile"] / times["ollie"]) if "compile" in times else None
    # Two timings of one compiled function: how far apart identical code measures here.
    row["noise"] = (times["compile_copy"] / times["compile"]) if "compile" in times else None
    for name in ("aoti", "ollie_aoti"):
        if name in times:
            row[f"{name}_ms"] = times[name] * 1e3
    return row


def _add_exported(fn, args, expected, budget_s: float, row: dict, variants: dict) -> None:
    """The case deployed: ``torch.export`` and ``ollie.export``, each packaged by AOTInductor
    and loaded back (the variants ``aoti`` and ``ollie_aoti``)."""
    import tempfile

    import torch

    import ollie
    from ollie.cli.bench_suite import as_module

    module = as_module(fn)
    folder = tempfile.mkdtemp(prefix="ollie-bench-")
    programs = {"aoti": lambda: torch.export.export(module, args),
                "ollie_aoti": lambda: ollie.export(module, args, options={"budget_s": budget_s})}
    for name, build in programs.items():
        t0 = time.perf_counter()
        try:
            path = torch._inductor.aoti_compile_and_package(
                build(), package_path=os.path.join(folder, f"{name}.pt2"))
            runner = torch._inductor.aoti_load_package(path)
            with torch.no_grad():
                row[f"{name}_error"] = max_relative_error(runner(*args), expected)
            row["match"] = row["match"] and row[f"{name}_error"] <= row["allowed_error"]
            variants[name] = lambda runner=runner: runner(*args)
        except Exception as e:  # a failed export is a result, not a crash
            row[f"{name}_note"] = f"failed: {_first_line(e)}"
        row[f"{name}_build_s"] = round(time.perf_counter() - t0, 3)


def _finite(value):
    """JSON has no infinity or NaN: write those floats as strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _load_warning() -> str | None:
    """A caption when other processes compete for the cores the timings ran on."""
    try:
        load, cores = os.getloadavg()[0], os.cpu_count() or 1
    except (AttributeError, OSError):
        return None
    if load <= cores:
        return None
    return f"load average {load:.1f} on {cores} cores: other processes compete, timings are noisy"


def _ms(v) -> str:
    return "—" if v is None else (f"{v:.3f}" if v < 10 else f"{v:.1f}")


def _ratio(v) -> str:
    return "—" if v is None else f"{v:.2f}×"


def table(rows: list[dict], scale: float):
    import torch
    from rich.table import Table

    t = Table(title=f"ollie bench (CPU, {torch.get_num_threads()} threads, scale {scale:g}; "
                    "median ms per call)", caption=_load_warning())
    exported = any("aoti_build_s" in r for r in rows)
    columns = [("case", "left"), ("eager ms", "right"), ("compile ms", "right"),
               ("ollie ms", "right"), ("eager/ollie", "right"), ("compile/ollie", "right"),
               ("noise", "right")]
    if exported:
        columns += [("aoti ms", "right"), ("ollie aoti ms", "right"),
                    ("aoti/ollie aoti", "right")]
    columns += [("first call s (compile / ollie)", "right"), ("max rel err", "right"),
                ("match", "center"), ("ollie plan", "left")]
    for col, justify in columns:
        t.add_column(col, justify=justify)
    for r in rows:
        if "error" in r:
            t.add_row(r["case"], *["—"] * (len(columns) - 3), "[red]✗[/]",
                      f"[red]{r['error']}[/]")
            continue
        compile_ms = _ms(r["compile_ms"]) if r["compile_ms"] is not None else r["compile_note"]
        cells = [r["case"], _ms(r["eager_ms"]), compile_ms, _ms(r["ollie_ms"]),
                 _ratio(r["eager_over_ollie"]), _ratio(r["compile_over_ollie"]),
                 _ratio(r.get("noise"))]
        if exported:
            aoti, ollie_aoti = r.get("aoti_ms"), r.get("ollie_aoti_ms")
            cells += [_ms(aoti) if aoti else r.get("aoti_note", "—"),
                      _ms(ollie_aoti) if ollie_aoti else r.get("ollie_aoti_note", "—"),
                      _ratio(aoti / ollie_aoti if aoti and ollie_aoti else None)]
        cells += [f"{r.get('compile_warmup_s', '—')} / {r['ollie_warmup_s']}",
                  f"{r['max_rel_error']:.1e}", "[green]✓[/]" if r["match"] else "[red]✗[/]",
                  r["ollie_plan"]]
        t.add_row(*cells)
    return t


def _one_compile_worker() -> None:
    """torch.compile's pool of compile workers starts in the background and, on a machine with
    few cores, steals CPU from the timings that follow; compile in-process unless told."""
    if "TORCHINDUCTOR_COMPILE_THREADS" not in os.environ:
        os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
        import torch._inductor.config as inductor_config
        inductor_config.compile_threads = 1


def run(args, out=None) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    out = out or sys.stdout
    if args.repeat < 1 or not args.scale > 0 or not math.isfinite(args.scale):
        raise UsageError("--repeat and --scale must be positive")
    if getattr(args, "suite", "cpu") == "gpu":
        from ollie.cli import bench_gpu_run
        args.cases_text = args.cases
        return bench_gpu_run.run(args, out)
    suite = getattr(args, "suite", "cpu")
    if isinstance(args.cases, str):
        try:
            args.cases = _case_list(args.cases, suite)
        except argparse.ArgumentTypeError as e:
            raise UsageError(str(e)) from None
    cases = args.cases or suite_cases(suite)[0]
    if getattr(args, "first_call", False):
        from ollie.cli import first_call
        return first_call.run(suite, cases, args, out)
    if suite == "sizes":
        from ollie.cli import bench_sizes
        _one_compile_worker()
        return bench_sizes.run(cases, args, out)
    if not args.no_compile:
        _one_compile_worker()
    rows = []
    err_console = Console(file=sys.stderr)
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/"
                  "{task.total}"), TimeElapsedColumn(), console=err_console,
                  transient=True) as progress:
        task = progress.add_task("bench", total=len(cases))
        for case in cases:
            progress.update(task, description=f"bench: {case.name}")
            try:
                rows.append(run_case(case, args.scale, args.repeat, args.budget_s,
                                     not args.no_compile, getattr(args, "export", False),
                                     args.measure_top))
            except Exception as e:  # one broken case must not hide the others' results
                rows.append({"case": case.name, "description": case.description,
                             "error": _first_line(e)})
            progress.advance(task)
    if args.json:
        print(json.dumps(_finite(rows), indent=2, default=str), file=out)
    else:
        console = Console(file=out, width=None if out.isatty() else 160)
        console.print(table(rows, args.scale))
    return 0 if all(r.get("match") for r in rows) else 1
