"""Frontend: turn the supported nodes of an fx graph into composed ``ir`` expressions.

Each supported torch operation becomes an operator-library expression whose operands are the
expressions of its producers, so a chain of neighbouring operators becomes ONE nested
expression and derivation rules can work across operator boundaries. A node's value is
*materialised* (becomes the root of a region, i.e. a kernel output) when something outside
the supported world needs it: an eager node, the function's output, or more than one user.
Everything not supported stays an eager node, with the reason recorded for ``explain``.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field

import torch
import torch.fx as fx
import torch.nn.functional as F

import ir
from ir import ops
from ollie.capture import static_value, tensor_meta

# torch target (function, or method name for call_method) -> operator-library builder.
# Builders take torch's own argument names, so fx args/kwargs pass straight through.
OPERATORS = {
    operator.matmul: ops.matmul, torch.matmul: ops.matmul, "matmul": ops.matmul,
    "__matmul__": ops.matmul, torch.bmm: ops.bmm, "bmm": ops.bmm,
    torch.einsum: ops.einsum, torch.functional.einsum: ops.einsum,
    F.linear: ops.linear,
    F.conv1d: ops.conv1d, torch.conv1d: ops.conv1d,
    F.conv2d: ops.conv2d, torch.conv2d: ops.conv2d,
    F.conv_transpose2d: ops.conv_transpose2d, torch.conv_transpose2d: ops.conv_transpose2d,
    operator.add: ops.add, torch.add: ops.add, "add": ops.add, "__add__": ops.add,
    operator.sub: ops.sub, torch.sub: ops.sub, "sub": ops.sub, "__sub__": ops.sub,
    operator.mul: ops.mul, torch.mul: ops.mul, "mul": ops.mul, "__mul__": ops.mul,
    operator.truediv: ops.div, torch.div: ops.div, "div": ops.div, "__truediv__": ops.div,
    torch.maximum: ops.maximum, torch.minimum: ops.minimum,
    operator.neg: ops.neg, torch.neg: ops.neg, "neg": ops.neg,
    torch.relu: ops.relu, F.relu: ops.relu, "relu": ops.relu,
    torch.exp: ops.exp, "exp": ops.exp, torch.log: ops.log, "log": ops.log,
    torch.tanh: ops.tanh, "tanh": ops.tanh, torch.sigmoid: ops.sigmoid, "sigmoid": ops.sigmoid,
    torch.sqrt: ops.sqrt, "sqrt": ops.sqrt, torch.abs: ops.abs, "abs": ops.abs,
    torch.sum: ops.sum, "sum": ops.sum, torch.mean: ops.mean, "mean": ops.mean,
    torch.amax: ops.amax, "amax": ops.amax, torch.amin: ops.amin, "amin": ops.amin,
    torch.softmax: ops.softmax, F.softmax: ops.softmax, "softmax": ops.softmax,
    torch.log_softmax: ops.log_softmax, F.log_softmax: ops.log_softmax,
    "log_softmax": ops.log_softmax,
    torch.transpose: ops.transpose, "transpose": ops.transpose, torch.permute: ops.permute,
    "permute": ops.permute, torch.reshape: ops.reshape, "reshape": ops.reshape,
    "view": ops.reshape, torch.flatten: ops.flatten, "flatten": ops.flatten,
    torch.squeeze: ops.squeeze, "squeeze": ops.squeeze, torch.unsqueeze: ops.unsqueeze,
    "unsqueeze": ops.unsqueeze, "unfold": ops.unfold, F.pad: ops.pad,
    torch.cat: ops.cat, torch.stack: ops.stack, "expand": ops.expand,
    "contiguous": ops.contiguous, "as_strided": ops.as_strided, torch.as_strided: ops.as_strided,
    operator.getitem: ops.getitem,
}

FLOATING = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
            torch.bfloat16: "bfloat16"}


class Unsupported(Exception):
    """A node that stays eager; the message says why."""


@dataclass
class Region:
    """A materialised expression: ``root``'s value computed by ``expr`` from ``inputs``."""

    root: fx.Node
    expr: ir.Scope
    inputs: dict[str, fx.Node]            # ir tensor name -> the fx node that provides it
    members: list[fx.Node]                # fx nodes folded into ``expr`` (root included)


@dataclass
class Translation:
    regions: list[Region]
    eager_reasons: dict[fx.Node, str] = field(default_factory=dict)


def _target_key(node: fx.Node):
    return node.target if node.op in ("call_function", "call_method") else None


def _builder(node: fx.Node):
    key = _target_key(node)
    try:
        return OPERATORS.get(key)
    except TypeError:  # unhashable target
        return None


def translate(gm: fx.GraphModule) -> Translation:
    """Compose supported nodes into regions; shapes must already be propagated."""
    forced: set[fx.Node] = set()
    while True:  # a node whose user turned out eager must be materialised: retry with it forced
        result, newly_forced = _translate_once(gm, forced)
        if not newly_forced:
            return result
        forced |= newly_forced


def _translate_once(gm: fx.GraphModule, forced: set[fx.Node]):
    exprs: dict[fx.Node, ir.Scope] = {}
    members: dict[fx.Node, list[fx.Node]] = {}
    region_inputs: dict[fx.Node, dict[str, fx.Node]] = {}
    reasons: dict[fx.Node, str] = {}
    newly_forced: set[fx.Node] = set()

    def materialised(n: fx.Node) -> bool:
        if n not in exprs:
            return False
        users = [u for u in n.users if static_value(u) is None]  # shape queries need no value
        return (n in forced or len(users) != 1 or users[0].op == "output"
                or _builder(users[0]) is None)

    for node in gm.graph.nodes:
        if static_value(node) is not None:
            continue  # shape arithmetic: a constant for the plan
        builder = _builder(node)
        if builder is None:
            if node.op in ("call_function", "call_method", "call_module"):
                reasons[node] = f"no Ollie operator for {_describe(node)}"
            continue
        ins: dict[str, fx.Node] = {}
        folded: list[fx.Node] = []

        def operand(a):
            if isinstance(a, fx.Node):
                if static_value(a) is not None:
                    return static_value(a)
                if a in exprs and not materialised(a):
                    folded.extend(members[a])
                    ins.update(region_inputs[a])
                    return exprs[a]
                meta = tensor_meta(a)
                if meta is None:
                    raise Unsupported(f"operand {a.name} is not a tensor")
                shape, dtype = meta
                if dtype not in FLOATING:
                    raise Unsupported(f"operand {a.name} has dtype {dtype}")
                ins[a.name] = a
                return ir.Tensor(a.name, shape, FLOATING[dtype])
            if isinstance(a, (list, tuple)):
                return type(a)(operand(x) for x in a)
            if isinstance(a, slice):
                return slice(operand(a.start), operand(a.stop), operand(a.step))
            return a

        try:
            meta = tensor_meta(node)
            if meta is None or meta[1] not in FLOATING:
                raise Unsupported("its result is not a floating-point tensor")
            args = [operand(a) for a in node.args]
            kwargs = {k: operand(v) for k, v in node.kwargs.items()}
            if builder is ops.einsum and len(args) == 2 and isinstance(args[1], (list, tuple)):
                args = [args[0], *args[1]]  # torch.einsum(eq, [a, b]) form
            if builder is ops.as_strided:
                args, kwargs = _offset_from_first_element(node, args, kwargs)
            expr = builder(*args, **kwargs)
            if expr.shape != meta[0]:
                raise Unsupported(f"shape {expr.shape} differs from torch's {meta[0]}")
        except Exception as e:  # an unsupported argument: the node runs eagerly
            reasons[node] = f"{_describe(node)}: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
            for a in node.all_input_nodes:  # its producers must now be materialised
                if a in exprs and not materialised(a):
                    newly_forced.add(a)
            continue
        exprs[node] = expr
        members[node] = folded + [node]
        region_inputs[node] = ins

    regions = [Region(n, exprs[n], region_inputs[n], members[n])
               for n in exprs if materialised(n)]
    return Translation(regions, reasons), newly_forced


def _offset_from_first_element(node: fx.Node, args: list, kwargs: dict):
    """torch's as_strided indexes the *storage*; ``ops.as_strided`` the operand's row-major
    elements. They agree for a contiguous operand once the offset counts from its first
    element (the layout at capture holds for the plan: see ``capture.uses_layout``)."""
    source = node.args[0] if node.args else node.kwargs.get("input")
    if not isinstance(source, fx.Node) or "contiguous" not in source.meta:
        raise Unsupported("as_strided of a value whose layout is unknown")
    if not source.meta["contiguous"]:
        raise Unsupported("as_strided of a non-contiguous tensor")
    own = source.meta["storage_offset"]
    params = dict(zip(("input", "size", "stride", "storage_offset"), args), **kwargs)
    absolute = params.get("storage_offset")
    params["storage_offset"] = 0 if absolute is None else absolute - own
    return [], params


def _describe(node: fx.Node) -> str:
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    if node.op == "call_module":
        return f"module {node.target}"
    t = node.target
    return getattr(t, "__module__", "") + "." + getattr(t, "__name__", str(t))
