"""Execution plans: the traced graph with some regions replaced by compiled kernels.

A plan is a flat list of steps run in order over an environment of values, so a cached call
costs one pass over a short list. Nodes folded into a kernel are skipped.
"""
from __future__ import annotations

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
