"""``ollie derive``: parse an expression, derive equivalent forms, print the candidates.

The expression is either text in the language (``C[i,j] = sum[k] A[i,k] * B[k,j]``; several
statements separated by ``;`` or newlines) or, with ``--torch``, a PyTorch expression over the
declared tensors (``F.conv2d(x, w, padding=1)``). Shapes come from ``--shape NAME=d0,d1``.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from typing import TYPE_CHECKING, Any

from ollie.cli.args import UsageError, positive_float, positive_int  # noqa: F401 (re-exported)
from ollie.cli.args import shape as parse_shape

if TYPE_CHECKING:
    import ir


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("expression", nargs="?", help="statements in the Ollie language "
                   "(separate several with ';'), e.g. 'C[i,j] = sum[k] A[i,k] * B[k,j]'")
    p.add_argument("--torch", metavar="EXPR", help="a PyTorch expression over the declared "
                   "tensors instead, e.g. 'F.conv_transpose2d(x, w, stride=2, padding=1)'")
    p.add_argument("--shape", action="append", type=parse_shape, default=[], metavar="NAME=DIMS",
                   help="declare an input tensor, e.g. --shape A=512,1024 (repeatable)")
    p.add_argument("--budget-s", type=positive_float, default=5.0,
                   help="derivation time budget (s)")
    p.add_argument("--nodes", type=positive_int, default=20_000, help="e-graph node budget")
    p.add_argument("-k", type=positive_int, default=5, help="number of candidates to list")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def build_expression(args) -> "ir.Scope":
    import ir
    from ollie.cli.torch_text import build as build_torch

    shapes: dict[str, tuple[int, ...]] = {}
    for name, shape in args.shape:
        if name in shapes and shapes[name] != shape:
            raise UsageError(f"--shape {name} is given twice with different dimensions")
        shapes[name] = shape
    if args.torch and args.expression:
        raise UsageError("give either an expression or --torch, not both")
    if args.torch:
        expr = build_torch(args.torch, shapes)
    elif args.expression:
        expr = ir.parse(args.expression.replace(";", "\n"), tensors=shapes)
    else:
        raise UsageError("no expression given (write one, or use --torch 'EXPR')")
    ir.check(expr)
    return expr


def _plain(value: Any) -> Any:
    """A JSON-friendly copy of a report value."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def report_dict(report: Any) -> dict:
    """The derivation report (e-graph size, iterations, seconds, stop reason) as a dict."""
    if report is None:
        return {}
    if dataclasses.is_dataclass(report) or isinstance(report, dict):
        return _plain(report)
    if hasattr(report, "__dict__"):
        return _plain({k: v for k, v in vars(report).items() if not k.startswith("_")})
    return {"summary": str(report)}


def derive_candidates(expr: "ir.Scope", budget_s: float, nodes: int, k: int):
    """(candidates sorted by cost, the derivation's report, seconds, the cost callable)."""
    import derivations  # late: the e-graph machinery is only needed here
    from ollie import cost as cost_model

    from ollie import progress

    cost = cost_model.default()
    t0 = time.perf_counter()
    with progress.progress() as show:
        derivation = derivations.derive(
            expr, budget=derivations.Budget(nodes=nodes, seconds=budget_s),
            on_iteration=show.derivation(expr.name or "expression"))
        show.status("ollie: extracting candidates")
        candidates = sorted(derivation.candidates(k, cost), key=lambda c: c.cost)
    seconds = time.perf_counter() - t0
    return candidates, getattr(derivation, "report", None), seconds, cost


def derive_expression(expr: "ir.Scope", budget_s: float, nodes: int, k: int) -> dict:
    """Derive and return the result as plain data (the ``--json`` object)."""
    import ir

    candidates, report, seconds, cost = derive_candidates(expr, budget_s, nodes, k)
    result = {
        "expression": ir.to_text(expr),
        "operators": list(instantiated(expr)),
        "cost": ir.program_cost(expr, cost),
        "cost_unit": cost_unit(cost),
        "candidates": [{"program": ir.to_text(ir.readable(c.program)), "operators": list(c.operators),
                        "rule_chain": list(c.rule_chain), "cost": float(c.cost),
                        "verified": c.verified}
                       for c in candidates],
        "egraph": report_dict(report),
        "seconds": round(seconds, 4),
    }
    result["summary"] = summary(result)
    return result


def instantiated(program: "ir.Scope") -> tuple[str, ...]:
    """What each scope of ``program`` instantiates (``ir.patterns.classify``: matmul, conv,
    g2bmm, ..., eoperator), dependencies first: the same names candidates carry."""
    from derivations.guided import operators as derived_operators
    return derived_operators(program)


def summary(result: dict) -> str:
    """One line: e-graph size, seconds, the chosen candidate's rule chain and operators."""
    best = result["candidates"][0] if result["candidates"] else None
    chain = " → ".join(best["rule_chain"]) if best and best["rule_chain"] else "(original)"
    ops = " + ".join(best["operators"]) if best else "-"
    return (f"e-graph {egraph_summary(result['egraph'])}; {result['seconds']:.2f} s; "
            f"chosen: {chain}; operators: {ops}")


def _indent(text: str, n: int = 4) -> str:
    return "\n".join(" " * n + line for line in text.splitlines())


EGRAPH_KEYS = ("nodes", "classes", "facts", "iterations", "stop")


def egraph_summary(egraph: dict) -> str:
    """``13 nodes, 11 classes, 4 iterations, stop saturated``: the size, not every detail."""
    keys = [k for k in EGRAPH_KEYS if egraph.get(k) is not None] or \
        [k for k, v in egraph.items() if isinstance(v, (int, float, str))]
    return ", ".join(f"{egraph[k]} {k}" if isinstance(egraph[k], int) else f"{k} {egraph[k]}"
                     for k in keys) or "no report"


def cost_unit(cost) -> str:
    """The unit of a cost callable's figures: the learned model predicts seconds (shown as
    estimated µs); the analytic cost counts flops plus weighted bytes (relative units)."""
    from ollie import cost as cost_model
    return "relative" if cost is cost_model.analytic else "s"


def format_cost(value: float, unit: str) -> str:
    """``est. 12.3 µs`` for a cost in seconds, ``4.1e+06 (relative)`` for the analytic one:
    the same in ``derive`` and the REPL."""
    if unit == "s":
        return f"est. {value * 1e6:.4g} µs"
    return f"{value:.4g} (relative units: flops + weighted bytes)"


def relative(cost: float, base: float) -> str:
    """``20.9× cheaper`` / ``1.5× costlier`` / ``same cost`` than ``base``."""
    if cost == base:
        return "same cost as the original"
    if cost < base:
        return f"{base / cost:.2f}× cheaper" if cost > 0 else "free"
    return f"{cost / base:.2f}× costlier" if base > 0 else "costlier"


def format_result(result: dict) -> str:
    unit = result.get("cost_unit", "s")
    lines = ["expression:", _indent(result["expression"], 2),
             f"  operators: {' + '.join(result['operators'])}; "
             f"cost {format_cost(result['cost'], unit)}", "",
             f"derived {len(result['candidates'])} candidate(s) in {result['seconds']:.2f} s "
             f"(e-graph: {egraph_summary(result['egraph'])})"]
    if result.get("summary"):
        lines.append(f"summary: {result['summary']}")
    for n, c in enumerate(result["candidates"], 1):
        checked = {True: "checked", False: "failed", None: "too big to check"}[c.get("verified")]
        lines += ["", f"#{n}  cost {format_cost(c['cost'], unit)} "
                      f"({relative(c['cost'], result['cost'])}; {checked})",
                  _indent(c["program"]),
                  f"    operators: {' + '.join(c['operators'])}",
                  f"    rule chain: {' → '.join(c['rule_chain']) or '(none: the original form)'}"]
    return "\n".join(lines)


def run(args, out) -> int:
    expr = build_expression(args)
    result = derive_expression(expr, args.budget_s, args.nodes, args.k)
    if args.json:
        print(json.dumps(result, indent=2), file=out)
    else:
        print(format_result(result), file=out)
    return 0
