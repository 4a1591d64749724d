"""The pieces of a tensor (slices, selects, the parts of a split or unbind), and the rules that
remove what a whole tiling of them computes (rows of ``ollie.capture.graph_rules.RULES``):

    cat(x[pieces that tile x along d]; d) = x                       tiling_cat
    x[0] + x[1] + … + x[n-1] (the selects along d) = x.sum(d)         tiling_sum
    cat(A1ᵀ, A2ᵀ; d) = cat(A1, A2; 1-d)ᵀ                               transposed_cat

A merge of contractions concatenates their operands (``graph_rules``); where those are the
pieces of one tensor, the concatenation is that tensor and copies nothing; where they are
transposed (a Linear's weights), the merged contraction reads them in the memory order the
original ones read (on a 2-core CPU, a 16×512 by 512×1024 product ran 7 % faster with its
weight laid out transposed, as an ``nn.Linear`` keeps it). A running sum written as a Python
loop over a tensor's rows is one reduction.
"""
from __future__ import annotations

import operator

import torch
import torch.fx as fx

aten = torch.ops.aten


def simplify_cats(graph: fx.Graph, on: set) -> list[str]:
    """Replace each concatenation that a rule makes cheaper; a line per replacement."""
    applied = []
    for n in list(graph.nodes):
        if n.op == "call_function" and n.target == aten.cat.default and n.users:
            with graph.inserting_before(n):
                simpler = simplified_cat(graph, n, on, fresh=False)
            if simpler is not None:
                n.replace_all_uses_with(simpler)
                graph.erase_node(n)
                applied.append("tiling_cat: a concatenation of the pieces of one tensor")
    return applied


def simplified_cat(graph: fx.Graph, cat: fx.Node, on: set, fresh: bool = True
                   ) -> fx.Node | None:
    """What ``cat`` equals without copying (``tiling_cat``), or a cheaper copy
    (``transposed_cat``); None when neither rule applies. Fresh nodes (made by a merge) get
    the transposed form too; existing ones only the tiling."""
    operands, dim = cat.args[0], (cat.args[1] if len(cat.args) > 1 else 0)
    pieces = [piece(o) for o in operands]
    if "tiling_cat" in on and all(pieces) and len({p[0] for p in pieces}) == 1:
        base, along = pieces[0][0], pieces[0][1]
        squeezed = pieces[0][4]
        tiles = [p[2:4] for p in pieces]
        whole = shape_of(base)[along]
        if all(p[1] == along and p[4] == squeezed for p in pieces) and \
                [s for s, _ in tiles] == [0] + [e for _, e in tiles[:-1]] and \
                tiles[-1][1] == whole:
            if not squeezed and dim == along:
                return base
            shape = shape_of(base)
            if squeezed and along == 0 and dim == 0 and len(shape) >= 2 and \
                    _flattens(base):
                return graph.call_function(aten.view.default,
                                           (base, [shape[0] * shape[1], *shape[2:]]))
    if fresh and "transposed_cat" in on and all(_is_transpose(o) for o in operands):
        joined = graph.call_function(aten.cat.default,
                                     ([o.args[0] for o in operands], 1 - dim % 2))
        return graph.call_function(aten.permute.default, (joined, [1, 0]))
    return None


def fixed_piece(node) -> tuple | None:
    """``piece(node)`` where the dim it is cut along has a fixed size and the cut plain
    bounds (a batch of any length cut into column groups), so that no size symbol is
    compared; else None."""
    cut = _cut(node)
    if cut is None:
        return None
    op, base, dim = cut
    plain = lambda a: a is None or type(a) is int or (  # noqa: E731
        isinstance(a, (list, tuple)) and all(type(x) is int for x in a))
    if not all(plain(a) for a in op.args[1:]) or type(shape_of(base)[dim]) is not int:
        return None
    return piece(node)


def _cut(node) -> tuple[fx.Node, fx.Node, int] | None:
    """(the op that cuts, what it cuts, the dim it cuts along) where ``node`` is a piece
    (a ``select`` or ``slice``, an item of a ``split`` or ``unbind``), else None."""
    if not isinstance(node, fx.Node) or node.op != "call_function" or "val" not in node.meta:
        return None  # not a piece, or made in this round (its meta comes with the next)
    op = node.args[0] if node.target == operator.getitem else node
    if not isinstance(op, fx.Node) or op.op != "call_function" or \
            not isinstance(op.args[0], fx.Node) or "val" not in op.args[0].meta:
        return None
    if node.target == operator.getitem and op.target in (aten.split.Tensor,
                                                         aten.split_with_sizes.default):
        position = 2
    elif op.target in (aten.unbind.int, aten.select.int, aten.slice.Tensor) and \
            (node.target == operator.getitem) == (op.target == aten.unbind.int):
        position = 1
    else:
        return None
    base = op.args[0]
    return op, base, _dim(op.args[position] if len(op.args) > position else 0, base)


def piece(node) -> tuple | None:
    """(base, dim, start, stop, squeezed) where ``node`` is the slice ``start:stop`` of
    ``base`` along ``dim`` (``squeezed``: a ``select`` that drops the dim), else None."""
    cut = _cut(node)
    if cut is None:
        return None
    op, base, dim = cut
    if op.target in (aten.split.Tensor, aten.split_with_sizes.default):
        i = node.args[1]
        sizes = [v.shape[dim] for v in op.meta["val"]]
        start = sum(sizes[:i])
        return base, dim, start, start + sizes[i], False
    if op.target == aten.unbind.int:
        i = node.args[1]
        return base, dim, i, i + 1, True
    if op.target == aten.select.int:
        i = node.args[2]
        i = i + shape_of(base)[dim] if i < 0 else i
        return base, dim, i, i + 1, True
    start, stop = (list(op.args[2:4]) + [None, None])[:2]  # a slice
    step = op.args[4] if len(op.args) > 4 else 1
    size = shape_of(base)[dim]
    start = 0 if start is None else (start + size if start < 0 else min(start, size))
    stop = size if stop is None else (stop + size if stop < 0 else min(stop, size))
    return (base, dim, start, stop, False) if step == 1 else None


def _flattens(base: fx.Node) -> bool:
    val = base.meta["val"]
    return val.stride(0) == val.shape[1] * val.stride(1)


def _is_transpose(node) -> bool:
    """Whether ``node`` is a matrix transposed (``permute``, ``t`` or ``transpose``)."""
    if not (isinstance(node, fx.Node) and node.op == "call_function"):
        return False
    if node.target == aten.permute.default:
        return list(node.args[1]) == [1, 0]
    return node.target == aten.t.default or (
        node.target == aten.transpose.int and isinstance(node.meta.get("val"), torch.Tensor)
        and node.meta["val"].dim() == 2)


def simplify_sums(graph: fx.Graph, on: set) -> list[str]:
    """Replace each sum of the selects that tile a tensor along one dim (``tiling_sum``) by
    one reduction (plus the other terms of the sum); a line per replacement."""
    if "tiling_sum" not in on:
        return []
    applied = []
    for n in reversed(list(graph.nodes)):  # outermost sums first
        terms = sum_terms(n) if n.graph is graph else None
        if terms is None:
            continue
        pieces = [t for t in terms if piece(t) and piece(t)[4]]
        by_base: dict = {}
        for t in pieces:
            base, dim = piece(t)[:2]
            by_base.setdefault((base, dim), []).append(piece(t)[2])
        for (base, dim), starts in by_base.items():
            if len(starts) < 2 or sorted(starts) != list(range(shape_of(base)[dim])) or \
                    base.meta["val"].dtype != n.meta["val"].dtype:
                continue
            others = [t for t in terms if not (t in pieces and piece(t)[:2] == (base, dim))]
            with graph.inserting_before(n):
                total = graph.call_function(aten.sum.dim_IntList, (base, [dim]))
                for t in others:
                    total = graph.call_function(aten.add.Tensor, (total, t))
            n.replace_all_uses_with(total)
            _erase_tree(graph, n)
            applied.append(f"tiling_sum: a sum of the {len(starts)} rows of a tensor")
            break
    return applied


def sum_terms(n) -> list | None:
    """The terms of the sum ``n`` heads, through the additions only it reads; None where
    ``n`` is no addition, or one that a larger sum reads alone."""
    if not _is_add(n) or any(_is_add(u) and len(n.users) == 1 for u in n.users):
        return None
    return _terms(n)


def _is_add(n) -> bool:
    return isinstance(n, fx.Node) and n.op == "call_function" and \
        n.target == aten.add.Tensor and not n.kwargs and "val" in n.meta


def _terms(n: fx.Node) -> list:
    """The terms of the sum ``n`` heads, through additions only it reads."""
    terms = []
    for a in n.args:
        if _is_add(a) and len(a.users) == 1:
            terms.extend(_terms(a))
        else:
            terms.append(a)
    return terms


def _erase_tree(graph: fx.Graph, n: fx.Node) -> None:
    inner = [a for a in n.args if _is_add(a) and len(a.users) == 1]
    graph.erase_node(n)
    for a in inner:
        _erase_tree(graph, a)


def shape_of(node) -> tuple:
    return tuple(node.meta["val"].shape)


def _dim(dim: int, base) -> int:
    return dim + len(shape_of(base)) if dim < 0 else dim
