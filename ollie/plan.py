"""Execution plans: the traced graph with some regions replaced by compiled kernels.

A plan is a flat list of steps run in order over an environment of values, so a cached call
costs one pass over a short list. Nodes folded into a kernel are skipped.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.fx as fx


@dataclass
class KernelStep:
    node: fx.Node
    kernel: Callable
    input_nodes: tuple[fx.Node, ...]


class Plan:
    """Runs ``gm``'s graph with ``kernels`` (root node -> KernelStep) in place of regions."""

    def __init__(self, gm: fx.GraphModule, kernels: dict[fx.Node, KernelStep],
                 skipped: set[fx.Node]):
        self.gm = gm
        self.steps: list[tuple[str, Any]] = []
        self.output_node = None
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                self.steps.append(("input", node))
            elif node.op == "output":
                self.output_node = node
            elif "static_value" in node.meta:  # shape arithmetic: fixed for this plan
                self.steps.append(("const", node))
            elif node in kernels:
                self.steps.append(("kernel", kernels[node]))
            elif node not in skipped:
                self.steps.append(("eager", node))

    def __call__(self, *args):
        env: dict[fx.Node, Any] = {}
        arg_iter = iter(args)
        for kind, item in self.steps:
            if kind == "kernel":
                env[item.node] = item.kernel(*[env[n] for n in item.input_nodes])
            elif kind == "eager":
                env[item] = run_node(self.gm, item, env)
            elif kind == "const":
                env[item] = item.meta["static_value"]
            else:
                env[item] = next(arg_iter)
        return fx.node.map_arg(self.output_node.args[0], env.__getitem__)


def run_node(gm: fx.GraphModule, node: fx.Node, env: dict) -> Any:
    """Evaluate one fx node eagerly, its inputs taken from ``env``."""
    args = fx.node.map_arg(node.args, env.__getitem__)
    kwargs = fx.node.map_arg(node.kwargs, env.__getitem__)
    if node.op == "call_function":
        return node.target(*args, **kwargs)
    if node.op == "call_method":
        self_obj, *rest = args
        return getattr(self_obj, node.target)(*rest, **kwargs)
    if node.op == "call_module":
        return gm.get_submodule(node.target)(*args, **kwargs)
    if node.op == "get_attr":
        obj = gm
        for part in node.target.split("."):
            obj = getattr(obj, part)
        return obj
    raise RuntimeError(f"cannot run fx node {node.format_node()}")


def record_values(gm: fx.GraphModule, args: tuple) -> dict[fx.Node, Any]:
    """Run the graph eagerly and keep every node's value (the reference for verification)."""
    env: dict[fx.Node, Any] = {}
    arg_iter = iter(args)
    with torch.no_grad():
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                env[node] = next(arg_iter)
            elif node.op != "output":
                env[node] = run_node(gm, node, env)
    return env


def tolerance(dtype: torch.dtype) -> float:
    """Relative tolerance for comparing a reordered computation with eager."""
    return {torch.float16: 1e-2, torch.bfloat16: 5e-2, torch.float64: 1e-9}.get(dtype, 1e-4)


def max_relative_error(out, ref: torch.Tensor) -> float:
    """max |out - ref| / max(1, max |ref|): robust to sign changes and near-zero entries
    (inf when ``out`` is not a tensor of ``ref``'s shape)."""
    if not isinstance(out, torch.Tensor) or out.shape != ref.shape:
        return float("inf")
    if ref.numel() == 0:
        return 0.0
    diff = (out.double() - ref.double()).abs().max().item()
    scale = max(1.0, ref.double().abs().max().item())
    return diff / scale if diff == diff else float("inf")  # NaN counts as a failure


def interleaved_times(fns: list[Callable[[], Any]], budget_s: float = 0.5, min_rounds: int = 5,
                      max_rounds: int = 100) -> list[tuple[float, float]]:
    """(median, best) seconds of each function, timed in interleaved rounds after a warm-up.

    Interleaving makes every function see the same background load, so their ratio is
    meaningful on a noisy shared machine even when absolute times are not; the best time is
    what contention cannot inflate, so decisions compare best times.
    """
    for fn in fns:
        fn()
    times: list[list[float]] = [[] for _ in fns]
    start = time.perf_counter()
    rounds = 0
    while rounds < max_rounds and (rounds < min_rounds or time.perf_counter() - start < budget_s):
        for fn, ts in zip(fns, times):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        rounds += 1
    return [(statistics.median(ts), min(ts)) for ts in times]
