"""Unrolled loops rolled back up: one computation on each slice of some tensors, summed or
joined.

    F(x[0], y[0]) + F(x[1], y[1]) + … + F(x[n-1], y[n-1]) = vmap(F)(x, y).sum(0)   rolled_sum
    cat([F(x[0], y[0]), …, F(x[n-1], y[n-1])]; d) = vmap(F)(x, y) joined along d  rolled_cat

A Python loop that adds up per-row work (a Gram matrix as a sum of outer products of rows, a
weighted sum of per-row products) reaches the ATen graph unrolled: n copies of F, each on
the selects ``x[c]`` at one position c. No region sees a reduction there, only n small
elementwise computations; rolled up, the sum over c is one reduction of F's batched form
(``torch.func.vmap`` of F, traced into ATen), which the derivations see as a contraction
(the outer products of rows summed: ``UᵀV``, one matrix product). A loop over attention
heads, its results concatenated, becomes one batched attention the same way.

F is found by comparing the terms' graphs: the same operators on the same arguments, where
each term reads selects (``unbind`` items, ``split`` pieces of size 1) at one position c of
the same tensors along the same dims, the c of the terms covering the dim (in order, for a
concatenation). Everything else a term reads (a weight, a bias) is shared.

``roll`` runs before regions are translated; the backend checks the rolled graph's outputs
on sample inputs like every substitution's. With symbolic sizes (Dynamo's SymInts), a loop
rolls where the dim it runs over has a fixed size (as Dynamo fixes a ``range`` over it) and
the batched body traces for every size of the others.
"""
from __future__ import annotations

import functools
import operator

import torch
import torch.fx as fx

from ollie.capture import rewrite, symbolic
from ollie.capture.samples import concrete, sample_like
from ollie.capture.tilings import shape_of, sum_terms

aten = torch.ops.aten
MAX_NODES = 64  # operators of F: a term beyond is no loop body worth rolling


class _Term:
    """One term of a sum (or item of a concatenation) as a function F of the slices it reads:
    its structural ``key`` (equal for the copies of one F; None where the term reads no
    slice), the position ``c`` of its selects, the slices ``(base, dim, keep)`` and the shared
    nodes it reads, in the order first read, and F's operators in the graph's order. Raises
    ``NotABody`` where the term cannot be such an F (selects at two positions, a random or
    mutating operator)."""

    def __init__(self, root: fx.Node, dependent: set):
        self.root, self.c, self.dependent = root, None, dependent
        self.slices: list[tuple[fx.Node, int, bool]] = []
        self.shared: list[fx.Node] = []
        self.nodes: list[fx.Node] = []
        self._keys: dict[fx.Node, object] = {}
        self._entered = 0
        self.key = self._key(root)

    def same_body(self, other: "_Term") -> bool:
        return (self.key, self.slices, self.shared) == (other.key, other.slices, other.shared)

    def _key(self, node: fx.Node):
        if node not in self.dependent:
            return None
        if node in self._keys:
            return self._keys[node]
        self._entered += 1
        if self._entered > 2 * MAX_NODES:  # (a recurrence's state reads every step)
            raise NotABody
        key, at = None, _select(node)
        if at is not None and at[0] not in self.dependent:  # (a position of a position: an op)
            *leaf, c = at
            if self.c not in (None, c):
                raise NotABody
            self.c = c
            if tuple(leaf) not in self.slices:
                self.slices.append(tuple(leaf))
            key = ("slice", self.slices.index(tuple(leaf)))
        elif node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            args = tuple(self._arg(a) for a in node.args)
            if _reads_a_slice(args):
                if torch.Tag.nondeterministic_seeded in node.target.tags or \
                        node.target._schema.is_mutable or len(self.nodes) >= MAX_NODES or \
                        any(isinstance(v, fx.Node) for v in node.kwargs.values()):
                    raise NotABody
                key = ("op", node.target, args, _plain(node.kwargs))
                self.nodes.append(node)
        self._keys[node] = key
        return key

    def _arg(self, a):
        if isinstance(a, fx.Node):
            key = self._key(a)
            if key is not None:
                return ("f", key)
            if a not in self.shared:
                self.shared.append(a)
            return ("shared", self.shared.index(a))
        if isinstance(a, (list, tuple)):
            return ("list", tuple(self._arg(x) for x in a))
        return ("const", _plain(a))


class NotABody(Exception):
    pass


class Unbatchable(Exception):
    """``torch.func.vmap`` cannot batch the loop body (an operator without a batching rule)."""


def _reads_a_slice(args: tuple) -> bool:
    return any(a[0] == "f" or (a[0] == "list" and _reads_a_slice(a[1])) for a in args)


def roll(gm: fx.GraphModule, example_inputs, on: set
         ) -> tuple[fx.GraphModule | None, list[str]]:
    """A copy of ``gm`` with each sum (``rolled_sum``) and each concatenation or stack
    (``rolled_cat``) of the copies of one computation over the slices of some tensors
    rolled up, where ``on`` has the rule, and a line per roll; (None, []) when none is."""
    if not _reading_a_select(gm.graph):  # no fixed position read: nothing to roll, no copy
        return None, []
    new, _ = rewrite.copy_graph(gm)
    dependent = _reading_a_select(new.graph)
    applied = []
    for n in reversed(list(new.graph.nodes)):  # outermost sums first
        line, terms = None, sum_terms(n)
        if n not in dependent:
            continue
        try:
            if "rolled_sum" in on and terms is not None:
                line = _roll_sum(new, n, terms, dependent)
            elif "rolled_cat" in on and n.op == "call_function" and \
                    n.target in (aten.cat.default, aten.stack.default) and n.users:
                line = _roll_cat(new, n, dependent)
        except (symbolic.SizeSpecific, Unbatchable):  # this loop stays unrolled
            continue
        if line:
            applied.append(line)
    if not applied:
        return None, []
    rewrite.finish(new, example_inputs)
    return new, applied


def _bodies(terms: list, dependent: set) -> list[_Term | None]:
    """Each term as a loop body F of the slices it reads (None where it is not one)."""
    bodies = []
    for t in terms:
        try:
            body = _Term(t, dependent) if isinstance(t, fx.Node) else None
        except NotABody:
            body = None
        bodies.append(body if body is not None and body.key is not None and
                      body.key[0] == "op" else None)
    return bodies


def _count(body: _Term) -> int | None:
    """How many slices the tensors ``body`` reads have along their dims (None where they
    differ)."""
    counts = [shape_of(base)[dim] for base, dim, _ in body.slices]
    if not all(isinstance(n, int) for n in counts) or len(set(counts)) != 1:
        return None
    return counts[0]


def _reading_a_select(graph: fx.Graph) -> set:
    """The nodes that read, through their operands, a select at a fixed position: the only
    ones a loop body's copy can be made of (the others are shared by every copy)."""
    found = set()
    for n in graph.nodes:
        if _select(n) is not None or any(a in found for a in n.all_input_nodes):
            found.add(n)
    return found


def _roll_sum(gm: fx.GraphModule, total: fx.Node, terms: list, dependent: set
              ) -> str | None:
    bodies = _bodies(terms, dependent)
    for first in bodies:
        if first is None:
            continue
        copies = [b for b in bodies if b is not None and b.same_body(first)]
        count = _count(first)
        if len(copies) < 2 or sorted(b.c for b in copies) != list(range(count or 0)):
            continue
        others = [t for t, b in zip(terms, bodies) if b is None or not b.same_body(first)]
        constants = [o for o in others if not isinstance(o, fx.Node)]

        def summed(out, *rest):
            out = out.sum(0)
            for o in (*rest, *constants):
                out = out + o
            return out
        _put_batched(gm, total, first, summed, [o for o in others if isinstance(o, fx.Node)])
        return (f"rolled_sum: {count} copies of one computation on the slices of "
                f"{len(first.slices)} tensor(s), summed")
    return None


def _roll_cat(gm: fx.GraphModule, joined: fx.Node, dependent: set) -> str | None:
    items = list(joined.args[0])
    bodies = _bodies(items, dependent)
    first = bodies[0]
    if len(items) < 2 or first is None or _count(first) != len(items) or \
            any(b is None or not b.same_body(first) or b.c != j for j, b in enumerate(bodies)):
        return None
    dim = joined.args[1] if len(joined.args) > 1 else joined.kwargs.get("dim", 0)
    stack = joined.target == aten.stack.default
    rank = len(shape_of(joined))
    dim = dim + rank if dim < 0 else dim

    def joined_up(out):  # the copies' results, their position c the outer of the two dims
        out = out.movedim(0, dim)
        return out if stack else out.flatten(dim, dim + 1)
    _put_batched(gm, joined, first, joined_up, [])
    return (f"rolled_cat: {len(items)} copies of one computation on the slices of "
            f"{len(first.slices)} tensor(s), {'stacked' if stack else 'concatenated'}")


def _put_batched(gm: fx.GraphModule, root: fx.Node, body: _Term, finish, extra: list
                 ) -> None:
    """Put ``finish(vmap(F)(slices, shared), *extra)`` in ``root``'s place: F is ``body``,
    batched over the dims of its slices."""
    from ollie.capture.compilers import decompositions

    f_graph, env = fx.Graph(), {}
    slice_inputs = [f_graph.placeholder(f"slice{i}") for i in range(len(body.slices))]
    shared_inputs = [f_graph.placeholder(f"shared{i}") for i in range(len(body.shared))]
    env.update(zip(body.shared, shared_inputs))
    for node in body.nodes:  # operands first
        def operand(a):
            at = _select(a)
            if at is not None and tuple(at[:3]) in body.slices:
                return slice_inputs[body.slices.index(tuple(at[:3]))]
            return env[a]
        env[node] = f_graph.node_copy(node, operand)
    f_graph.output(env[body.root])
    f = fx.GraphModule(torch.nn.Module(), f_graph)
    k, shared_count = len(body.slices), len(body.shared)
    dims = tuple(dim for _, dim, _ in body.slices)

    def copy(*pieces, shared):  # one copy of F: a kept dim's slice has that dim, of size 1
        return f(*(p.unsqueeze(d) if keep else p
                   for p, (_, d, keep) in zip(pieces, body.slices)), *shared)

    def program(*xs):
        slices, shared, rest = xs[:k], xs[k:k + shared_count], xs[k + shared_count:]
        batched = torch.func.vmap(functools.partial(copy, shared=shared), in_dims=dims)
        return finish(batched(*slices), *rest)

    inputs = [base for base, _, _ in body.slices] + body.shared + extra
    metas, like = [n.meta["val"] for n in inputs], root.meta["val"]
    # traced on sample tensors (vmap makes real tensors of a body's scalars), or on symbolic
    # sizes with its layout decided on one run at the sizes' hints
    operands = sample_like(metas)
    like = torch.empty_strided([concrete(d) for d in like.shape],
                               [concrete(d) for d in like.stride()], dtype=like.dtype)
    try:
        if not symbolic.has_symbolic_sizes(metas):
            traced = rewrite.trace_kernel(program, operands, like, decompositions())
        else:
            fakes, env = symbolic.fake_inputs(operands, metas)
            traced = rewrite.trace_kernel(program, operands, like, decompositions(), fakes)
    except symbolic.SizeSpecific:
        raise
    except Exception as e:  # vmap's or the trace's: no batched form of this body
        raise Unbatchable(str(e)) from e
    if symbolic.has_symbolic_sizes(metas):
        symbolic.refuse_specialised(env)
    rewrite.splice(gm, root, inputs, traced)


def _select(node) -> tuple[fx.Node, int, bool, int] | None:
    """``(base, dim, keep, position)`` where ``node`` is one position of ``base`` along
    ``dim``: ``aten.select`` or an ``unbind`` item (the dim dropped), or a piece of a ``split``
    into size 1 or a slice ``c:c+1`` (the dim kept); dim and position counted from the
    start."""
    if not (isinstance(node, fx.Node) and node.op == "call_function"):
        return None
    keep = node.target in (operator.getitem, aten.slice.Tensor)
    if node.target == aten.select.int:
        base, dim, c = node.args
    elif node.target == aten.slice.Tensor:  # slice(self, dim=0, start=None, end=None, step=1)
        defaults = (0, None, None, 1)[len(node.args) - 1:]  # of the arguments not given
        base, dim, c, end, step = (*node.args, *defaults)
        if not (isinstance(c, int) and c >= 0 and end == c + 1 and step == 1):
            return None
    elif node.target == operator.getitem and isinstance(node.args[0], fx.Node) and \
            node.args[0].target in (aten.unbind.int, aten.split.Tensor,
                                    aten.split_with_sizes.default):
        whole, c = node.args
        base, *rest = whole.args
        if whole.target == aten.unbind.int:
            keep, dim = False, rest[0] if rest else whole.kwargs.get("dim", 0)
        elif rest and _all_ones(rest[0]):  # pieces of size 1
            dim = rest[1] if len(rest) > 1 else whole.kwargs.get("dim", 0)
        else:
            return None
    else:
        return None
    if not isinstance(c, int):
        return None
    shape = shape_of(base)
    dim = dim + len(shape) if dim < 0 else dim
    if isinstance(shape[dim], int) and c >= shape[dim]:  # (an empty slice: no position)
        return None
    if c < 0 and not isinstance(shape[dim], int):
        return None
    return base, dim, keep, c + shape[dim] if c < 0 else c


def _all_ones(sizes) -> bool:
    sizes = sizes if isinstance(sizes, (list, tuple)) else [sizes]
    return all(isinstance(n, int) and n == 1 for n in sizes)


def _plain(value):
    """A hashable stand-in for an operator's non-tensor argument."""
    if isinstance(value, dict):
        return tuple(sorted((k, _plain(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_plain(v) for v in value)
    return value if isinstance(value, (int, float, bool, str, type(None))) else repr(value)
