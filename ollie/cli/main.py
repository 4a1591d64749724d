"""The ``ollie`` command: ``demo``, ``derive``, ``bench``, ``repl``, ``cache`` and ``tune``.

``main(argv)`` returns the exit status (0 success, 1 a failed check or an internal error,
2 a usage error), so tests can call it directly; every mistake prints one clear message to
stderr, never a traceback (``OLLIE_TRACEBACK=1`` shows one for an internal error). Nothing
heavy (torch, egglog, sympy) is imported until a command runs: ``ollie --help`` and argument
checking start at once.
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings

from ollie.cli import args as cli_args
from ollie.cli import bench as bench_cmd
from ollie.cli import derive as derive_cli
from ollie.cli.args import positive_float, positive_int

DEMO_SHAPES = {"a": (512, 1024), "b": (1024, 1024), "c": (1024, 16)}


def demo(args, out) -> int:
    """``(a @ b) @ c`` through ``torch.compile(backend="ollie")``: the derivation Ollie found,
    the check against eager, and one side-by-side timing against eager and torch.compile."""
    import torch

    import ollie
    import ir

    def chain(a, b, c):
        return (a @ b) @ c

    shapes = {n: tuple(max(1, round(d * args.scale)) for d in s) for n, s in DEMO_SHAPES.items()}
    g = torch.Generator().manual_seed(0)
    a, b, c = (torch.randn(*s, generator=g) for s in shapes.values())
    print("Ollie demo: the matmul chain (a @ b) @ c with "
          + ", ".join(f"{n}: {list(s)}" for n, s in shapes.items()), file=out)
    print("eager PyTorch (and torch.compile) multiply left to right: a @ b comes first.\n",
          file=out)

    optimized = ollie.optimize(chain, budget_s=args.budget_s)
    with torch.no_grad():
        expected, got = chain(a, b, c), optimized(a, b, c)
    for report in optimized.backend.reports:
        for region in report.regions:
            print(f"{report.title}, region {region.root_name}: "
                  f"{' → '.join(region.ops)}", file=out)
            print("  captured:\n" + _indent(ir.to_text(ir.readable(region.original))), file=out)
            if region.chosen is not None:
                print("  rule chain: " + " → ".join(region.rule_chain), file=out)
                print("  derived:\n" + _indent(ir.to_text(ir.readable(region.chosen))), file=out)
            used = region.kernel is not None and report.adopted
            print("  decision: " + ("the derived program runs" if used else region.decision.text
                                    if region.kernel is None else "kept: the compiled "
                                    "original was as fast"), file=out)
    err = bench_cmd.max_relative_error(got, expected)
    ok = err <= bench_cmd.tolerance(chain, (a, b, c), expected)
    print(f"\ncheck against eager: max relative error {err:.2e} "
          f"({'OK' if ok else 'MISMATCH'})", file=out)

    compiled = torch.compile(chain)
    with torch.no_grad():  # the mode the timings run in
        compiled(a, b, c)
    times = bench_cmd.time_side_by_side({"eager": lambda: chain(a, b, c),
                                         "torch.compile": lambda: compiled(a, b, c),
                                         "ollie": lambda: optimized(a, b, c)}, args.repeat)
    print(f"median time ({torch.get_num_threads()} CPU threads, {args.repeat} interleaved "
          f"rounds): eager {times['eager'] * 1e3:.3f} ms, torch.compile "
          f"{times['torch.compile'] * 1e3:.3f} ms, ollie {times['ollie'] * 1e3:.3f} ms → "
          f"{times['eager'] / times['ollie']:.2f}× over eager, "
          f"{times['torch.compile'] / times['ollie']:.2f}× over torch.compile", file=out)
    print("(`ollie.explain` shows every candidate, its measurements and what was left to "
          "Inductor)", file=out)
    return 0 if ok else 1


def _indent(text: str, n: int = 4) -> str:
    return "\n".join(" " * n + line for line in text.splitlines())


def repl(args, out) -> int:
    from ollie.cli.repl import Repl

    Repl(history_file=None if args.no_history else Repl.DEFAULT_HISTORY).cmdloop()
    return 0


def cache(args, out) -> int:
    from ollie import cache as cache_mod

    if args.action == "info":
        print(cache_mod.cache_info_command(args.dir), file=out)
    else:
        print(cache_mod.cache_clear_command(args.dir, measurements=args.all), file=out)
    return 0


def tune(args, out) -> int:
    from ollie.cost import tune as tune_mod

    print(tune_mod.tune_command(args.cases, args.dir, budget_s=args.budget_s), file=out)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = cli_args.Parser(
        prog="ollie", description="Ollie: derivation-based tensor program optimizer "
        "(index-summation expressions rewritten on an e-graph).")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    d = sub.add_parser("demo", help="optimize (a @ b) @ c, explain it, check and time it")
    d.add_argument("--scale", type=positive_float, default=1.0,
                   help="multiply the sizes by this (> 0)")
    d.add_argument("--repeat", type=positive_int, default=20, help="timed rounds (median)")
    d.add_argument("--budget-s", type=positive_float, default=2.0,
                   help="derivation budget (s)")
    d.set_defaults(run=demo)

    d = sub.add_parser("derive", help="derive equivalent forms of an expression",
                       description=derive_cli.__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    derive_cli.add_arguments(d)
    d.set_defaults(run=derive_cli.run)

    d = sub.add_parser("bench", help="eager vs torch.compile vs Ollie on built-in cases")
    bench_cmd.add_arguments(d)
    d.set_defaults(run=bench_cmd.run)

    d = sub.add_parser("repl", help="an interactive session: declare, derive, show, run")
    d.add_argument("--no-history", action="store_true", help="do not read or write "
                   "~/.ollie_history")
    d.set_defaults(run=repl)

    d = sub.add_parser("cache", help="the persistent cache of optimization decisions")
    d.add_argument("action", choices=("info", "clear"))
    d.add_argument("--all", action="store_true", help="with clear: also the measurements "
                   "the cost model learns from")
    d.add_argument("--dir", default=None, help="cache folder (default $OLLIE_CACHE_DIR or "
                   "the per-user cache)")
    d.set_defaults(run=cache)

    d = sub.add_parser("tune", help="measure more programs on this machine and retrain the "
                       "learned cost model")
    d.add_argument("--cases", type=positive_int, default=40,
                   help="random operator cases to measure")
    d.add_argument("--budget-s", type=positive_float, default=None,
                   help="seconds of measuring at most")
    d.add_argument("--dir", default=None, help="cache folder for the dataset and the model")
    d.set_defaults(run=tune)

    from ollie.cli import rules as rules_cli  # argparse only: the synthesis loads when run
    d = sub.add_parser("rules", help=rules_cli.HELP, description=rules_cli.__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    rules_cli.add_arguments(d)
    d.set_defaults(run=rules_cli.run)
    return p


def _user_errors() -> tuple[type[BaseException], ...]:
    """Errors a user's input causes (imported only once one happened)."""
    from ir.errors import IRError
    from ollie.cache import CacheRefused
    from ollie.cli.torch_text import TorchExprError

    found = [cli_args.UsageError, IRError, TorchExprError, CacheRefused]
    if "derivations" in sys.modules:  # it can only have been raised if derivations ran
        from derivations import InputTooDeep
        found.append(InputTooDeep)
    return tuple(found)


def _one_line_warnings() -> None:
    """Ollie's own warnings (an untrusted cache folder, a region left eager) as the one line
    they are, not Python's ``file:line: Category: message`` plus a source line."""
    shown = warnings.showwarning
    if getattr(shown, "ollie_one_line", False):
        return

    def show(message, category, filename, lineno, file=None, line=None):
        if category.__name__ in ("CacheWarning", "OllieWarning"):
            print(str(message).strip().splitlines()[0], file=file or sys.stderr)
            return
        shown(message, category, filename, lineno, file, line)

    show.ollie_one_line = True
    warnings.showwarning = show


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse already printed the usage message
        return int(e.code or 0)
    out = sys.stdout
    _one_line_warnings()
    try:
        return args.run(args, out)
    except BrokenPipeError:  # `ollie derive ... | head`: the reader left, that is fine
        sys.stdout = open(os.devnull, "w")
        return 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if isinstance(e, _user_errors()):
            cli_args.say_error(args.command, e)
            return 2
        if os.environ.get("OLLIE_TRACEBACK"):
            raise
        print(f"ollie {args.command}: internal error: {type(e).__name__}: "
              f"{cli_args.first_line(e)[:300]} (OLLIE_TRACEBACK=1 shows where)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
