"""Elementwise affine maps folded into the contraction they follow (rows ``affine_into_conv``
and ``affine_into_matmul`` of ``ollie.capture.graph_rules.RULES``):

    conv(x, W, b) · s = conv(x, W·s, b·s)        s per output channel (or a scalar); ÷ s alike
    conv(x, W, b) + t = conv(x, W, b + t)        t per output channel; − t alike
    (A @ B) · s       = A @ (B·s)                s per column; addmm's bias scaled too
    (A @ B) + t       = addmm(t, A, B)           t per column

A matrix product viewed with its columns kept last (a linear layer on a batch of sequences,
flattened, multiplied and viewed back) folds alike, a factor per column or a scalar, and is
viewed back after. A multiply-add spelled ``torch.addcmul(t, A @ B, s)`` (or ``addcdiv``) is
first written out as its steps. An inference batch norm, which AOTAutograd writes as a subtraction of the
running mean, two multiplications (inverse deviation, weight) and a shift, folds away one
step at a time. What the contraction's operands then compute reads weights alone, and in a
graph without grad it is folded once (``ollie.capture.folding``). A factor computed from the
contraction's own result (a training batch norm's batch statistics, a squeeze-and-excite
gate) never folds.
"""
from __future__ import annotations

import torch
import torch.fx as fx

aten = torch.ops.aten
SCALES = {aten.mul.Tensor: aten.mul.Tensor, aten.div.Tensor: aten.div.Tensor}
SHIFTS = {aten.add.Tensor: aten.add.Tensor, aten.sub.Tensor: aten.sub.Tensor}
COMMUTATIVE = {aten.mul.Tensor, aten.add.Tensor}
CONTRACTIONS = {aten.convolution.default: "affine_into_conv",
                aten.mm.default: "affine_into_matmul", aten.addmm.default: "affine_into_matmul"}


# ``addcmul(t, y, s, value=v)`` = t + (y·s)·v; ``addcdiv`` with ÷ s
MULTIPLY_ADDS = {aten.addcmul.default: aten.mul.Tensor, aten.addcdiv.default: aten.div.Tensor}


def fold_affine(graph: fx.Graph, on: set) -> list[str]:
    """Fold every affine step that follows a contraction; a line per fold."""
    _write_out_multiply_adds(graph)
    applied = []
    for n in list(graph.nodes):
        step = _step(n)
        if step is None or CONTRACTIONS[step[0].target] not in on:
            continue
        y, factor, view = step
        with graph.inserting_before(y):
            folded = _folded(graph, n.target, y, factor)
        # the value it replaces, so that the next step of a chain matches
        folded.meta = dict(n.meta if view is None else y.meta)
        result = folded
        if view is not None:
            with graph.inserting_before(n):
                result = graph.call_function(view.target, (folded, *view.args[1:]))
            result.meta = dict(n.meta)
        n.replace_all_uses_with(result)
        for old in (n, view, y):
            if old is not None:
                graph.erase_node(old)
        applied.append(f"{CONTRACTIONS[y.target]}: {n.target.__name__} folded into "
                       f"{y.target.__name__}")
    return applied


def _write_out_multiply_adds(graph: fx.Graph) -> None:
    """An ``addcmul`` or ``addcdiv`` of a contraction's result by a factor that would fold,
    written out as its steps, which then fold one by one (Inductor fuses what is left into one
    kernel again). In float32/64 only: eager rounds a half-precision one once."""
    for n in list(graph.nodes):
        if n.op != "call_function" or n.target not in MULTIPLY_ADDS:
            continue
        shift, *operands = n.args
        orders = [operands, operands[::-1]] if n.target == aten.addcmul.default else [operands]
        out = n.meta.get("val")
        for y, factor in orders:
            if not (isinstance(y, fx.Node) and y.target in CONTRACTIONS and
                    len(y.users) == 1 and "val" in y.meta and isinstance(out, torch.Tensor) and
                    out.dtype in (torch.float32, torch.float64) and
                    y.meta["val"].shape == out.shape and _per_channel(factor, y.meta["val"])):
                continue
            with graph.inserting_before(n):
                result = _written_step(n, MULTIPLY_ADDS[n.target], (y, factor))
                if n.kwargs.get("value", 1) != 1:
                    result = _written_step(n, aten.mul.Tensor, (result, n.kwargs["value"]))
                result = _written_step(n, aten.add.Tensor, (shift, result))
            n.replace_all_uses_with(result)
            graph.erase_node(n)
            break


def _written_step(n: fx.Node, op, args: tuple) -> fx.Node:
    """A step of what ``n`` computes, with ``n``'s shape and dtype."""
    step = n.graph.call_function(op, args)
    step.meta = dict(n.meta)
    return step


def _step(n: fx.Node) -> tuple[fx.Node, object, fx.Node | None] | None:
    """(contraction, factor, view) where ``n`` scales or shifts a contraction's result (its
    only use) by a factor per output channel that does not read that result; ``view``: the
    view of a matrix product's result that ``n`` reads, keeping its columns last (a linear
    layer on a batch of sequences), else None."""
    from ollie.capture.graph_rules import _depends_on, _hoist
    if n.op != "call_function" or n.kwargs or (n.target not in SCALES and
                                                n.target not in SHIFTS):
        return None
    orders = [n.args, n.args[::-1]] if n.target in COMMUTATIVE else [n.args]
    for y, factor in orders:
        view = _columns_view(y)
        if view is not None:
            y = view.args[0]
            if not _per_channel(factor, view.meta["val"], channel=-1):
                continue
        if not (isinstance(y, fx.Node) and y.op == "call_function" and
                y.target in CONTRACTIONS and len(y.users) == 1 and "val" in y.meta):
            continue
        if y.kwargs or y.target == aten.convolution.default and y.args[6]:
            continue  # addmm's own scalings; a transposed convolution's weight layout
        if view is None and not _per_channel(factor, y.meta["val"]):
            continue
        if isinstance(factor, fx.Node):
            if factor is y or _depends_on(factor, y) or _product(factor):
                continue
            _hoist(y.graph, factor, y)
        return y, factor, view
    return None


def _columns_view(y) -> fx.Node | None:
    """``y`` where it is the only use of a matrix product's result, viewed with its columns
    kept last; else None."""
    from ollie.capture.generated_rules import VIEWS
    if not (isinstance(y, fx.Node) and y.op == "call_function" and y.target in VIEWS and
            len(y.users) == 1 and "val" in y.meta):
        return None
    m, columns = y.args[0], y.meta["val"].shape[-1]
    if not (isinstance(m, fx.Node) and m.target in (aten.mm.default, aten.addmm.default) and
            len(m.users) == 1 and "val" in m.meta and isinstance(columns, int) and
            m.meta["val"].shape[-1] == columns and not y.kwargs):
        return None  # (a size symbol is not compared: that would specialise the graph)
    return y


def _product(factor: fx.Node) -> bool:
    """Whether ``factor`` is (a view of) a contraction's result: a row of products at batch
    1 looks like a shift per channel, but it is another term of a sum of products, which
    the merges and generated rules join (``x @ W1 + h @ W2``) and a fold would hide."""
    from ollie.capture import aten as aten_table
    while factor.op == "call_function" and aten_table.is_view(factor.target):
        factor = factor.args[0]
    return factor.op == "call_function" and factor.target in CONTRACTIONS


def _per_channel(factor, out: torch.Tensor, channel: int = 1) -> bool:
    """A scalar, or a tensor of ``out``'s dtype whose broadcast shape is 1 everywhere but at
    the output-channel dim ``channel`` (1: a convolution's channels, a matrix product's
    columns; -1: the columns of a matrix product viewed with them last)."""
    if not out.is_floating_point():
        return False  # an integer product scaled by a float is a float: no fold keeps that
    if isinstance(factor, (int, float)) and not isinstance(factor, bool):
        return True
    val = factor.meta.get("val") if isinstance(factor, fx.Node) else None
    if not isinstance(val, torch.Tensor) or val.dim() > out.dim():
        return False
    if val.dtype != out.dtype:
        return False  # folding would change the result's type promotion
    c = channel if channel >= 0 else out.dim() + channel
    if not all(isinstance(s, int) for s in (*val.shape, *out.shape[c:c + 1])):
        return False  # a size symbol: comparing it would specialise the graph
    shape = [1] * (out.dim() - val.dim()) + list(val.shape)
    return all(s == 1 or (d == c and s == out.shape[c]) for d, s in enumerate(shape))


def _folded(graph: fx.Graph, op, y: fx.Node, factor) -> fx.Node:
    """The contraction ``y`` with ``op(·, factor)`` moved into its operands."""
    call = graph.call_function
    channels = y.meta["val"].shape[1]
    if isinstance(factor, fx.Node):
        k = factor.meta["val"].numel()
        factor = call(aten.view.default, (factor, [k]))  # one entry per channel, or one
    args = list(y.args)
    if y.target == aten.convolution.default:
        w, b = args[1], args[2]
        if op in SCALES:
            per_row = factor if not isinstance(factor, fx.Node) else \
                call(aten.view.default, (factor, [k] + [1] * (y.meta["val"].dim() - 1)))
            args[1] = call(SCALES[op], (w, per_row))
            args[2] = None if b is None else call(SCALES[op], (b, factor))
        else:
            bias = b if b is not None else _zeros(graph, y, channels)
            args[2] = call(SHIFTS[op], (bias, factor))
        return call(y.target, tuple(args))
    if op in SCALES:
        args[-1] = call(SCALES[op], (args[-1], factor))        # B's columns
        if y.target == aten.addmm.default:
            args[0] = call(SCALES[op], (args[0], factor))      # the bias with them
        return call(y.target, tuple(args))
    if y.target == aten.addmm.default:
        args[0] = call(SHIFTS[op], (args[0], factor))
        return call(y.target, tuple(args))
    a, b = args
    bias = _zeros(graph, y, channels)
    return call(aten.addmm.default, (call(SHIFTS[op], (bias, factor)), a, b))


def _zeros(graph: fx.Graph, y: fx.Node, channels: int) -> fx.Node:
    """A zero bias for ``y``'s channels (``full``: an op Inductor lowers as it is)."""
    val = y.meta["val"]
    return graph.call_function(aten.full.default, ([channels], 0.0), {
        "dtype": val.dtype, "layout": torch.strided, "device": val.device,
        "pin_memory": False})
