"""Graph substitutions: rewrites of several ATen nodes at once (TASO's and Tensat's families).

The single-expression derivations see one value at a time; these rules see the whole graph.
Each rule is a row: its name, its math on one line, its kind and whether it is on by default.
A *merge* rule groups contractions that agree on all but some operands, concatenates those,
runs one contraction and splits the result; a *simplifying* rule removes what merges leave
(a concatenation of the pieces of one tensor is that tensor); the *generated* rules are the
generator's (``derivations/rules/graph_generated.py``, applied by ``generated_rules``).

``substitute`` reads einsum's products of one batch as matrix products
(``ollie.capture.matrix_views``), then applies the rules to a copy of the graph until nothing
changes, after the regions' programs are spliced in (``ollie.capture.graph_pass`` says why,
and keeps the substitutions on the original graph as an alternative); ``rolled_sum`` is the
exception, applied first by ``ollie.capture.rolling``, and ``orchestrate`` runs last, under
Inductor (which elementwise values the final graph writes to memory:
``ollie.capture.orchestration``). Every rule is an identity for all values (the numerics
contract); what the substitutions do is still checked on sample inputs
(``ollie.capture.graph_pass``) and kept only where the compiled graph runs faster.
With symbolic sizes (Dynamo's SymInts), merges apply at every size (a split by a size symbol
reads it from the graph: the rows of the slices of a batch of any length), grouped ones
where the dim their input is cut along has a fixed size (``tilings.fixed_piece``), folds
where the sizes they scale by are fixed (a batch norm after a convolution of images of any
size), generated rules where they cost less at every size; the other tiling rules compare
the sizes of pieces, which would specialise the graph, and stay with static sizes.
"""
from __future__ import annotations

import operator
from collections import defaultdict
from dataclasses import dataclass

import torch
import torch.fx as fx

from ollie.capture import aten as aten_table, tilings
from ollie.capture.tilings import shape_of

aten = torch.ops.aten
MAX_ROUNDS = 4


@dataclass(frozen=True)
class Rule:
    name: str
    math: str
    kind: str            # "merge" (several contractions become one), "fold" (an affine map
                         # into a contraction's operands, ``affine_fold``), "generated"
                         # (``generated_rules``), "orchestrate" (what is written to memory,
                         # ``orchestration``) or "simplify"
    default: bool = True


RULES = [
    Rule("shared_lhs", "A@B1, A@B2 = split(A @ cat(B1, B2; -1); -1)  (mm, addmm, bmm)",
         "merge"),
    Rule("shared_rhs", "A1@B, A2@B = split(cat(A1, A2; -2) @ B; -2)  (mm, addmm, bmm)",
         "merge"),
    Rule("shared_input_conv", "conv(x,W1), conv(x,W2) = split(conv(x, cat(W1,W2; 0)); 1)",
         "merge"),
    Rule("shared_weight_conv", "conv(x1,W), conv(x2,W) = split(conv(cat(x1,x2; 0), W); 0)",
         "merge"),
    Rule("summed_convs", "conv(x,W1,b1) + conv(x,W2,b2) = conv(x, W1 + pad(W2), b1 + b2)  "
         "(one input, centred windows; ``conv_sums``)", "merge"),
    Rule("grouped_conv", "conv(x[g],W_g) for the channel groups g of x = split(conv(x, "
         "cat(W_g; 0), groups=G); 1)", "merge"),
    Rule("grouped_mm", "x_g@W_g for the column groups g of x = bmm(x as (G, n, w), "
         "stack(W_g))[g]", "merge"),
    Rule("rolled_sum", "F(x[0], y[0]) + … + F(x[n-1], y[n-1]) = vmap(F)(x, y).sum(0)  (an "
         "unrolled loop's sum; ``rolling``, before the regions)", "merge"),
    Rule("rolled_cat", "cat([F(x[0]), …, F(x[n-1])]; d) = vmap(F)(x) joined along d  (an "
         "unrolled loop's results, concatenated or stacked; ``rolling``)", "merge"),
    Rule("affine_into_conv", "conv(x,W,b)·s + t = conv(x, W·s, b·s + t)  (s, t per output "
         "channel)", "fold"),
    Rule("affine_into_matmul", "(A@B)·s + t = addmm(t, A, B·s)  (s, t per column)", "fold"),
    Rule("generated", "each rule of derivations/rules/graph_generated.py (found and proven by "
         "``ollie rules synthesize --graph``), in the direction that costs less: x@W1 + h@W2 = "
         "cat(x, h; 1) @ cat(W1, W2; 0) where W1, W2 are weights; and two of them composed, "
         "the first costing more alone: x@W + (x@A)@B = x@(W + A@B)  (``generated_rules``)",
         "generated"),
    Rule("orchestrate", "which elementwise values are written to memory and which computed "
         "again in each kernel that reads them: Korch's binary program over candidate kernels, "
         "measured op costs, under Inductor on the CPU  (``orchestration``, last)",
         "orchestrate"),
    Rule("tiling_cat", "cat(x[pieces that tile x along d]; d) = x", "simplify"),
    Rule("tiling_sum", "x[0] + x[1] + … + x[n-1] (the selects along d) = x.sum(d)", "simplify"),
    Rule("transposed_cat", "cat(A1ᵀ, A2ᵀ; d) = cat(A1, A2; 1-d)ᵀ", "simplify"),
]
ON = {r.name for r in RULES if r.default}
KIND = {r.name: r.kind for r in RULES}


def only_folds(applied: list[str]) -> bool:
    """Whether every substitution applied (a line of ``substitute``'s) is a fold."""
    return all(KIND[line.split(":")[0]] == "fold" for line in applied)


@dataclass(frozen=True)
class Merge:
    """How one contraction joins a group: the rule, what the group's members share (``key``),
    the operands that differ between members (arg position → the dim they are concatenated
    along) and the output dim the merged result is split along."""
    rule: str
    key: tuple
    varying: tuple[tuple[int, int], ...]
    out_dim: int


def substitute(gm: fx.GraphModule, example_inputs, orchestrate: bool = False
               ) -> tuple[fx.GraphModule | None, list[str]]:
    """A copy of ``gm`` with the graph substitutions applied, and a line per substitution
    (None and [] when none applies); ``orchestrate``: Inductor compiles it, and may be told
    which values to write to memory."""
    from ollie.capture import affine_fold, conv_sums, generated_rules, matrix_views, \
        orchestration, rewrite
    symbolic = _symbolic(gm)
    new, _ = rewrite.copy_graph(gm)
    # views merged since the last finish; einsum's products read as matrix products
    applied, unfinished = [], matrix_views.normalise(new.graph)
    for _ in range(MAX_ROUNDS):
        unfinished += _merge_duplicate_views(new.graph)
        # rules that save multiply-adds come first (``x@W1 + x@W2 = x@(W1 + W2)``
        # halves the work that merging the two products would keep); those that save only
        # kernels come after the merges of many contractions (an unrolled RNN's input side
        # merges over time, not step by step with its state side)
        generated = "generated" in ON
        done = generated_rules.apply(new.graph, fewer_products=True, fused=orchestrate) \
            if generated else []
        new.graph.eliminate_dead_code()  # (what the rules replaced is matched no more)
        done += conv_sums.apply(new.graph) if "summed_convs" in ON else []
        if not done:  # folds first: what they leave may save products by a generated rule
            # in the next round (``x@W - (x@A)@B / 4``), which merging ``x@W, x@A`` would hide
            done = affine_fold.fold_affine(new.graph, ON) or _merge_round(new.graph, symbolic)
            if not symbolic:  # (tilings compare the sizes of pieces)
                done += tilings.simplify_cats(new.graph, ON) + \
                    tilings.simplify_sums(new.graph, ON)
        if not done and generated:
            done = generated_rules.apply(new.graph, fused=orchestrate)
        if not done:
            break
        applied += done
        rewrite.finish(new, example_inputs)  # fresh meta["val"] for the next round's matches
        unfinished = 0
    if orchestrate and "orchestrate" in ON:  # (on the final graph: the merges change its loops)
        orchestrated = orchestration.orchestrate_graph(new.graph)
        applied, unfinished = applied + orchestrated, unfinished + len(orchestrated)
    if not applied:
        return None, []
    if _keep_output_layouts(gm, new) + unfinished:  # (a whole-graph finish costs ~0.5 s)
        rewrite.finish(new, example_inputs)
    return new, applied


def _keep_output_layouts(gm: fx.GraphModule, new: fx.GraphModule) -> int:
    """Outputs laid out as before: a piece of a merged result is a strided slice, where the
    original output (a user's value, or a tensor a backward graph saved) was contiguous.
    How many outputs are copied so."""
    from ollie.capture.rewrite import same_layout
    before = gm.graph.output_node().args[0]
    output = new.graph.output_node()
    single = isinstance(before, fx.Node)
    before, after = ([before], [output.args[0]]) if single else (before, list(output.args[0]))
    copied = 0
    for i, (a, b) in enumerate(zip(before, after)):
        if not isinstance(b, fx.Node) or not isinstance(b.meta.get("val"), torch.Tensor) or \
                same_layout(b.meta["val"], a.meta["val"]):
            continue
        if not a.meta["val"].is_contiguous():
            raise ValueError(f"output {i} would change its strided layout")
        with new.graph.inserting_before(output):
            after[i] = new.graph.call_function(aten.clone.default, (b,),
                                               {"memory_format": torch.contiguous_format})
            copied += 1
    output.args = (after[0] if single else type(output.args[0])(after),)
    return copied


def _symbolic(gm: fx.GraphModule) -> bool:
    """Whether a size in the graph is a symbol."""
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
    meta comes with the next); a grouped contraction's only where its input is cut along
    a dim of fixed size (``tilings.fixed_piece``: the pieces are compared by size)."""
    if n.op != "call_function" or any("val" not in a.meta for a in [n, *n.all_input_nodes]):
        return []
    if n.target == aten.mm.default:
        a, b = n.args
        found = [Merge("shared_lhs", (n.target, a), ((1, 1),), 1),
                 Merge("shared_rhs", (n.target, b), ((0, 0),), 0)]
        return found + _grouped_mm_merge(n)
    if n.target == aten.bmm.default:  # (einsum and matmul of batches lower to it)
        a, b = n.args
        return [Merge("shared_lhs", (n.target, a), ((1, 2),), 2),
                Merge("shared_rhs", (n.target, b), ((0, 1),), 1)]
    if n.target == aten.addmm.default and not n.kwargs and _rank(n.args[0]) == 1:
        c, a, b = n.args
        return [Merge("shared_lhs", (n.target, a), ((0, 0), (2, 1)), 1),
                Merge("shared_rhs", (n.target, c, b), ((1, 0),), 0)] + \
            _grouped_mm_merge(n)
    if n.target == aten.convolution.default:
        x, w, b, stride, padding, dilation, transposed, output_padding, groups = n.args
        if transposed or groups != 1:
            return []
        params = (tuple(stride), tuple(padding), tuple(dilation), b is None)
        weights = ((1, 0),) if b is None else ((1, 0), (2, 0))
        found = [Merge("shared_input_conv", (n.target, x, _key(shape_of(w)[1:]), *params),
                       weights, 1),
                 Merge("shared_weight_conv", (n.target, w, b, _key(shape_of(x)[1:]), *params),
                       ((0, 0),), 0)]
        piece = tilings.fixed_piece(x)
        if piece and piece[1] == 1 and not piece[4]:
            base, _, start, stop, _ = piece
            found.append(Merge("grouped_conv", (n.target, base, stop - start, shape_of(w),
                                                *params), weights, 1))
        return found
    return []


def _grouped_mm_merge(n: fx.Node) -> list[Merge]:
    """The group of a product (``mm``, ``addmm``) of a column group of a matrix."""
    piece = tilings.fixed_piece(_lhs(n))
    if not (piece and piece[1] == 1 and not piece[4] and piece[0].meta["val"].is_contiguous()):
        return []
    base, _, start, stop, _ = piece
    return [Merge("grouped_mm", (n.target, base, stop - start, _key(shape_of(n.args[-1]))),
                  (), 0)]


def _lhs(n: fx.Node):
    """The operand a contraction slides over: the input of a convolution, the left matrix of
    a product (after ``addmm``'s bias)."""
    return n.args[1] if n.target == aten.addmm.default else n.args[0]


def _key(shape) -> tuple:
    """A shape as a dict key: a symbolic size by its expression (a SymInt is not hashable)."""
    return tuple(d if isinstance(d, int) else str(d) for d in shape)


def _split_size(graph: fx.Graph, member: fx.Node, merge: Merge):
    """``member``'s size along the dim its merged result is split along: an int, or (a size
    symbol) a node reading it from the first varying operand, whose size along the dim it is
    concatenated along is that size in every merge."""
    size = shape_of(member)[merge.out_dim]
    if isinstance(size, int):
        return size
    pos, dim = merge.varying[0]
    return graph.call_function(aten.sym_size.int, (member.args[pos], dim))


def _merge_round(graph: fx.Graph, symbolic: bool = False) -> list[str]:
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
        if merge.rule in ("grouped_conv", "grouped_mm"):
            members = _tiling_groups(members)
        if len(members) < 2:
            continue
        _rewrite(graph, members, merge, simplify=not symbolic)
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
    """Contractions of pieces of one input along its dim 1 (a convolution's channels, a
    matrix's columns): all of them, in order, when the pieces tile that dim (a grouped
    contraction), else none."""
    by_start = sorted(members, key=lambda m: tilings.piece(_lhs(m))[2])
    size = shape_of(tilings.piece(_lhs(members[0]))[0])[1]
    starts = [tilings.piece(_lhs(m))[2] for m in by_start]
    step = tilings.piece(_lhs(members[0]))[3] - starts[0]
    return by_start if starts == list(range(0, size, step)) else []


def _rewrite(graph: fx.Graph, members: list[fx.Node], merge: Merge, simplify: bool) -> None:
    if merge.rule == "grouped_mm":
        return _grouped_mm(graph, members)
    first = min(members, key=_position(graph))
    args = list(first.args)
    for pos, dim in merge.varying:
        operands = [m.args[pos] for m in members]
        for o in operands:
            _hoist(graph, o, first)
        with graph.inserting_before(first):
            args[pos] = _concat(graph, operands, dim, simplify)
    if merge.rule == "grouped_conv":
        args[0], args[8] = tilings.piece(first.args[0])[0], len(members)
    with graph.inserting_before(first):
        merged = graph.call_function(first.target, tuple(args))
        sizes = [_split_size(graph, m, merge) for m in members]
        split = graph.call_function(aten.split_with_sizes.default,
                                    (merged, sizes, merge.out_dim))
        for i, m in enumerate(members):
            piece = graph.call_function(operator.getitem, (split, i))
            m.replace_all_uses_with(piece)
            for user in list(piece.users):  # a piece is strided: a view may need a copy
                if user.target == aten.view.default:
                    user.target = aten.reshape.default
    for m in members:
        graph.erase_node(m)


def _grouped_mm(graph: fx.Graph, members: list[fx.Node]) -> None:
    """``members`` (in column order) multiply the column groups of one matrix: one batched
    product of the matrix seen as (groups, rows, width) and the stacked weights, plus the
    stacked biases of ``addmm``s."""
    first = min(members, key=_position(graph))
    base = tilings.piece(_lhs(members[0]))[0]
    rows, cols = shape_of(base)
    biased = members[0].target == aten.addmm.default
    for m in members:
        for operand in (m.args[0], m.args[2]) if biased else (m.args[1],):
            _hoist(graph, operand, first)
    with graph.inserting_before(first):
        if not isinstance(rows, int):  # a batch of any length: its size read in the graph
            rows = graph.call_function(aten.sym_size.int, (base, 0))
        groups = graph.call_function(aten.view.default,
                                     (base, [rows, len(members), cols // len(members)]))
        groups = graph.call_function(aten.permute.default, (groups, [1, 0, 2]))
        weights = _stacked(graph, [m.args[-1] for m in members], 0)
        merged = graph.call_function(aten.bmm.default, (groups, weights))
        if biased:
            biases = _stacked(graph, [m.args[0] for m in members], 1)
            merged = graph.call_function(aten.add.Tensor, (merged, biases))
        for g, m in enumerate(members):
            m.replace_all_uses_with(graph.call_function(aten.select.int, (merged, 0, g)))
    for m in members:
        graph.erase_node(m)


def _stacked(graph: fx.Graph, nodes: list, dim: int) -> fx.Node:
    """``stack(nodes)`` with a size-1 dim ``dim`` added after the stacked one, as a ``cat``:
    Inductor compiles ``aten.stack`` only through its decomposition, which ran before."""
    pieces = [graph.call_function(aten.unsqueeze.default, (n, 0)) for n in nodes]
    if dim:
        pieces = [graph.call_function(aten.unsqueeze.default, (p, dim)) for p in pieces]
    return graph.call_function(aten.cat.default, (pieces, 0))


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


def _concat(graph: fx.Graph, operands: list, dim: int, simplify: bool) -> fx.Node:
    node = graph.call_function(aten.cat.default, (list(operands), dim))
    return (simplify and tilings.simplified_cat(graph, node, ON)) or node


def _merge_duplicate_views(graph: fx.Graph) -> int:
    """One node per distinct view (AOTAutograd writes ``permute(W)`` once per use of a
    linear's weight), so that contractions reading one view are seen to share it; how many
    were merged."""
    seen: dict[tuple, fx.Node] = {}
    merged = 0
    for n in list(graph.nodes):
        if n.op != "call_function" or not (aten_table.is_view(n.target) or
                                            n.target == operator.getitem):
            continue
        key = (n.target, _hashable(n.args), _hashable(n.kwargs))
        if key in seen:
            n.replace_all_uses_with(seen[key])
            graph.erase_node(n)
            merged += 1
        else:
            seen[key] = n
    return merged


def _hashable(value):
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


def _rank(node) -> int:
    return len(shape_of(node)) if isinstance(node, fx.Node) else -1
