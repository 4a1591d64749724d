"""Matrix products that einsum and batched spellings hide, read as matrix products.

``torch.einsum("bi,ij,jk->bk", x, A, B)`` lowers to two ``bmm`` of one batch between
unsqueezes, permutes and views. Two identities make it ``mm(mm(x, A), B)``, which the graph
rules (generated and hand-written) match:

    bmm(P, Q) = unsqueeze(mm(squeeze(P, 0), squeeze(Q, 0)), 0)     where P, Q hold one batch
    views(M) = M   (or Mᵀ)    a chain of views from a matrix M back to M's shape (or Mᵀ's)

and two more read the positions a batch of one sequence keeps as rows of the matrix, and rows
of a linear layer as rows of its product, so that the generated slice rules see them
(``lm_head(h)[:, -1]``, with or without a bias: the last row of a product):

    V[:, a:b] = unsqueeze(M[a:b], 0),  V[:, i] = M[i:i+1]     where V is M viewed as (1, *M)
    addmm(b, A, B)[a:b] = mm(A, B)[a:b] + b                      b a bias broadcast over rows

A chain is followed only through pure reindexings (view, reshape, permute, transpose,
unsqueeze, squeeze); what it does to indices is read exactly from the shape, strides and
offset it gives a contiguous fake tensor of M's sizes (views are defined on logical indices,
so the layout of M itself does not matter). Sizes may be symbols: the strides must then be
M's (or Mᵀ's) for every value of them.
"""
from __future__ import annotations

from contextlib import nullcontext

import torch
import torch.fx as fx
from torch._guards import detect_fake_mode
from torch.fx.experimental.symbolic_shapes import statically_known_true

from ollie.capture.slice_pieces import END

aten = torch.ops.aten
REINDEXING = {aten.view.default, aten._unsafe_view.default, aten.reshape.default,
              aten.permute.default, aten.t.default, aten.transpose.int,
              aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims,
              aten.squeeze.default, aten.alias.default}


def normalise(graph: fx.Graph) -> int:
    """Apply both identities; how many nodes were replaced."""
    changed = 0
    for n in list(graph.find_nodes(op="call_function", target=aten.bmm.default)):
        if _matrices(n, 3) and n.meta["val"].shape[0] == 1 and not n.kwargs:
            with graph.inserting_before(n):
                p, q = (_call(graph, aten.squeeze.dim, (a, 0)) for a in n.args)
                product = _call(graph, aten.mm.default, (p, q))
                n.replace_all_uses_with(_call(graph, aten.unsqueeze.default, (product, 0)))
            changed += 1
    for n in list(graph.nodes):
        if n.op == "call_function" and n.target in REINDEXING and n.users and _matrices(n, 2):
            changed += _collapse(graph, n)
        elif n.op == "call_function" and n.target in (aten.slice.Tensor, aten.select.int):
            changed += _rows_of_one_batch(graph, n)
    if changed:  # (a view whose rows a slice now reads still reads the addmm)
        graph.eliminate_dead_code()
    for n in list(graph.find_nodes(op="call_function", target=aten.slice.Tensor)):
        changed += _rows_before_bias(graph, n)
    if changed:
        graph.eliminate_dead_code()
    return changed


def _collapse(graph: fx.Graph, n: fx.Node) -> int:
    """Replace ``n`` by the matrix its chain of views starts from, or by its transpose, where
    the chain (of two views or more) comes back to that matrix's indices."""
    chain, source = [], n
    while isinstance(source, fx.Node) and source.op == "call_function" and \
            source.target in REINDEXING:
        chain.append(source)
        source = source.args[0]
    if len(chain) < 2 or not _matrices(source, 2):
        return 0
    rows, cols = source.meta["val"].shape
    try:
        with detect_fake_mode([source.meta["val"]]) or nullcontext():
            t = torch.empty(rows, cols, device="meta")
            for v in reversed(chain):
                target = aten.view.default if v.target in (
                    aten.reshape.default, aten._unsafe_view.default) else v.target
                args = fx.node.map_arg(v.args[1:], lambda a: a.meta["val"])
                t = target(t, *args, **v.kwargs)  # (a reshape that would copy raises here)
    except RuntimeError:
        return 0
    if not statically_known_true(t.storage_offset() == 0):
        return 0
    if _strides_are(t, (rows, cols), (cols, 1)):
        n.replace_all_uses_with(source)
        return 1
    if _strides_are(t, (cols, rows), (1, cols)):
        with graph.inserting_before(n):
            n.replace_all_uses_with(_call(graph, aten.permute.default, (source, [1, 0])))
        return 1
    return 0


def _rows_of_one_batch(graph: fx.Graph, n: fx.Node) -> int:
    """Replace a slice or select along dim 1 of a matrix viewed with a leading size 1 by the
    same rows of the matrix (a slice, so that a selected row is a piece of the rows too)."""
    view = n.args[0]
    if len(n.args) < 2 or n.args[1] != 1 or n.kwargs or not _matrices(view, 3) or \
            view.op != "call_function" or view.target not in REINDEXING or \
            not _matrices(view.args[0], 2):
        return 0
    matrix = view.args[0]
    shape = (1, *matrix.meta["val"].shape)
    if not all(statically_known_true(a == b) for a, b in zip(view.meta["val"].shape, shape)):
        return 0
    with graph.inserting_before(n):
        if n.target == aten.select.int:
            i = n.args[2]
            if not isinstance(i, int):
                return 0
            end = i + 1 if i != -1 else END
            rows = _call(graph, aten.slice.Tensor, (matrix, 0, i, end))
            n.replace_all_uses_with(rows)
        else:
            rows = _call(graph, aten.slice.Tensor, (matrix, 0, *n.args[2:]))
            n.replace_all_uses_with(_call(graph, aten.unsqueeze.default, (rows, 0)))
    return 1


def _rows_before_bias(graph: fx.Graph, n: fx.Node) -> int:
    """Replace rows of a linear layer's product plus its bias (``addmm(b, A, B)[a:b]``, the
    addmm read only there) by the rows of the product plus the bias, whose product the
    generated slice rules read."""
    linear = n.args[0]
    if len(n.args) < 2 or n.args[1] != 0 or n.kwargs or not _matrices(n, 2) or \
            linear.op != "call_function" or linear.target != aten.addmm.default or \
            linear.kwargs or len(linear.users) != 1 or not _matrices(linear.args[0], 1):
        return 0
    bias, a, b = linear.args
    with graph.inserting_before(n):
        rows = _call(graph, aten.slice.Tensor, (_call(graph, aten.mm.default, (a, b)),
                                                *n.args[1:]))
        n.replace_all_uses_with(_call(graph, aten.add.Tensor, (rows, bias)))
    return 1


def _strides_are(t: torch.Tensor, shape: tuple, strides: tuple) -> bool:
    """Whether ``t`` has this shape and these strides (where a size is not 1) for every
    value of the size symbols (no guard is added)."""
    return len(t.shape) == len(shape) and all(
        statically_known_true(a == b) for a, b in zip(t.shape, shape)) and all(
        statically_known_true(size == 1) or statically_known_true(a == b)
        for size, a, b in zip(shape, t.stride(), strides))


def _matrices(n, dim: int) -> bool:
    """Whether ``n`` is a node with a fake tensor of ``dim`` dimensions."""
    val = n.meta.get("val") if isinstance(n, fx.Node) else None
    return isinstance(val, torch.Tensor) and val.dim() == dim


def _call(graph: fx.Graph, target, args: tuple) -> fx.Node:
    """A new node with its fake value (the graph rules read shapes from it)."""
    node = graph.call_function(target, args)
    vals = [a.meta["val"] if isinstance(a, fx.Node) else a for a in args]
    with detect_fake_mode([v for v in vals if isinstance(v, torch.Tensor)]) or nullcontext():
        node.meta["val"] = target(*vals)
    return node
