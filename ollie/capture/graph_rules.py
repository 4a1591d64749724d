"""Graph substitutions: rewrites of several ATen nodes at once (TASO's and Tensat's families).

The single-expression derivations see one value at a time; these rules see the whole graph.
Each rule is a row: its name, its math on one line, its kind and whether it is on by default.
A *merge* rule groups contractions that agree on all but some operands, concatenates those,
runs one contraction and splits the result; a *simplifying* rule removes what merges leave
(a concatenation of the pieces of one tensor is that tensor).

``substitute`` applies the rules to a copy of the graph until nothing changes, before regions
are translated, so the derivations see the merged contractions. Every rule is an identity
for all values (the numerics contract); what the substitutions do is still checked on sample
inputs (``ollie.capture.graph_pass``) and kept only where the compiled graph runs faster.
Sizes must be concrete: a graph with symbolic sizes is left as it is.
"""
from __future__ import annotations

import operator
from collections import defaultdict
from dataclasses import dataclass

import torch
import torch.fx as fx

from ollie.capture import aten as aten_table

aten = torch.ops.aten
MAX_ROUNDS = 4


@dataclass(frozen=True)
class Rule:
    name: str
    math: str
    kind: str            # "merge" (several contractions become one), "fold" (an affine map
                         # into a contraction's operands, ``affine_fold``) or "simplify"
    default: bool = True


RULES = [
    Rule("shared_lhs", "A@B1, A@B2 = split(A @ cat(B1, B2; 1); 1)", "merge"),
    Rule("shared_rhs", "A1@B, A2@B = split(cat(A1, A2; 0) @ B; 0)", "merge"),
    Rule("shared_input_conv", "conv(x,W1), conv(x,W2) = split(conv(x, cat(W1,W2; 0)); 1)",
         "merge"),
    Rule("shared_weight_conv", "conv(x1,W), conv(x2,W) = split(conv(cat(x1,x2; 0), W); 0)",
         "merge"),
    Rule("grouped_conv", "conv(x[g],W_g) for the channel groups g of x = split(conv(x, "
         "cat(W_g; 0), groups=G); 1)", "merge"),
    Rule("affine_into_conv", "conv(x,W,b)·s + t = conv(x, W·s, b·s + t)  (s, t per output "
         "channel)", "fold"),
    Rule("affine_into_matmul", "(A@B)·s + t = addmm(t, A, B·s)  (s, t per column)", "fold"),
    Rule("tiling_cat", "cat(x[pieces that tile x along d]; d) = x", "simplify"),
    Rule("transposed_cat", "cat(A1ᵀ, A2ᵀ; 1) = cat(A1, A2; 0)ᵀ", "simplify"),
]
ON = {r.name for r in RULES if r.default}


@dataclass(frozen=True)
class Merge:
    """How one contraction joins a group: the rule, what the group's members share (``key``),
    the operands that differ between members (arg position → the dim they are concatenated
    along) and the output dim the merged result is split along."""
    rule: str
    key: tuple
    varying: tuple[tuple[int, int], ...]
    out_dim: int


def substitute(gm: fx.GraphModule, example_inputs) -> tuple[fx.GraphModule | None, list[str]]:
    """A copy of ``gm`` with the graph substitutions applied, and a line per substitution
    (None and [] when none applies)."""
    if _unsuitable(gm):
        return None, []
    from ollie.capture import affine_fold, rewrite
    new, _ = rewrite.copy_graph(gm)
    applied = []
    for _ in range(MAX_ROUNDS):
        _merge_duplicate_views(new.graph)
        done = affine_fold.fold_affine(new.graph, ON) + _merge_round(new.graph) + \
            _simplify_cats(new.graph)
        if not done:
            break
        applied += done
        rewrite.finish(new, example_inputs)  # fresh meta["val"] for the next round's matches
    if not applied:
        return None, []
    _keep_output_layouts(gm, new)
    rewrite.finish(new, example_inputs)
    return new, applied


def _keep_output_layouts(gm: fx.GraphModule, new: fx.GraphModule) -> None:
    """Outputs laid out as before: a piece of a merged result is a strided slice, where the
    original output (a user's value, or a tensor a backward graph saved) was contiguous."""
    from ollie.capture.rewrite import same_layout
    before = gm.graph.output_node().args[0]
    output = new.graph.output_node()
    single = isinstance(before, fx.Node)
    before, after = ([before], [output.args[0]]) if single else (before, list(output.args[0]))
    for i, (a, b) in enumerate(zip(before, after)):
        if not isinstance(b, fx.Node) or not isinstance(b.meta.get("val"), torch.Tensor) or \
                same_layout(b.meta["val"], a.meta["val"]):
            continue
        if not a.meta["val"].is_contiguous():
            raise ValueError(f"output {i} would change its strided layout")
        with new.graph.inserting_before(output):
            after[i] = new.graph.call_function(aten.clone.default, (b,),
                                               {"memory_format": torch.contiguous_format})
    output.args = (after[0] if single else type(output.args[0])(after),)


def _unsuitable(gm: fx.GraphModule) -> bool:
    """Sizes must be concrete to split by them."""
    for n in gm.graph.nodes:
        val = n.meta.get("val")
        if isinstance(val, torch.Tensor) and not all(isinstance(d, int) for d in val.shape):
            return True
        if isinstance(val, torch.SymInt):
            return True
    return False


# -- merges ------------------------------------------------------------------------------------
def merges(n: fx.Node) -> list[Merge]:
    """The groups contraction ``n`` may join (none for a node made in this round: its
    meta comes with the next)."""
    if n.op != "call_function" or any("val" not in a.meta for a in [n, *n.all_input_nodes]):
        return []
    if n.target == aten.mm.default:
        a, b = n.args
        return [Merge("shared_lhs", (n.target, a), ((1, 1),), 1),
                Merge("shared_rhs", (n.target, b), ((0, 0),), 0)]
    if n.target == aten.addmm.default and not n.kwargs and _rank(n.args[0]) == 1:
        c, a, b = n.args
        return [Merge("shared_lhs", (n.target, a), ((0, 0), (2, 1)), 1),
                Merge("shared_rhs", (n.target, c, b), ((1, 0),), 0)]
    if n.target == aten.convolution.default:
        x, w, b, stride, padding, dilation, transposed, output_padding, groups = n.args
        if transposed or groups != 1:
            return []
        params = (tuple(stride), tuple(padding), tuple(dilation), b is None)
        weights = ((1, 0),) if b is None else ((1, 0), (2, 0))
        found = [Merge("shared_input_conv", (n.target, x, _shape(w)[1:], *params), weights, 1),
                 Merge("shared_weight_conv", (n.target, w, b, _shape(x)[1:], *params),
                       ((0, 0),), 0)]
        piece = _piece(x)
        if piece and piece[1] == 1 and not piece[4]:
            base, _, start, stop, _ = piece
            found.append(Merge("grouped_conv", (n.target, base, stop - start, _shape(w),
                                                *params), weights, 1))
        return found
    return []


def _merge_round(graph: fx.Graph) -> list[str]:
    groups: dict[tuple, list[fx.Node]] = defaultdict(list)
    found: dict[tuple, Merge] = {}
    for n in graph.nodes:
        for m in merges(n):
            if m.rule in ON:
                groups[(m.rule, m.key)].append(n)
                found[(m.rule, m.key)] = m
    applied, used = [], set()
    for gk, members in groups.items():
        members = [m for m in members if m not in used]
        merge = found[gk]
        members = _independent(members)
        if merge.rule == "grouped_conv":
            members = _tiling_groups(members)
        if len(members) < 2:
            continue
        _rewrite(graph, members, merge)
        used.update(members)
        applied.append(f"{merge.rule}: {len(members)} × {members[0].target.__name__} → 1")
    return applied


def _independent(members: list[fx.Node]) -> list[fx.Node]:
    """The members, in graph order, that depend on no earlier kept member."""
    kept: list[fx.Node] = []
    for m in members:
        if not any(_depends_on(m, k) for k in kept):
            kept.append(m)
    return kept


def _depends_on(node: fx.Node, other: fx.Node) -> bool:
    seen, stack = set(), list(node.all_input_nodes)
    while stack:
        n = stack.pop()
        if n is other:
            return True
        if n in seen or n.op == "placeholder":
            continue
        seen.add(n)
        stack.extend(n.all_input_nodes)
    return False


def _tiling_groups(members: list[fx.Node]) -> list[fx.Node]:
    """Convolutions on channel pieces of one input: all of them, in channel order, when the
    pieces tile the input's channels (a grouped convolution), else none."""
    by_start = sorted(members, key=lambda m: _piece(m.args[0])[2])
    size = _shape(_piece(members[0].args[0])[0])[1]
    starts = [_piece(m.args[0])[2] for m in by_start]
    step = _piece(members[0].args[0])[3] - starts[0]
    return by_start if starts == list(range(0, size, step)) else []


def _rewrite(graph: fx.Graph, members: list[fx.Node], merge: Merge) -> None:
    first = min(members, key=_position(graph))
    args = list(first.args)
    for pos, dim in merge.varying:
        operands = [m.args[pos] for m in members]
        for o in operands:
            _hoist(graph, o, first)
        with graph.inserting_before(first):
            args[pos] = _concat(graph, operands, dim)
    if merge.rule == "grouped_conv":
        args[0], args[8] = _piece(first.args[0])[0], len(members)
    with graph.inserting_before(first):
        merged = graph.call_function(first.target, tuple(args))
        sizes = [_shape(m)[merge.out_dim] for m in members]
        split = graph.call_function(aten.split_with_sizes.default,
                                    (merged, sizes, merge.out_dim))
        for i, m in enumerate(members):
            piece = graph.call_function(operator.getitem, (split, i))
            m.replace_all_uses_with(piece)
    for m in members:
        graph.erase_node(m)


def _hoist(graph: fx.Graph, node, before: fx.Node) -> None:
    """Move ``node`` (and what it reads) above ``before`` where it comes later. Safe in a
    functional graph, where nothing observes the order but random ops: moving one of those
    could change what it draws, so that fails (and the graph keeps its form)."""
    if not isinstance(node, fx.Node) or node.op == "placeholder":
        return
    order = _position(graph)
    if order(node) < order(before):
        return
    if torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ()):
        raise ValueError(f"{node} draws random numbers: it keeps its place")
    for a in node.all_input_nodes:
        _hoist(graph, a, before)
    before.prepend(node)


def _position(graph: fx.Graph):
    index = {n: i for i, n in enumerate(graph.nodes)}
    return index.__getitem__


def _concat(graph: fx.Graph, operands: list, dim: int) -> fx.Node:
    node = graph.call_function(aten.cat.default, (list(operands), dim))
    return _simplified_cat(graph, node) or node


# -- simplifications ----------------------------------------------------------------------------
def _simplify_cats(graph: fx.Graph) -> list[str]:
    applied = []
    for n in list(graph.nodes):
        if n.op == "call_function" and n.target == aten.cat.default and n.users:
            with graph.inserting_before(n):
                simpler = _simplified_cat(graph, n, fresh=False)
            if simpler is not None:
                n.replace_all_uses_with(simpler)
                graph.erase_node(n)
                applied.append("tiling_cat: a concatenation of the pieces of one tensor")
    return applied


def _simplified_cat(graph: fx.Graph, cat: fx.Node, fresh: bool = True) -> fx.Node | None:
    """What ``cat`` equals without copying (``tiling_cat``), or a cheaper copy
    (``transposed_cat``); None when neither rule applies. Fresh nodes (made by a merge) get
    the transposed form too; existing ones only the tiling."""
    operands, dim = cat.args[0], (cat.args[1] if len(cat.args) > 1 else 0)
    pieces = [_piece(o) for o in operands]
    if "tiling_cat" in ON and all(pieces) and len({p[0] for p in pieces}) == 1:
        base, along = pieces[0][0], pieces[0][1]
        squeezed = pieces[0][4]
        tiles = [p[2:4] for p in pieces]
        whole = _shape(base)[along]
        if all(p[1] == along and p[4] == squeezed for p in pieces) and \
                [s for s, _ in tiles] == [0] + [e for _, e in tiles[:-1]] and \
                tiles[-1][1] == whole:
            if not squeezed and dim == along:
                return base
            shape = _shape(base)
            if squeezed and along == 0 and dim == 0 and len(shape) >= 2 and \
                    _flattens(base):
                return graph.call_function(aten.view.default,
                                           (base, [shape[0] * shape[1], *shape[2:]]))
    if fresh and "transposed_cat" in ON and dim == 1 and all(_is_transpose(o)
                                                            for o in operands):
        rows = graph.call_function(aten.cat.default, ([o.args[0] for o in operands], 0))
        return graph.call_function(aten.permute.default, (rows, [1, 0]))
    return None


def _piece(node) -> tuple | None:
    """(base, dim, start, stop, squeezed) where ``node`` is the slice ``start:stop`` of
    ``base`` along ``dim`` (``squeezed``: a ``select`` that drops the dim), else None."""
    if not isinstance(node, fx.Node) or node.op != "call_function" or "val" not in node.meta:
        return None  # not a piece, or made in this round (its meta comes with the next)
    if node.target == operator.getitem:
        parent, i = node.args
        if parent.op != "call_function":
            return None
        if parent.target in (aten.split.Tensor, aten.split_with_sizes.default):
            base, size = parent.args[0], parent.args[1]
            dim = _dim(parent.args[2] if len(parent.args) > 2 else 0, base)
            sizes = [v.shape[dim] for v in parent.meta["val"]]
            start = sum(sizes[:i])
            return base, dim, start, start + sizes[i], False
        if parent.target == aten.unbind.int:
            dim = _dim(parent.args[1] if len(parent.args) > 1 else 0, parent.args[0])
            return parent.args[0], dim, i, i + 1, True
        return None
    if node.target == aten.select.int:
        base, dim, i = node.args
        dim = _dim(dim, base)
        i = i + _shape(base)[dim] if i < 0 else i
        return base, dim, i, i + 1, True
    if node.target == aten.slice.Tensor:
        base, dim, start, stop = (list(node.args) + [0, None, None])[:4]
        step = node.args[4] if len(node.args) > 4 else 1
        dim, size = _dim(dim, base), None
        size = _shape(base)[dim]
        start = 0 if start is None else (start + size if start < 0 else min(start, size))
        stop = size if stop is None else (stop + size if stop < 0 else min(stop, size))
        return (base, dim, start, stop, False) if step == 1 else None
    return None


def _flattens(base: fx.Node) -> bool:
    val = base.meta["val"]
    return val.stride(0) == val.shape[1] * val.stride(1)


def _is_transpose(node) -> bool:
    return isinstance(node, fx.Node) and node.op == "call_function" and \
        node.target == aten.permute.default and list(node.args[1]) == [1, 0]


def _merge_duplicate_views(graph: fx.Graph) -> None:
    """One node per distinct view (AOTAutograd writes ``permute(W)`` once per use of a
    linear's weight), so that contractions reading one view are seen to share it."""
    seen: dict[tuple, fx.Node] = {}
    for n in list(graph.nodes):
        if n.op != "call_function" or not (aten_table.is_view(n.target) or
                                            n.target == operator.getitem):
            continue
        key = (n.target, _hashable(n.args), _hashable(n.kwargs))
        if key in seen:
            n.replace_all_uses_with(seen[key])
            graph.erase_node(n)
        else:
            seen[key] = n


def _hashable(value):
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


def _shape(node) -> tuple:
    return tuple(node.meta["val"].shape)


def _rank(node) -> int:
    return len(_shape(node)) if isinstance(node, fx.Node) else -1


def _dim(dim: int, base) -> int:
    return dim + len(_shape(base)) if dim < 0 else dim
