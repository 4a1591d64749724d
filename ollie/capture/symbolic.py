"""Rewrites for graphs whose sizes are symbolic: one derivation serves every size.

Once a size varies, Dynamo recompiles with it symbolic (a SymInt) and hands Ollie one graph
for every size. Ollie's derivations are identities for every size; only the lowering of a
chosen program is written at concrete sizes. So a region is translated, derived, checked and
measured at the sizes of the call that compiled the graph (the hints; where a hint equals a
fixed size, at a value near it that does not: ``derivation_sizes``), and its program is then
emitted symbolically:

1. the lowered program writes sizes as numbers: where one is the hint of a symbolic size,
   or of a product of one or two of them with fixed sizes (a flattened batch of sequences,
   a stride), the program reading those sizes is tried first (``sizes_as_symbols``);
2. it is traced on fake inputs whose dims are symbolic exactly where the region's inputs
   are, in a fresh ``ShapeEnv`` that keeps which of those sizes are one symbol in the graph:
   a program that fixed a size (a reshape to a literal, an index array of one length) or
   related two sizes the graph does not relate adds a guard there and is refused, so the
   graph is never specialised behind the user's back;
3. the traced graph is checked numerically at a second size, about half the hint, against
   the region's original nodes (a number that was a size, or an index array that fits only
   the hint, is off there);
4. only then is it spliced in, and Inductor compiles one graph for every size.

Before translation, a mean over a symbolic size becomes a sum divided by that size
(``split_means``): the sum derives alone and the division reads the size.

A region that fails either check keeps its original nodes, and the report says why.
"""
from __future__ import annotations

import functools
import operator

import sympy
import torch
import torch.fx as fx
from torch._dynamo.source import ConstantSource
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv
from torch._subclasses.fake_tensor import FakeTensorMode

from ollie.capture.rewrite import copy_graph
from ollie.numerics import max_relative_error
from ollie.region import allowance, run_node


class SizeSpecific(Exception):
    """The lowered program holds only at the sizes it was derived at."""


def has_symbolic_sizes(example_inputs) -> bool:
    return any(isinstance(x, (torch.SymInt, torch.SymFloat)) for x in example_inputs) or any(
        _symbolic(d) for x in example_inputs if isinstance(x, torch.Tensor) for d in x.shape)


def _symbolic(d) -> bool:
    return isinstance(d, torch.SymInt) and not isinstance(d.node.expr, sympy.Integer)


def fake_inputs(reals: list[torch.Tensor], metas: list[torch.Tensor]):
    """Fake copies of ``reals`` in a fresh ShapeEnv, and that ShapeEnv: a dim is symbolic
    where ``metas`` (the graph's values) has a symbolic size, and dims that are one size
    symbol in the graph are one symbol here (the lengths of ``q`` and ``k``), so that a
    program relying on what the graph knows adds no guard."""
    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env, allow_non_fake_inputs=True)  # (a program's constants)
    symbols: dict = {}  # the graph's size symbol -> this env's

    def size(d, hint: int):
        if not _symbolic(d):
            return hint
        expr = d.node.expr
        key = expr if isinstance(expr, sympy.Symbol) else object()  # (an expression: alone)
        if key not in symbols:
            source = ConstantSource(f"ollie_size{len(symbols)}")
            symbols[key] = env.create_symintnode(
                env.create_symbol(hint, source, dynamic_dim=DimDynamic.DYNAMIC), hint=hint,
                source=source)
        return symbols[key]
    def stride(d, hint: int):  # the graph's expression, in this env's symbols; or None
        if not _symbolic(d):
            return hint
        ours = {k: v.node.expr for k, v in symbols.items() if isinstance(k, sympy.Symbol)}
        if not d.node.expr.free_symbols <= ours.keys():
            return None
        return env.create_symintnode(d.node.expr.xreplace(ours), hint=hint)
    fakes = []
    for real, meta in zip(reals, metas):
        sizes = [size(d, n) for d, n in zip(meta.shape, real.shape)]
        strides = [stride(d, n) for d, n in zip(meta.stride(), real.stride())]
        with mode:
            if None not in strides:
                fake = torch.empty_strided(sizes, strides, dtype=real.dtype, device=real.device)
            else:  # dense in the real one's dim order
                order = sorted(range(real.dim()), key=lambda i: -real.stride(i))
                fake = torch.empty([sizes[i] for i in order], dtype=real.dtype,
                                   device=real.device).permute([order.index(i) for i in
                                                                range(real.dim())])
        fakes.append(fake)
    return fakes, env


def refuse_specialised(env: ShapeEnv) -> None:
    """Raise ``SizeSpecific`` when tracing fixed or related a symbolic size."""
    if env.guards or env.replacements:
        raise SizeSpecific("the derived program is specific to these sizes "
                           f"({len(env.guards)} size guard(s) while tracing it)")


def other_sizes(metas: list, shape_env: ShapeEnv):
    """Second values for every size symbol of ``metas``, each a dict, in the order to try
    them: about half the hints first (a size the lowering wrote as a literal, a mean's
    ``1/n``, is off by a factor there, where one more than the hint differs by a rounding
    error), then just past them; only values the graph's guards admit."""
    symbols = {s for m in metas for d in _sizes(m) if isinstance(d, torch.SymInt)
               for s in d.node.expr.free_symbols}
    hints = {s: int(v) for s, v in shape_env.backed_var_to_val.items()}
    for new in ([lambda h, k=k: h // 2 + k for k in (1, 2, 3)] +
                [lambda h, k=k: h + k for k in (1, 2, 4)]):
        sizes = {s: new(hints[s]) for s in symbols if s in hints}
        if any(sizes[s] != hints[s] for s in sizes) and _admitted(sizes, hints, shape_env):
            yield sizes


def derivation_sizes(example_inputs, shape_env: ShapeEnv, reach: int = 8) -> dict:
    """Values, other than the hints, for the size symbols of the graph's tensor inputs whose
    hint equals a fixed size of them (a length of 256 beside 256 features) or another
    symbol's value: the nearest (within ``reach``) the graph's guards admit that equals
    neither. At those sizes every number a derived program writes tells which size it is
    (``sizes_as_symbols``); at a colliding hint it could be either, and is read as neither.
    The regions are translated, derived and checked there (``samples.sizes_at``)."""
    tensors = [x for x in example_inputs if isinstance(x, torch.Tensor)]
    taken = {int(d) for t in tensors for d in t.shape if not _symbolic(d)}
    hints = {s: int(v) for s, v in shape_env.backed_var_to_val.items()}
    symbols = dict.fromkeys(d.node.expr for t in tensors for d in t.shape
                            if _symbolic(d) and d.node.expr in hints)
    chosen: dict = {}
    for s in symbols:
        hint = hints[s]
        for v in [hint] + [hint + k * sign for k in range(1, reach + 1) for sign in (1, -1)]:
            if v > 1 and v not in taken and _admitted({**chosen, s: v}, hints, shape_env):
                break
        else:
            v = hint
        taken.add(v)
        if v != hint:
            chosen[s] = v
    return chosen


def _admitted(sizes: dict, hints: dict, shape_env: ShapeEnv) -> bool:
    """Whether the graph's size ranges and guards hold at ``sizes`` (the other symbols at
    their hints); a guard that does not evaluate there does not rule them out."""
    for s, v in sizes.items():
        bounds = shape_env.var_to_range.get(s)
        if bounds is not None and not bounds.lower <= v <= bounds.upper:
            return False
    values = {s: sympy.Integer(v) for s, v in {**hints, **sizes}.items()}
    for guard in shape_env.guards:
        try:
            if not bool(guard.expr.xreplace(values)):
                return False
        except TypeError:  # a relation left symbolic (an unbacked size)
            continue
    return True


def _sizes(value) -> list:
    if isinstance(value, torch.Tensor):
        return list(value.shape) + list(value.stride())
    return [value] if isinstance(value, torch.SymInt) else []


def at(value, sizes: dict) -> int:
    """A size (an int or a SymInt) at the symbol values ``sizes``."""
    if not isinstance(value, torch.SymInt):
        return value
    return int(value.node.expr.xreplace({s: sympy.Integer(v) for s, v in sizes.items()}))


def sample_at(meta: torch.Tensor, sizes: dict) -> torch.Tensor:
    """Normal samples (zeros for integers and bools) shaped like ``meta`` at ``sizes``,
    row-major, on ``meta``'s device."""
    shape = [at(d, sizes) for d in meta.shape]
    if meta.dtype.is_floating_point:
        return torch.randn(shape, dtype=meta.dtype, device=meta.device)
    return torch.zeros(shape, dtype=meta.dtype, device=meta.device)


def check_other_size(region, traced: fx.GraphModule, input_names, shape_env: ShapeEnv) -> None:
    """Run ``traced`` and the region's original nodes at a second size; raise
    ``SizeSpecific`` when they disagree or the original does not run there."""
    metas = [region.inputs[n].meta["val"] for n in input_names]
    for sizes in other_sizes(metas + [region.root.meta["val"]], shape_env):
        env = {region.inputs[n]: sample_at(m, sizes) for n, m in zip(input_names, metas)}
        try:
            with torch.no_grad():
                for m in region.members:
                    for a in m.all_input_nodes:  # a size the graph reads (sym_size)
                        env.setdefault(a, at(a.meta["val"], sizes))
                    env[m] = run_node(m, env)
        except Exception:
            continue
        expected = env[region.root]
        try:
            with torch.no_grad():
                got = traced(*[env[region.inputs[n]] for n in input_names])
        except Exception as e:
            raise SizeSpecific(f"the derived program fails at another size: {e}") from None
        error = max_relative_error(got, expected)
        if not error <= allowance(region, env):
            raise SizeSpecific(f"the derived program differs at another size (error {error:.2e})")
        return
    raise SizeSpecific("no second size to check the derived program at")


def split_means(gm: fx.GraphModule) -> fx.GraphModule:
    """``gm``, or a copy where each mean over dims of symbolic size is a sum divided by the
    count, read from the graph's inputs: translated, a mean's ``1/n`` is a literal at the
    hint, which holds at no other size, while the sum derives alone and the count stays
    symbolic (an arithmetic operand of symbolic size is left out of regions)."""
    aten = torch.ops.aten
    means = {}  # mean node -> the graph's inputs' nodes giving its reduced sizes
    for n in gm.graph.nodes:
        if n.op != "call_function" or n.target not in (aten.mean.dim, aten.mean.default) or \
                n.kwargs.get("dtype") or not isinstance(n.args[0].meta.get("val"), torch.Tensor):
            continue
        shape = n.args[0].meta["val"].shape
        if any(_symbolic(shape[d]) for d in _reduced(n)):
            sizes = [_size_read(gm, shape[d]) for d in _reduced(n)]
            if None not in sizes:
                means[n] = sizes
    if not means:
        return gm
    gm, copied = copy_graph(gm)
    for old, sizes in means.items():
        node = copied[old]
        x, dims = node.args[0], _reduced(node)
        keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
        with gm.graph.inserting_before(node):
            count = None
            for size in sizes:
                size = _node_of(gm, size, copied)
                if count is not None:
                    value = _value(count) * _value(size)
                    size = gm.graph.call_function(operator.mul, (count, size))
                    size.meta["val"] = value
                count = size
            total = gm.graph.call_function(aten.sum.dim_IntList, (x, dims, keepdim))
            total.meta["val"] = aten.sum.dim_IntList(x.meta["val"], dims, keepdim)
            mean = gm.graph.call_function(aten.div.Tensor, (total, count))
            mean.meta["val"] = aten.div.Tensor(total.meta["val"], count.meta["val"])
        node.replace_all_uses_with(mean)
        gm.graph.erase_node(node)
    gm.recompile()
    return gm


def _reduced(mean: fx.Node) -> list[int]:
    """The dims a mean node reduces, non-negative."""
    rank = mean.args[0].meta["val"].dim()
    dims = mean.args[1] if mean.target is torch.ops.aten.mean.dim and len(mean.args) > 1 \
        else mean.kwargs.get("dim")
    dims = list(range(rank)) if not dims else dims
    return sorted(d % rank for d in dims)


def _size_read(gm: fx.GraphModule, size):
    """Where the graph's inputs give ``size``: an int, a size input (a node), or (an input
    tensor, its dim); None where none does. (A size read from the mean's own operand would
    give that value a second user, and cut the region at it.)"""
    if not _symbolic(size):
        return int(size)
    for p in gm.graph.find_nodes(op="placeholder"):
        val = p.meta.get("val")
        if isinstance(val, torch.SymInt) and val.node.expr == size.node.expr:
            return p
        if isinstance(val, torch.Tensor):
            for d, n in enumerate(val.shape):
                if isinstance(n, torch.SymInt) and n.node.expr == size.node.expr:
                    return p, d
    return None


def _value(size):
    return size.meta["val"] if isinstance(size, fx.Node) else size


def _node_of(gm: fx.GraphModule, size, copied: dict) -> fx.Node | int:
    if isinstance(size, fx.Node):
        return copied[size]
    if isinstance(size, tuple):
        read = gm.graph.call_function(torch.ops.aten.sym_size.int, (copied[size[0]], size[1]))
        read.meta["val"] = size[0].meta["val"].shape[size[1]]
        return read
    return size


def sizes_as_symbols(traced: fx.GraphModule, fakes: list, like) -> fx.GraphModule | None:
    """``traced`` (a program traced at the hint sizes) where each number an operator takes as
    a size or a scalar, equal to one product of symbolic sizes of ``fakes`` (one size, or
    two: a batch times a length), times 1, one or two fixed sizes of them or of ``like``
    (the output), and to no other such product nor fixed size, is read from those inputs'
    sizes instead (the extent of a sum over a broadcast value, a view's length, a flattened
    length or a stride); None where there is none. Whether the number was that product is
    not known here: the second-size check tells."""
    where: dict = {}  # size symbol -> (input, dim) holding it, and its hint
    for i, fake in enumerate(fakes):
        for d, n in enumerate(fake.shape):
            if _symbolic(n):
                where.setdefault(n.node.expr, ((i, d), int(n.node.hint)))
    fixed = sorted({int(d) for t in [*fakes, like] for d in t.shape if not _symbolic(d)} - {0, 1})
    factors = {1, *fixed, *(a * b for k, a in enumerate(fixed) for b in fixed[k:])}
    symbols = list(where.values())
    monomials = [((at,), hint) for at, hint in symbols] + \
        [((a, b), ha * hb) for k, (a, ha) in enumerate(symbols) for b, hb in symbols[k:]]
    readings: dict[int, set] = {}  # number -> the (dims, factor) it could be
    for dims, hint in monomials:
        for f in factors if len(dims) == 1 else {1, *fixed}:
            readings.setdefault(hint * f, set()).add((dims, f))
    numbers = {n: next(iter(r)) for n, r in readings.items()
               if len({dims for dims, _ in r}) == 1 and n not in fixed}
    gm, _ = copy_graph(traced)
    placeholders = gm.graph.find_nodes(op="placeholder")
    first_step = next(n for n in gm.graph.nodes if n.op != "placeholder")
    reads: dict = {}  # (dims, factor) -> the node computing it, before the program's steps

    def read(dims: tuple, f: int) -> fx.Node:
        if (dims, f) not in reads:
            with gm.graph.inserting_before(first_step):
                sizes = [gm.graph.call_function(torch.ops.aten.sym_size.int,
                                                (placeholders[i], d)) for i, d in dims]
                product = sizes[0]
                for factor in sizes[1:] + ([f] if f != 1 else []):
                    product = gm.graph.call_function(operator.mul, (product, factor))
            reads[dims, f] = product
        return reads[dims, f]

    def symbol(value):
        if isinstance(value, (list, tuple)):
            return type(value)(symbol(v) for v in value)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not float(value).is_integer() or int(value) not in numbers:
            return value
        return read(*numbers[int(value)])
    for node in [n for n in gm.graph.nodes if n.op == "call_function"]:
        if isinstance(node.target, torch._ops.OpOverload):
            positions = _size_arguments(node.target)
            node.args = tuple(symbol(a) if k in positions else a for k, a in enumerate(node.args))
    if not reads:
        return None
    gm.recompile()
    return gm


@functools.cache
def _size_arguments(op) -> frozenset[int]:
    """The positions of ``op``'s arguments that take sizes (``SymInt``) or numbers."""
    from torchgen.model import FunctionSchema
    schema = FunctionSchema.parse(str(op._schema).split("::", 1)[-1])
    return frozenset(k for k, a in enumerate(schema.arguments.flat_positional)
                     if str(a.type).startswith(("SymInt", "Scalar", "Tensor")))
