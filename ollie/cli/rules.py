"""``ollie rules``: the synthesized rewrite rules (see docs/rules.md).

    ollie rules synthesize --size 5                 regenerate derivations/rules/generated.py
    ollie rules synthesize --size 3 --out -         print what size 3 would give
    ollie rules synthesize --check                  is the checked-in file up to date?
    ollie rules synthesize --graph                  regenerate derivations/rules/graph_generated.py
    ollie rules list                                the rules, their tags, which ones load
    ollie rules verify 'log(a * b) = log(a) + log(b)'   verify one rule (finds side conditions)

This module stays light (argparse only) so that ``ollie --help`` is fast; the synthesis is
imported when a command runs.
"""
from __future__ import annotations

import argparse
import sys

HELP = "synthesize, list and verify the generated rewrite rules"


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    s = sub.add_parser("synthesize", help="enumerate, verify and prune rules; write the file")
    s.add_argument("--size", type=int, default=None, help="largest term size (nodes) "
                   "enumerated (default: the checked-in file's)")
    s.add_argument("--ops", default=None, help="comma-separated operators (default: the "
                   "checked-in file's): add,sub,mul,neg,scale,sum,transpose,broadcast,diag,"
                   "exp,log")
    s.add_argument("--out", default=None, help="where to write (default: "
                   "derivations/rules/generated.py; '-' for standard output)")
    s.add_argument("--check", action="store_true", help="write nothing; exit 1 if the "
                   "checked-in file differs from what would be written")
    s.add_argument("--graph", action="store_true", help="rules over graph operators (mm, conv, "
                   "add, mul, scale, transpose, cat, slices) instead: "
                   "derivations/rules/graph_generated.py")
    sub.add_parser("list", help="the generated rules, their tags and which ones load")
    v = sub.add_parser("verify", help="verify one rule 'lhs = rhs' over the synthesis terms")
    v.add_argument("rule", help="e.g. 'exp(a + b) = exp(a) * exp(b)'")


def run(args, out=sys.stdout) -> int:
    from ollie.cli.derive import UsageError

    if args.action == "synthesize" and args.graph:
        return _synthesize_graph(args, out, UsageError)
    if args.action == "synthesize":
        return _synthesize(args, out, UsageError)
    if args.action == "list":
        return _list(out)
    return _verify(args.rule, out, UsageError)


def _synthesize(args, out, UsageError) -> int:
    from derivations.rules import generated
    from derivations.synthesis.emit import GENERATED_PATH, classify, rederived, render
    from derivations.synthesis.synthesize import synthesize

    size = generated.SIZE if args.size is None else args.size
    ops = generated.OPS if args.ops is None else tuple(o.strip() for o in args.ops.split(",")
                                                       if o.strip())
    if not 1 <= size <= 7:
        raise UsageError(f"--size must be between 1 and 7, got {size}")
    try:
        syn = synthesize(size, ops)
    except ValueError as e:  # an unknown operator
        raise UsageError(str(e)) from None
    text = render(syn, classify(syn.kept))
    print(syn.summary(), file=sys.stderr)
    for name, rows in rederived(syn.kept).items():
        found = sum(ok for _, ok in rows)
        print(f"  hand-written {name}: {found}/{len(rows)} of its rules re-derived", file=sys.stderr)
    return _write(text, GENERATED_PATH, args, out, f"--size {size}", len(syn.kept))


def _synthesize_graph(args, out, UsageError) -> int:
    from derivations.rules import graph_generated
    from derivations.synthesis import graph

    size = graph_generated.SIZE if args.size is None else args.size
    if not 1 <= size <= 3 or args.ops is not None:
        raise UsageError("--graph takes --size 1 to 3 (size 4 enumerates many times the "
                         "terms, and each candidate's proof grows with its size symbols) and "
                         "no --ops")
    syn = graph.synthesize(size, _progress)
    print(f"\r{syn.summary()}", file=sys.stderr)
    return _write(graph.render(syn), graph.GRAPH_PATH, args, out, f"--graph --size {size}",
                  len(syn.kept))


def _progress(i: int, n: int) -> None:
    if i % 50 == 0:
        print(f"\rverifying candidate {i}/{n}", end="", file=sys.stderr, flush=True)


def _write(text: str, default_path, args, out, flags: str, kept: int) -> int:
    """Check, print or write a generated rule file."""
    if args.check:
        if default_path.read_text() == text:
            print(f"{default_path} is up to date", file=out)
            return 0
        print(f"{default_path} differs from what the generator writes: run "
              f"'ollie rules synthesize {flags}'", file=out)
        return 1
    if args.out == "-":
        out.write(text)
        return 0
    path = default_path if args.out is None else args.out
    with open(path, "w") as f:
        f.write(text)
    print(f"wrote {kept} rules to {path}", file=out)
    return 0


def _list(out) -> int:
    from derivations.rules.generated import RULES, SIZE
    from derivations.rules.synthesized import loaded_rules
    from derivations.synthesis.emit import math_text
    from derivations.synthesis.lang import parse_rule, rule_text

    loaded = {rule_text(r) for r in loaded_rules()}
    print(f"{len(RULES)} generated rules (terms up to {SIZE} nodes); * = in the egglog "
          f"ruleset 'generated'", file=out)
    for text, tag in RULES:
        mark = "*" if text in loaded else " "
        print(f"{mark} {text:<48} {tag:<13} {math_text(parse_rule(text))}", file=out)
    return 0


def _verify(text: str, out, UsageError) -> int:
    from derivations.synthesis.lang import ParseError, parse_rule, rule_text
    from derivations.synthesis.verify import sizes_for, verify_rule

    try:
        r = parse_rule(text)
    except ParseError as e:
        raise UsageError(str(e)) from None
    v = verify_rule(r.lhs, r.rhs)
    sizes = sizes_for(r.lhs, r.rhs)
    if v:
        cond = f" if {', '.join(p + ' > 0' for p in v.positive)}" if v.positive else ""
        print(f"verified{cond} ({v.method}, extents {sizes.start}..{sizes.stop - 1}): "
              f"{rule_text(r)}", file=out)
        return 0
    print(f"not verified: {rule_text(r)}\n  {v.reason}", file=out)
    return 1
