"""``ollie bench --first-call``: compile time as a user meets it.

Each case's first call is timed in a fresh process: torch.compile's with fresh caches, Ollie's
with fresh caches (Inductor's, AOTAutograd's and Ollie's own), each in its own process. Then
each runs once more in a second process with the caches the first one left (a warm start),
where Ollie must neither derive nor measure. The child process is this module:

    python -m ollie.cli.first_call SUITE CASE VARIANT [MEASURE_TOP]

prints one JSON line: the first call's seconds, the regions derived and the comparisons timed,
Inductor's compiles and their seconds, and (Ollie's) the candidates measured in the derived
regions, the regions reused from the cache, the operators left underived, and the
derivation's seconds against the graphs' budget.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

VARIANTS = ("compile", "ollie")


def child(suite: str, case_name: str, variant: str, measure_top: str = "2") -> dict:
    import torch
    from torch._dynamo.utils import compilation_time_metrics, counters

    import ollie
    from ollie.cli.bench import measured_candidates, suite_cases
    from ollie.cost import measure

    compares = []
    timed = measure.compare

    def counted(*a, **k):
        compares.append(1)
        return timed(*a, **k)

    measure.compare = counted
    fn, args = suite_cases(suite)[1][case_name].make(1.0)
    t0 = time.perf_counter()
    compiled = torch.compile(fn) if variant == "compile" else ollie.optimize(
        fn, measure_top=int(measure_top))
    with torch.no_grad():
        compiled(*args)
    seconds = time.perf_counter() - t0
    out = {"seconds": seconds, "derived": 0, "compares": len(compares),
           "inductor_compiles": counters["inductor"]["fxgraph_cache_miss"],
           "inductor_s": sum(compilation_time_metrics.get("compile_fx_inner", ()))}
    if variant == "ollie":
        regions = [r for report in compiled.backend.reports for r in report.regions]
        measured = measured_candidates(compiled.backend)
        out.update(derived=measured["regions_derived"], measured=measured["candidates_measured"],
                   measure_s=measured["measure_s"], reused=sum(r.cached for r in regions),
                   derive_s=sum(r.derive_s for r in regions if not r.cached),
                   budget_s=compiled.backend.options.budget_s * len(compiled.backend.reports),
                   not_derived=sum(why.startswith("translated, not derived")
                                   for report in compiled.backend.reports
                                   for _, _, why in report.left))
    return out


def spawn(module: str, args: list[str], caches: str):
    """The JSON line ``python -m module *args`` prints last, run in a fresh process whose
    caches (Inductor's, AOTAutograd's, Ollie's) live in ``caches``; ``{"error": ...}`` when
    it fails."""
    # Inductor's compile workers as the user's environment sets them (by default, a pool)
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": os.path.join(caches, "inductor"),
           "OLLIE_CACHE_DIR": os.path.join(caches, "ollie")}
    result = subprocess.run([sys.executable, "-m", module, *args],
                            capture_output=True, text=True, env=env, timeout=1800)
    if result.returncode != 0:
        tail = (result.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": tail[:160]}
    return json.loads(result.stdout.strip().splitlines()[-1])


def run(suite: str, cases, args, out) -> int:
    from rich.console import Console
    from rich.table import Table

    rows = []
    for case in cases:
        row = {"case": case.name}
        for variant in VARIANTS:
            with tempfile.TemporaryDirectory(prefix="ollie-first-call-") as caches:
                for name in (variant, variant + "_warm"):  # cold, then the caches it left
                    row[name] = spawn("ollie.cli.first_call",
                                      [suite, case.name, variant, str(args.measure_top)], caches)
        rows.append(row)
    if args.json:
        print(json.dumps(rows, indent=2), file=out)
        return 0
    table = Table(title="first call in a fresh process, seconds (cold: fresh caches; "
                        "warm: the caches a first process left)")
    for col in ("case", "compile cold", "ollie cold", "ollie/compile", "compile warm",
                "ollie warm", "ollie/compile", "ollie warm: derived, timed",
                "cold Inductor compiles (s): compile / ollie",
                "ollie cold: regions derived (candidates measured, seconds measuring), "
                "reused; operators not derived; derivation s (budget)"):
        table.add_column(col, justify="left" if col == "case" else "right")
    for r in rows:
        cells = [r["case"]]
        for kind in ("", "_warm"):
            c, o = r["compile" + kind], r["ollie" + kind]
            cells += [_s(c), _s(o), f"{o['seconds'] / c['seconds']:.2f}×"
                      if "seconds" in c and "seconds" in o else "—"]
        warm, cold = r["ollie_warm"], r["ollie"]
        cells.append(f"{warm.get('derived', '—')}, {warm.get('compares', '—')}")
        cells.append(" / ".join(f"{v['inductor_compiles']} ({v['inductor_s']:.1f})"
                                if "inductor_s" in v else "—"
                                for v in (r["compile"], cold)))
        cells.append(f"{cold['derived']} ({cold['measured']}, {cold['measure_s']:.1f}), "
                     f"{cold['reused']}; "
                     f"{cold['not_derived']}; "
                     f"{cold['derive_s']:.1f} ({cold['budget_s']:g})" if "reused" in cold
                     else "—")
        table.add_row(*cells)
    Console(file=out, width=None if out.isatty() else 160).print(table)
    return 0


def _s(result: dict) -> str:
    return f"{result['seconds']:.2f}" if "seconds" in result else result.get("error", "—")


if __name__ == "__main__":
    print(json.dumps(child(*sys.argv[1:5])))
