"""Weights are constants where they are: computations that read only weights, done once.

In a graph that runs without grad, what reads only parameters and buffers (a product of two
weight matrices, weights concatenated by a graph substitution, a batch norm's scale) gives
the same value on every call until a weight changes. ``foldable`` finds the outermost such
computations; ``fold`` splits the graph in two: a *fold program* that computes them from the
weights, and the graph that reads them as extra inputs. ``FoldedWeights`` runs the fold
program again whenever a weight it read is another tensor or has changed (its version
counter moves on every in-place update: an optimizer step, ``load_state_dict``, an
assignment under ``no_grad``), so a folded value is never stale. (An update through
``.data``, which bypasses the version counter, is not seen: the same holds for every cache
of derived weights, Inductor's freezing included.)

``ollie.deploy`` folds the same computations into an exported program's constants.
"""
from __future__ import annotations

import weakref
from collections import OrderedDict

import torch
import torch.fx as fx


MAX_WEIGHT_SETS = 16  # distinct sets of weights whose folds are kept (layers sharing code)
WORTH_FOLDING = 0.1   # the least share of a graph's contraction work that folding alone earns


def foldable(gm: fx.GraphModule, weights: set[fx.Node]) -> list[fx.Node]:
    """The outermost computations of ``gm`` that read only ``weights`` (and tensors held as
    attributes or made of literals, of known size), in graph order. Views are not folded on
    their own (that would copy a weight): a view of a folded value stays and reads it. Nor
    is a computation whose result is larger than the weights it reads (an expand made
    dense, say)."""
    attributes = gm.graph.find_nodes(op="get_attr")
    constant = set(weights) | set(attributes)
    read = {n: _numel(n) for n in weights}  # elements of weights each node reads
    read.update({n: getattr(gm, n.target).numel() for n in attributes})
    for n in gm.graph.nodes:
        if n.op == "call_function" and n not in constant and _pure(n) and \
                all(a in constant for a in n.all_input_nodes) and \
                (n.all_input_nodes or _numel(n) >= 0):  # or made of literals (a ``full``)
            constant.add(n)
            read[n] = sum(read[a] for a in n.all_input_nodes)
    return [n for n in gm.graph.nodes if n in constant and n not in weights
            and not _aliases(n) and 0 <= _numel(n) <= read[n]
            and _read_outside(n, constant)]


def saves_work(gm: fx.GraphModule, weight_positions: list[int]) -> bool:
    """Whether the contractions on weights alone (a product of weight matrices) are at least
    ``WORTH_FOLDING`` of the graph's contraction work: then folding is worth a compile of
    its own even where nothing else is rewritten."""
    from ollie.capture.contractions import counted
    placeholders = gm.graph.find_nodes(op="placeholder")
    weights = [placeholders[i] for i in weight_positions]
    frontier = [n for n in foldable(gm, set(weights)) if n.op != "get_attr"]
    if not frontier:
        return False
    folded = [f for _, f in counted(fold_program(gm, weights, frontier).graph.nodes)]
    total = [f for _, f in counted(gm.graph.nodes)]
    if not all(f.is_Integer for f in folded + total):
        return False  # symbolic work: not compared here
    return sum(folded) > 0 and sum(folded) >= WORTH_FOLDING * sum(total)


def fold(gm: fx.GraphModule, weight_positions: list[int]
         ) -> tuple[fx.GraphModule, fx.GraphModule, list[int]] | None:
    """(fold program, graph, positions): the fold program maps the weights at ``positions``
    of ``gm``'s inputs (those of ``weight_positions`` it reads: each is checked on every
    call) to the values of ``foldable`` computations; the graph is ``gm`` reading those
    values as inputs appended after its own (None when nothing folds). ``gm`` is changed in
    place into the graph."""
    placeholders = gm.graph.find_nodes(op="placeholder")
    weights = [placeholders[i] for i in weight_positions]
    frontier = [n for n in foldable(gm, set(weights)) if n.op != "get_attr"]
    if not frontier:
        return None
    read = _ancestors(frontier)
    positions = [i for i in weight_positions if placeholders[i] in read]
    program = fold_program(gm, [placeholders[i] for i in positions], frontier)
    last = placeholders[-1]
    for i, node in enumerate(frontier):
        with gm.graph.inserting_after(last):
            last = gm.graph.placeholder(f"ollie_folded_{i}")
        last.meta = dict(node.meta)
        node.replace_all_uses_with(last)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return program, gm, positions


def with_folded_weights(new, example_inputs, kwargs: dict, report=None):
    """(graph, its inputs, wrap): the rewritten graph and its example inputs, and how to
    wrap a callable of it. In an inference graph, what reads only weights (parameters,
    buffers) is folded: the graph reads it as extra inputs, and ``wrap`` computes them,
    again only when a weight changes (``ollie.capture.folding``)."""
    weights = list(kwargs.get("static_input_idxs") or [])
    split = fold(new, weights) if kwargs.get("is_inference") and weights else None
    if split is None:
        return new, example_inputs, lambda compiled: compiled
    program, graph, read = split
    placeholders = graph.graph.find_nodes(op="placeholder")
    inputs = list(example_inputs) + [n.meta["val"] for n in placeholders[len(example_inputs):]]
    if report is not None:  # (the graph's report counts what was folded)
        report.folded = len(placeholders) - len(example_inputs)
    return graph, inputs, lambda compiled: FoldedWeights(compiled, program, read)


def compiled(gm: fx.GraphModule, example_inputs, kwargs: dict):
    """Inductor's compile of a copy of ``gm`` as it would run: with what reads only weights
    folded (``with_folded_weights``), so that two rewrites compare at their per-call cost."""
    from torch._inductor.compile_fx import compile_fx_inner

    from ollie.capture.rewrite import copy_graph
    graph, inputs, wrap = with_folded_weights(copy_graph(gm)[0], example_inputs, kwargs)
    return wrap(compile_fx_inner(graph, inputs, **kwargs))


def fold_program(gm: fx.GraphModule, weights: list[fx.Node], frontier: list[fx.Node]
                 ) -> fx.GraphModule:
    """A graph mapping ``weights`` (its inputs, in order) to the values of ``frontier``."""
    graph, mapping = fx.Graph(), {}
    for w in weights:
        mapping[w] = graph.placeholder(w.name)
        mapping[w].meta = dict(w.meta)
    wanted = _ancestors(frontier) - set(weights)
    for n in gm.graph.nodes:
        if n in wanted:
            mapping[n] = graph.node_copy(n, mapping.__getitem__)
    graph.output(tuple(mapping[n] for n in frontier))
    return fx.GraphModule(gm, graph)


class FoldedWeights:
    """A compiled graph (boxed calling convention) that reads folded values after its own
    inputs: ``fold`` computes them from the weights at ``positions``, once per set of
    weights, again whenever one of them changed."""

    _boxed_call = True

    def __init__(self, compiled, fold_program: fx.GraphModule, positions: list[int]):
        self.compiled, self.fold_program, self.positions = compiled, fold_program, positions
        self.folds: OrderedDict = OrderedDict()  # weights' ids -> (refs, versions, values)

    def __call__(self, args: list):
        weights = [args[i] for i in self.positions]
        values = self._values(weights)
        full = list(args)
        args.clear()  # the boxed convention: the callee owns the inputs
        return self.compiled(full + values)

    def _values(self, weights: list) -> list:
        key = tuple(map(id, weights))
        entry = self.folds.get(key)
        if entry is not None:
            refs, versions, values = entry
            if all(r() is w for r, w in zip(refs, weights)) and versions == _stamp(weights):
                self.folds.move_to_end(key)
                return values
        with torch.no_grad():
            values = list(self.fold_program(*weights))
        self.folds[key] = ([weakref.ref(w) for w in weights], _stamp(weights), values)
        if len(self.folds) > MAX_WEIGHT_SETS:
            self.folds.popitem(last=False)
        return values


def _stamp(weights: list) -> list:
    """What changes when a weight's values may have: its version and where its data is."""
    return [(w._version, w.data_ptr()) for w in weights]


def _ancestors(nodes: list[fx.Node]) -> set[fx.Node]:
    """``nodes`` and every node they read, directly or not."""
    found, stack = set(), list(nodes)
    while stack:
        n = stack.pop()
        if n not in found:
            found.add(n)
            stack.extend(n.all_input_nodes)
    return found


def _read_outside(n: fx.Node, constant: set) -> bool:
    """Whether a node that is not constant reads ``n``, directly or through views of it."""
    return any(u not in constant or (_aliases(u) and _read_outside(u, constant))
               for u in n.users)


def _aliases(n: fx.Node) -> bool:
    """Whether ``n`` is a view of its input (its result shares the input's memory)."""
    returns = getattr(getattr(n.target, "_schema", None), "returns", ())
    return any(r.alias_info is not None for r in returns)


def _numel(n: fx.Node) -> int:
    val = n.meta.get("val")
    if isinstance(val, torch.Tensor) and all(isinstance(d, int) for d in val.shape):
        return val.numel()
    return -1  # not a tensor of known size: never folded


def _pure(n: fx.Node) -> bool:
    tags = getattr(n.target, "tags", ())
    return isinstance(n.target, torch._ops.OpOverload) and \
        torch.Tag.nondeterministic_seeded not in tags and not n.target._schema.is_mutable
