"""Unrolled loops rolled back up: one computation on each slice of some tensors, summed.

    F(x[0], y[0]) + F(x[1], y[1]) + … + F(x[n-1], y[n-1]) = vmap(F)(x, y).sum(0)   rolled_sum

A Python loop that adds up per-row work (a Gram matrix as a sum of outer products of rows, a
weighted sum of per-row products) reaches the ATen graph unrolled: n copies of F, each on
the selects ``x[c]`` at one position c. No region sees a reduction there, only n small
elementwise computations; rolled up, the sum over c is one reduction of F's batched form
(``torch.func.vmap`` of F, traced into ATen), which the derivations see as a contraction
(the outer products of rows summed: ``UᵀV``, one matrix product).

F is found by comparing the terms' graphs: the same operators on the same arguments, where
each term reads selects at one position c of the same tensors along the same dims, the c
of the terms covering the dim. Everything else a term reads (a weight, a bias) is shared.
``roll`` runs before regions are translated; the backend checks the rolled graph's outputs
on sample inputs like every substitution's. Graphs with symbolic sizes are left as they are
(whether the positions cover a dim compares sizes).
"""
from __future__ import annotations

import torch
import torch.fx as fx

from ollie.capture import rewrite
from ollie.capture.symbolic import has_symbolic_sizes
from ollie.capture.tilings import _is_add, _terms, shape_of

aten = torch.ops.aten
MAX_NODES = 64  # operators of F: a term beyond is no loop body worth rolling


class _Term:
    """One term of a sum as a function F of the slices it reads: its structural ``key``
    (equal for the copies of one F; None where the term reads no slice), the position ``c``
    of its selects, the slices ``(base, dim)`` and the shared nodes it reads, in the order
    first read, and F's operators in the graph's order. Raises ``NotABody`` where the term
    cannot be such an F (selects at two positions, a random or mutating operator)."""

    def __init__(self, root: fx.Node):
        self.root, self.c = root, None
        self.slices: list[tuple[fx.Node, int]] = []
        self.shared: list[fx.Node] = []
        self.nodes: list[fx.Node] = []
        self._keys: dict[fx.Node, object] = {}
        self.key = self._key(root)

    def same_body(self, other: "_Term") -> bool:
        return (self.key, self.slices, self.shared) == (other.key, other.slices, other.shared)

    def _key(self, node: fx.Node):
        if node in self._keys:
            return self._keys[node]
        key, at = None, _select(node)
        if at is not None:
            base, dim, c = at
            if self.c not in (None, c):
                raise NotABody
            self.c = c
            if (base, dim) not in self.slices:
                self.slices.append((base, dim))
            key = ("slice", self.slices.index((base, dim)))
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


def _reads_a_slice(args: tuple) -> bool:
    return any(a[0] == "f" or (a[0] == "list" and _reads_a_slice(a[1])) for a in args)


def roll(gm: fx.GraphModule, example_inputs) -> tuple[fx.GraphModule | None, list[str]]:
    """A copy of ``gm`` with each sum of the copies of one computation over the slices of
    some tensors rolled up (``rolled_sum``), and a line per sum; (None, []) when none is."""
    if has_symbolic_sizes(example_inputs):
        return None, []
    new, _ = rewrite.copy_graph(gm)
    applied = []
    for n in reversed(list(new.graph.nodes)):  # outermost sums first
        if n.graph is not new.graph or not _is_add(n) or \
                any(_is_add(u) and len(n.users) == 1 for u in n.users):
            continue
        line = _roll_sum(new, n)
        if line:
            applied.append(line)
    if not applied:
        return None, []
    rewrite.finish(new, example_inputs)
    return new, applied


def _roll_sum(gm: fx.GraphModule, total: fx.Node) -> str | None:
    terms = _terms(total)
    bodies = []
    for t in terms:
        try:
            body = _Term(t) if isinstance(t, fx.Node) else None
        except NotABody:
            body = None
        bodies.append(body if body is not None and body.key is not None and
                      body.key[0] == "op" else None)
    for first in bodies:
        if first is None:
            continue
        copies = [b for b in bodies if b is not None and b.same_body(first)]
        count = shape_of(first.slices[0][0])[first.slices[0][1]]
        if len(copies) < 2 or sorted(b.c for b in copies) != list(range(count)) or \
                any(shape_of(base)[dim] != count for base, dim in first.slices):
            continue
        others = [t for t, b in zip(terms, bodies) if b is None or not b.same_body(first)]
        _replace(gm, total, first, others)
        return (f"rolled_sum: {count} copies of one computation on the slices of "
                f"{len(first.slices)} tensor(s), summed")
    return None


def _replace(gm: fx.GraphModule, total: fx.Node, body: _Term, others: list) -> None:
    """Put ``vmap(F)(slices, shared).sum(0) + others`` in ``total``'s place."""
    from ollie.capture.compilers import decompositions

    f_graph, env = fx.Graph(), {}
    slice_inputs = [f_graph.placeholder(f"slice{i}") for i in range(len(body.slices))]
    shared_inputs = [f_graph.placeholder(f"shared{i}") for i in range(len(body.shared))]
    env.update(zip(body.shared, shared_inputs))
    for node in body.nodes:  # in the graph's order: operands first
        def operand(a):
            at = _select(a)
            if at is not None and (at[0], at[1]) in body.slices:
                return slice_inputs[body.slices.index((at[0], at[1]))]
            return env[a]
        env[node] = f_graph.node_copy(node, operand)
    f_graph.output(env[body.root])
    f = fx.GraphModule(torch.nn.Module(), f_graph)
    k, node_others = len(body.slices), [o for o in others if isinstance(o, fx.Node)]
    constants = [o for o in others if not isinstance(o, fx.Node)]
    dims = tuple(dim for _, dim in body.slices)
    shared_count = len(body.shared)

    def program(*xs):
        slices, shared, rest = xs[:k], xs[k:k + shared_count], xs[k + shared_count:]
        out = torch.func.vmap(lambda *s: f(*s, *shared), in_dims=dims)(*slices).sum(0)
        for o in (*rest, *constants):
            out = out + o
        return out

    inputs = [base for base, _ in body.slices] + body.shared + node_others
    values = [n.meta["val"] for n in inputs]
    traced = rewrite.trace_kernel(program, values, total.meta["val"], decompositions())
    rewrite.splice(gm, total, inputs, traced)


def _select(node) -> tuple[fx.Node, int, int] | None:
    """``(base, dim, position)`` of ``aten.select(base, dim, position)``, dim and position
    counted from the start."""
    if not (isinstance(node, fx.Node) and node.op == "call_function" and
            node.target == aten.select.int and isinstance(node.args[2], int)):
        return None
    base, dim, c = node.args[0], node.args[1], node.args[2]
    shape = shape_of(base)
    dim = dim + len(shape) if dim < 0 else dim
    return base, dim, c + shape[dim] if c < 0 else c


def _plain(value):
    """A hashable stand-in for an operator's non-tensor argument."""
    if isinstance(value, dict):
        return tuple(sorted((k, _plain(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_plain(v) for v in value)
    return value if isinstance(value, (int, float, bool, str, type(None))) else repr(value)
