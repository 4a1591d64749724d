"""Convolutions of one input, summed, as one convolution (row ``summed_convs`` of
``ollie.capture.graph_rules.RULES``):

    conv(x, W1, b1) + conv(x, W2, b2) = conv(x, W1 + pad(W2), b1 + b2)

A convolution is linear in its weight, so branches that read the same input positions add
up in the weight: RepVGG's 3×3 and 1×1 branches (after their batch norms fold into them,
``affine_fold``), a residual block's parallel convolutions, Inception-style sums. The smaller
kernel is zero-padded to the larger one, centred: a ``k2`` kernel with padding ``p2`` reads
input ``o·s − p2 + i``, which is ``o·s − p1 + (i + d)`` with ``d = p1 − p2``; so ``W2`` sits at
offset ``d`` in the larger window, and ``2d = k1 − k2`` (centred) makes both outputs the same
size at every input size. Stride, dilation 1 and groups must agree. The merged convolution
does the larger kernel's multiply-adds once instead of every branch's; the weights' sum is
folded once in an inference graph and costs a pass over the weights per call in training.
"""
from __future__ import annotations

import torch
import torch.fx as fx

aten = torch.ops.aten


def apply(graph: fx.Graph) -> list[str]:
    """Merge the convolutions of one input in every sum; a line per merge."""
    applied = []
    for n in list(graph.nodes):
        if n.op != "call_function" or n.target != aten.add.Tensor or n.kwargs or \
                "val" not in n.meta:
            continue
        terms = _terms(n, root=True)
        groups: dict[tuple, list[fx.Node]] = {}
        for t in terms:
            key = _key(t)
            if key is not None:
                groups.setdefault(key, []).append(t)
        group = max(groups.values(), key=len, default=[])
        if len(group) < 2 or any(_sizes(g) != _sizes(n) for g in group):
            continue
        rest = [t for t in terms if all(t is not g for g in group)]
        with graph.inserting_before(n):
            merged = _merged(graph, group)
            for t in rest:
                merged = graph.call_function(aten.add.Tensor, (merged, t))
        n.replace_all_uses_with(merged)
        applied.append(f"summed_convs: {len(group)} × convolution.default → 1")
    if applied:
        graph.eliminate_dead_code()
    return applied


def _terms(n, root: bool = False) -> list:
    """The terms of the sum ``n``, through additions that have no other user."""
    if isinstance(n, fx.Node) and n.op == "call_function" and n.target == aten.add.Tensor \
            and not n.kwargs and (root or len(n.users) == 1) and \
            all(isinstance(a, fx.Node) for a in n.args):
        return [t for a in n.args for t in _terms(a)]
    return [n]


def _sizes(n: fx.Node) -> tuple:
    """The node's sizes, symbolic ones as expressions (comparing SymInts would add guards)."""
    return tuple(str(d) for d in n.meta["val"].shape)


def _key(t) -> tuple | None:
    """What convolutions must share to merge (input, stride, groups, the window's centre
    offset per spatial dim, dtype), or None for a term that is no such convolution."""
    if not (isinstance(t, fx.Node) and t.op == "call_function" and
            t.target == aten.convolution.default and len(t.users) == 1 and "val" in t.meta):
        return None
    x, w, _, stride, padding, dilation, transposed, _, groups = t.args
    if not (isinstance(w, fx.Node) and "val" in w.meta):  # (a weight made this round)
        return None
    kernel = tuple(w.meta["val"].shape[2:])
    if transposed or any(d != 1 for d in dilation) or \
            any(not isinstance(k, int) or (k - 1) % 2 for k in kernel) or \
            any(not isinstance(p, int) for p in padding):
        return None
    centre = tuple(p - (k - 1) // 2 for p, k in zip(padding, kernel))  # (odd kernels)
    return x, tuple(stride), groups, centre, _sizes(w)[:2], t.meta["val"].dtype


def _merged(graph: fx.Graph, convs: list[fx.Node]) -> fx.Node:
    """One convolution by the sum of the convolutions' weights, each padded to the largest
    window, and of their biases."""
    kernels = [tuple(c.args[1].meta["val"].shape[2:]) for c in convs]
    window = tuple(max(k[i] for k in kernels) for i in range(len(kernels[0])))
    weight = bias = None
    for c, kernel in zip(convs, kernels):
        w, b = c.args[1], c.args[2]
        pad = [p for k, full in zip(reversed(kernel), reversed(window))
               for p in ((full - k) // 2, (full - k) // 2)]
        if any(pad):
            w = graph.call_function(aten.constant_pad_nd.default, (w, pad, 0.0))
        weight = w if weight is None else graph.call_function(aten.add.Tensor, (weight, w))
        if b is not None:
            bias = b if bias is None else graph.call_function(aten.add.Tensor, (bias, b))
    x, _, _, stride, padding, dilation, transposed, output_padding, groups = convs[0].args
    padding = [p + (full - k) // 2 for p, k, full in zip(padding, kernels[0], window)]
    return graph.call_function(aten.convolution.default,
                               (x, weight, bias, stride, padding, dilation, transposed,
                                output_padding, groups))
