"""Regions: neighbouring ATen nodes with a row in the table composed into one ``ir`` expression.

Each translated node's operands are the expressions of its producers, so a chain of
operators becomes ONE nested expression and derivation rules work across operator
boundaries. A node's value is *materialised* (it becomes a region's root, the output of a
rewritten program) when something outside the translated world needs it: an untranslated
node, the graph's output, or users in more than one region. A value whose users all lead,
through translated nodes with one user each, to one contraction of the value with itself
(``k.T @ k``) is composed into that contraction's expression, as one shared scope: the
algebra needs both factors in one expression. A value that meets itself elementwise (GELU's
``x * erf(x)``, a residual ``x + f(x)``) stays a cut: Inductor fuses that work in either
form, and the larger region costs derivation and measurement time. Everything untranslated
stays in the graph for Inductor, its reason recorded for ``explain``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import sympy
import torch
import torch.fx as fx
from torch.utils.flop_counter import flop_registry

import ir
import ir.analysis
from derivations.normalize import inline_views
from ollie.capture import aten, contractions, conv_terms
from ollie.capture.samples import concrete

# Elementwise arithmetic: a size it takes as an operand is a value, which the translation
# would write as a literal at its hint.
ARITHMETIC = {getattr(torch.ops.aten, name) for name in ("add", "sub", "rsub", "mul", "div",
                                                         "true_divide", "pow")}


class Unsupported(Exception):
    """A node that stays in the graph; the message says why."""


@dataclass
class Region:
    """A materialised expression: ``root``'s value computed by ``expr`` from ``inputs``."""

    root: fx.Node
    expr: ir.Scope
    inputs: dict[str, fx.Node]            # ir tensor name -> the fx node that provides it
    members: list[fx.Node]                # fx nodes folded into ``expr`` (root included)

    @property
    def compute_ops(self) -> list[fx.Node]:
        return [m for m in self.members if not aten.is_view(m.target)]


@dataclass
class Translation:
    regions: list[Region]
    left: dict[fx.Node, str] = field(default_factory=dict)   # node -> why it stays as it is


def value_meta(node: fx.Node):
    """(shape, dtype) of a node's single-tensor value, or None."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return None
    return tuple(concrete(d) for d in val.shape), val.dtype  # symbolic sizes at their hints


def translate(gm: fx.GraphModule, compose_shared: bool = False,
              cut_at_activations: bool = False) -> Translation:
    """Compose the translatable nodes of ``gm`` (``meta["val"]`` set; symbolic sizes are
    translated at their hints, ``ollie.capture.symbolic`` emits them) into regions. With
    ``compose_shared``, a node read by several translated nodes is composed into each (one
    shared scope) instead of becoming a region of its own: right for one expression, wrong
    for a graph whose regions are compiled apart (it would run twice). With
    ``cut_at_activations`` (under Inductor), a region ends at an activation between
    contractions (``_activations_between``)."""
    forced: set[fx.Node] = set()
    while True:  # a node whose consumer turned out untranslatable must be materialised: retry
        result, newly_forced = _translate_once(gm, forced, compose_shared)
        if cut_at_activations and not newly_forced:
            newly_forced = {m for r in result.regions for m in _activations_between(r)} - forced
        if not newly_forced:
            return result
        forced |= newly_forced


def _translate_once(gm: fx.GraphModule, forced: set[fx.Node], compose_shared: bool):
    exprs: dict[fx.Node, ir.Scope] = {}
    members: dict[fx.Node, list[fx.Node]] = {}
    region_inputs: dict[fx.Node, dict[str, fx.Node]] = {}
    left: dict[fx.Node, str] = {}
    newly_forced: set[fx.Node] = set()

    def materialised(n: fx.Node) -> bool:
        users = list(n.users)
        if compose_shared:
            return n in forced or not users or any(
                u.op == "output" or aten.row(u.target) is None for u in users)
        return n in forced or not users or not _converge(users, forced)

    for node in gm.graph.nodes:
        if node.op != "call_function" or isinstance(node.meta.get("val"), torch.SymInt):
            continue  # (arithmetic on sizes: no tensor work to translate or report)
        build = aten.row(node.target)
        if build is None:
            left[node] = f"no row for {describe(node)} in the ATen table"
            continue
        ins: dict[str, fx.Node] = {}
        folded: list[fx.Node] = []

        def operand(a):
            if isinstance(a, fx.Node) and isinstance(a.meta.get("val"), torch.SymInt):
                if a in node.args and node.target.overloadpacket in ARITHMETIC and \
                        not isinstance(a.meta["val"].node.expr, sympy.Integer):
                    raise Unsupported(f"it computes with {a.name}, a size that varies")
                return concrete(a.meta["val"])  # a size read from the graph, at its hint
            if isinstance(a, fx.Node):
                if a in exprs and not materialised(a):
                    folded.extend(members[a])
                    ins.update(region_inputs[a])
                    return exprs[a]
                meta = value_meta(a)
                if meta is None:
                    raise Unsupported(f"operand {a.name} is not a tensor")
                shape, dtype = meta
                if dtype not in aten.DTYPES:
                    raise Unsupported(f"operand {a.name} has dtype {dtype}")
                ins[a.name] = a
                return ir.Tensor(a.name, shape, aten.DTYPES[dtype])
            if isinstance(a, (list, tuple)):
                return type(a)(operand(x) for x in a)
            return concrete(a)

        try:
            meta = value_meta(node)
            if meta is None or meta[1] not in aten.DTYPES:
                raise Unsupported("its result is not a floating-point or bool tensor")
            args = [operand(a) for a in node.args]
            kwargs = {k: operand(v) for k, v in node.kwargs.items()}
            if node.target.overloadpacket is torch.ops.aten.as_strided:
                args, kwargs = _offset_from_first_element(node, args, kwargs)
            expr = build(*args, **kwargs)
            if tuple(expr.shape) != meta[0]:
                raise Unsupported(f"shape {tuple(expr.shape)} differs from ATen's {meta[0]}")
        except Exception as e:  # an argument the row refuses: the node stays in the graph
            text = str(e).strip()
            left[node] = text.splitlines()[0] if text else type(e).__name__
            for a in node.all_input_nodes:  # its producers must now be materialised
                if a in exprs and not materialised(a):
                    newly_forced.add(a)
            continue
        exprs[node] = expr
        members[node] = folded + [node]
        region_inputs[node] = ins

    regions = [Region(n, *_canonical_names(exprs[n], region_inputs[n]),
                      list(dict.fromkeys(members[n])))  # a shared value is folded in once
               for n in exprs if materialised(n)]
    return Translation(regions, left), newly_forced


CONVERGE_STEPS = 16  # how far the users of a value are followed to the node that joins them


def _converge(users: list[fx.Node], forced: set[fx.Node]) -> bool:
    """Whether every one of ``users`` leads, through translated nodes that are composed
    into their one user (not forced, one user each), to one common translated node, a
    contraction where there are several users: the value then lives in that node's
    region."""
    paths = []
    for user in users:
        path, node = [], user
        while len(path) < CONVERGE_STEPS:
            if node.op != "call_function" or aten.row(node.target) is None:
                break
            path.append(node)
            following = list(node.users)
            if node in forced or len(following) != 1:
                break  # materialised (or may be): the path ends in its region
            node = following[0]
        paths.append(path)
    common = set(paths[0]).intersection(*paths[1:])
    join = next((n for n in paths[0] if n in common), None)
    return join is not None and (len(users) == 1 or _contraction(join))


def _contraction(node: fx.Node) -> bool:
    """Whether torch counts ``node``'s flops: a matrix product, a convolution, attention."""
    return getattr(node.target, "overloadpacket", None) in flop_registry


def _canonical_names(expr: ir.Scope, inputs: dict[str, fx.Node]):
    """The expression with its inputs named ``in0``, ``in1``, ... in the order it reads them,
    and the inputs by those names: the same computation in two places of a graph (the
    layers of a stack) is then the same expression, derived once (the cache key matches)."""
    names = {old: f"in{k}" for k, old in enumerate(ir.inputs(expr))}
    return (ir.nodes.rename_inputs(expr, names),
            {names[old]: node for old, node in inputs.items() if old in names})


def worth_deriving(region: Region, on_gpu: bool = False, inductor: bool = False) -> str | None:
    """Why ``region`` is NOT worth deriving, or None when it is.

    Derivations pay off where the reductions' iteration spaces are much larger than the data
    the region reads (contractions, possibly in disguise: a matmul, a conv, a broadcast
    product summed away, a loop of matrix-vector products): that is where contraction
    orders, distributivity and the EinNet forms change the work. Elementwise chains and
    plain reductions are left to Inductor, which fuses them into one loop anyway. And a lone
    library operator over plain operands is already what the library does best on a CPU
    (measured: conv, conv transpose and dilated conv keep the library call there), so it is
    left too; on a GPU EinNet's single-operator rewrites (conv → GEMM + eOperator) are still
    tried. Under Inductor, so are contractions whose work no derivation can lower
    (``_apart``): a lone one with only elementwise work around it (a linear layer after a
    normalisation, a convolution before a batch norm), or several with activations or a
    bottleneck between them; Inductor fuses the work around them in any form.
    """
    compute = region.compute_ops
    if not compute:
        return "only moves data"
    expr = inline_views(region.expr)
    data = sum(ir.analysis.numel(t) for t in ir.inputs(expr).values())
    if reduction_work(region) <= 4 * data:
        return "no contraction (elementwise work and plain reductions: Inductor fuses them)"
    if on_gpu:
        return None
    around = [m for m in region.members if not _contraction(m)]
    if len(compute) == 1 and all(m.target.overloadpacket in PLAIN for m in around):
        return f"a single {describe(compute[0])} over plain operands"
    lone = [m for m in compute if _contraction(m)]
    if not inductor or not lone or not _apart(region, lone):
        return None
    if len(lone) == 1:
        return f"a single {describe(lone[0])} with only elementwise work around it " \
               "(Inductor fuses that work in either form)"
    return f"{len(lone)} contractions with activations between them, or a bottleneck, and " \
           "only elementwise work around (no reassociation or common factor lowers their work)"


def _apart(region: Region, contractions: list[fx.Node]) -> bool:
    """Whether no derivation can change the work of ``region``'s contractions: around them
    only layouts, joins, picks of the region's inputs, constants, elementwise work and sums no
    contraction's result reaches through linear steps (summing first is already the least
    work: a network's pooling before its classifier), and no two contractions joined by
    linear steps alone (one's result an operand of the other: a reassociation; both summed
    with an operand in common: a common factor). An unrolled RNN: each step's products,
    summed, pass through an activation before the next step reads them."""
    members = set(region.members)
    reach = {c: _linear_reach(c, members) for c in contractions}
    reached = set().union(*reach.values(), *(_summed_squares(c, reach[c], members)
                                             for c in contractions))
    for m in region.members:
        op = m.target.overloadpacket
        if not (_contraction(m) or op in PLAIN or op in JOINS or _elementwise(m) or
                op in PICKS and not set(m.all_input_nodes) & members or
                op in LINEAR_REDUCTIONS and m not in reached):
            return False
    sources = {c: {_source(a, members) for a in c.all_input_nodes} for c in contractions}
    for i, a in enumerate(contractions):
        for b in contractions[i + 1:]:
            if b in reach[a] and _may_reassociate(a, b, reach[a]) or \
                    a in reach[b] and _may_reassociate(b, a, reach[b]) or \
                    (reach[a] & reach[b] and sources[a] & sources[b]):
                return False
    return True


def _may_reassociate(first: fx.Node, then: fx.Node, reach: set) -> bool:
    """Whether a reassociation of ``first``'s product into ``then``'s (which reads it through
    linear steps) could lower their work. Not where both multiply rows by a weight, rows ×
    j → k by ``first`` then, the same rows, × k → l by ``then``, around a bottleneck: with
    j·l ≥ k·(j + l), any merged product does j·l multiply-adds a row, no fewer than the two
    (MobileNet's projection, residual add and next expansion, 1×1 convolutions)."""
    a, b = _row_product(first), _row_product(then)
    if a is None or b is None:
        return True
    (_, _, rows, j, k), (x, w, x_rows, k2, l) = a, b
    joined = x in reach and w not in reach and rows == x_rows and k == k2
    return not joined or j * l < k * (j + l)


def _row_product(node: fx.Node) -> tuple[fx.Node, fx.Node, int, int, int] | None:
    """(the operand whose rows ``node`` multiplies, the matrix, the rows, j, k) where ``node``
    multiplies rows of j values by a j × k matrix: a matrix product, or a 1×1 convolution
    (stride 1, no padding, one group) whose rows are its pixels; None otherwise, or where a
    size is symbolic."""
    conv = conv_terms.settings(node)  # (kernel, stride, padding, dilation)
    if node.target.overloadpacket in (torch.ops.aten.mm, torch.ops.aten.addmm):
        x, w = node.args[-2:]
    elif conv is not None and all(d == 1 for d in (*conv[0], *conv[1])) and not any(conv[2]):
        x, w = node.args[:2]
    else:
        return None
    x_val, w_val = x.meta.get("val"), w.meta.get("val")
    if not all(isinstance(t, torch.Tensor) for t in (x_val, w_val)) or \
            not all(isinstance(d, int) for d in (*x_val.shape, *w_val.shape)):
        return None
    j, k = w_val.shape[:2][::-1] if conv else w_val.shape
    return x, w, x_val.numel() // j, j, k


def _summed_squares(contraction: fx.Node, reach: set, members: set) -> set[fx.Node]:
    """The sums, after a square of ``contraction``'s result, of more values each than each
    value of the product has terms: such a sum is a product of two contractions, each of one
    operand with itself, and does fewer multiply-adds where the inner dimension is the smaller
    (‖AB‖²_F = tr(AᵀA·BBᵀ)). A norm after a layer no wider than its input has none."""
    squares = [s for s in reach if s.target.overloadpacket is torch.ops.aten.pow and
               len(s.args) > 1 and s.args[1] == 2]
    if not squares:
        return set()
    terms = concrete(contractions.flops(contraction)) // max(2 * _numel(contraction), 1)
    return {r for s in squares for r in _linear_reach(s, members)
            if r.target.overloadpacket in LINEAR_REDUCTIONS and _numel(s) > terms * _numel(r)}


def _linear_reach(node: fx.Node, members: set) -> set[fx.Node]:
    """The region's nodes that ``node``'s value reaches through linear steps (stopping at an
    activation, a one-operand function no linear map passes through)."""
    return _reach(node, members, through=lambda n: not _activation(n))


def _reach(node: fx.Node, members: set, through=lambda n: True) -> set[fx.Node]:
    """The region's nodes that ``node``'s value reaches, going on past those ``through``
    accepts."""
    seen, todo = set(), list(node.users)
    while todo:
        n = todo.pop()
        if n in seen or n not in members:
            continue
        seen.add(n)
        if through(n):
            todo.extend(n.users)
    return seen


def _activations_between(region: Region) -> set[fx.Node]:
    """The activations inside ``region`` that a contraction's result reaches through linear
    steps and that a contraction reads, directly or not: no derivation moves a product's
    work across them, so under Inductor the region is cut there, and what follows (a
    DenseNet transition's convolution and pool, after a dense layer) is derived alone, small
    enough for its budget."""
    members = set(region.members)
    contractions = [m for m in region.members if _contraction(m)]
    reached = set().union(*(_linear_reach(c, members) for c in contractions))
    return {m for m in reached - {region.root}
            if _activation(m) and any(map(_contraction, _reach(m, members)))}


def _activation(node: fx.Node) -> bool:
    return _elementwise(node) and len(node.all_input_nodes) == 1 and \
        node.target.overloadpacket not in LINEAR_ONE_OPERAND


def _source(node: fx.Node, members: set) -> fx.Node:
    """What ``node`` lays out (through ``PLAIN`` operators of the region)."""
    while node in members and node.target.overloadpacket in PLAIN and node.all_input_nodes:
        node = node.all_input_nodes[0]
    return node


# operators that only lay out or copy a tensor: around a lone library operator they leave
# nothing for a derivation to change (a diagonal, a slice or an expand would)
PLAIN = {torch.ops.aten.view, torch.ops.aten._unsafe_view, torch.ops.aten.reshape,
         torch.ops.aten.permute, torch.ops.aten.t, torch.ops.aten.transpose,
         torch.ops.aten.clone, torch.ops.aten.alias, torch.ops.aten.unsqueeze,
         torch.ops.aten.squeeze, torch.ops.aten._to_copy}


# picks of a tensor, and constants: of a region's input, a derivation has nothing to move
PICKS = {torch.ops.aten.select, torch.ops.aten.slice, torch.ops.aten.full,
         torch.ops.aten.zeros, torch.ops.aten.ones}
# tensors laid side by side: linear, each piece kept as it is (a dense block's features)
JOINS = {torch.ops.aten.cat}
# sums over some dimensions or windows: linear, but no longer pointwise operators
LINEAR_REDUCTIONS = {torch.ops.aten.sum, torch.ops.aten.mean, torch.ops.aten.avg_pool2d}
# one-operand pointwise operators that are linear: a scale by a number, a negation, a copy
LINEAR_ONE_OPERAND = {torch.ops.aten.mul, torch.ops.aten.div, torch.ops.aten.neg,
                      torch.ops.aten.clone, torch.ops.aten._to_copy, torch.ops.aten.alias}


def _elementwise(node: fx.Node) -> bool:
    """A pointwise operator no larger than its largest operand (a scale, a shift, an
    activation), not one that broadcasts operands into a larger tensor (an outer product:
    structure a derivation can exploit)."""
    if torch.Tag.pointwise not in getattr(node.target, "tags", ()):
        return False
    sizes = [_numel(a) for a in node.all_input_nodes]
    return bool(sizes) and _numel(node) <= max(sizes)


def _numel(node: fx.Node) -> int:
    val = node.meta.get("val")
    return math.prod(concrete(d) for d in val.shape) if isinstance(val, torch.Tensor) else 1


def reduction_work(region: Region) -> int:
    """Iteration points of the region's reductions: the work derivations can change."""
    return sum(ir.analysis.iteration_points(s) for s in ir.sub_scopes(region.expr)
               if s.summation)


def _offset_from_first_element(node: fx.Node, args: list, kwargs: dict):
    """ATen's as_strided indexes the *storage*; ``ir.ops.as_strided`` the operand's row-major
    elements. They agree for a contiguous operand once the offset counts from its first
    element (the layout is fixed by the graph's example values)."""
    source = node.args[0] if node.args else node.kwargs.get("self")
    val = source.meta.get("val") if isinstance(source, fx.Node) else None
    if not isinstance(val, torch.Tensor):
        raise Unsupported("as_strided of a value whose layout is unknown")
    if not val.is_contiguous():
        raise Unsupported("as_strided of a non-contiguous tensor")
    params = dict(zip(("self", "size", "stride", "storage_offset"), args), **kwargs)
    absolute = params.get("storage_offset")
    offset = 0 if absolute is None else concrete(absolute) - concrete(val.storage_offset())
    return [params["self"], params["size"], params["stride"], offset], {}


def describe(node: fx.Node) -> str:
    """``aten.mm`` for an ATen node; the target's name otherwise."""
    packet = getattr(node.target, "overloadpacket", None)
    if packet is not None:
        return str(packet)
    return getattr(node.target, "__name__", str(node.target))


def source_line(node: fx.Node) -> str | None:
    """Where the user's code made ``node``: the module type and the last frame of its stack
    trace (``nn.Linear at model.py:12``), when Dynamo recorded them."""
    where = []
    stack = node.meta.get("nn_module_stack")
    if stack:
        _, module_type = list(stack.values())[-1]
        name = getattr(module_type, "__name__", None) or str(module_type).rsplit(".", 1)[-1]
        where.append(name.strip("'>"))
    trace = node.meta.get("stack_trace")
    if trace:
        lines = [ln.strip() for ln in trace.strip().splitlines() if ln.strip().startswith("File")]
        if lines:
            file_part = lines[-1].split(",")
            path = file_part[0].replace("File", "").strip().strip('"').rsplit("/", 1)[-1]
            line = file_part[1].replace("line", "").strip() if len(file_part) > 1 else "?"
            where.append(f"{path}:{line}")
    return " at ".join(where) if where else None
