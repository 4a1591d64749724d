"""The generated graph rules (``derivations/rules/graph_generated.py``, row ``generated`` of
``ollie.capture.graph_rules.RULES``) applied to ATen graphs.

Each rule ``lhs = rhs`` was found and proven by ``derivations.synthesis.graph`` over ``mm``,
``conv``, ``add``, ``sub``, ``mul``, ``scale``, ``T``, ``cat`` and the slices ``head``/``tail``;
here it is matched in either direction (with its instance on untransposed operands,
``graph.untransposed``) and applied where the other side costs less: fewer multiply-adds
first, then fewer kernels, then fewer elements written.
What reads only weights costs nothing (it is folded once, ``ollie.capture.folding``), and
views cost nothing. So ``x @ W1 + h @ W2`` becomes ``cat(x, h; 1) @ cat(W1, W2; 0)`` in an
inference graph whose W1, W2 are weights (two products and a sum become a concatenation and
one product), and stays as it is in training, where the weights' concatenation would be paid
on every call; ``x @ W1 + x @ W2`` becomes ``x @ (W1 + W2)`` in both. A rule applied alone
never takes a step that costs more, so a regrouping is also composed with each rule that
then saves a contraction (``graph_synthesis.composed``), and the pair is judged as one: a
low-rank adapter ``x @ W + (x @ A) @ B`` becomes ``x @ (W + A @ B)``, the weights' product
folded.

The matcher reads ATen as the rules' operators: ``aten.mm``; ``aten.add.Tensor``,
``aten.sub.Tensor`` (without ``alpha``) and ``aten.mul.Tensor`` of two tensors; ``scale`` as
a multiplication or division by one finite Python number (the same wherever a rule reads
``scale``); a 2-d ``permute``, ``t`` or ``transpose``; ``aten.cat`` of two matrices; a slice
of a matrix from its start (``head``) or to its end (``tail``), step 1. Under a slice, a
matrix matches ``cat(X, Z)`` as its two pieces at the slice's point: so ``(x @ W)[:r]``
becomes ``x[:r] @ W`` (``head0(mm(cat0(X, Z), U)) = mm(X, U)``), computing only the rows it
keeps. ``aten.convolution`` of groups 1 is ``conv`` (``ollie.capture.conv_terms``: its
filters and images, and what every convolution of a match must share). A sum is matched up
to the order and grouping of its terms, ``addmm(b, A, B)`` being the terms ``mm(A, B)`` and
``b`` (so a linear layer's bias is one more term, added back); elsewhere an addmm is ``mm``,
and its bias, like a convolution's, goes through the rule's sums, differences, scales and
concatenations of outputs, and through a product on the right (``(x W1ᵀ + b1) W2ᵀ =
x (W2 W1)ᵀ + W2 b1``), to the other side's contraction (``ollie.capture.biases``). A sum's
terms that are one view of matrices (linear maps of a batch of sequences: flattened,
multiplied, viewed back) are matched as the sum of the matrices, viewed. Operands must give
each of the rule's size symbols one size (``derivations.synthesis.graph.consistent``), and a
matched node other than the root must have no other user (a view may), so that no work is
done twice.

With symbolic sizes (Dynamo's SymInts) a rule applies where it costs less at *every* size:
each cost is then a polynomial in the size symbols, and the difference must have no negative
coefficient (``x@W1 + x@W2``: ``2mkn - mkn``); a reassociation whose better side depends on
the sizes is left alone. Sizes are compared as expressions, never as SymInts, so matching
adds no guard.
"""
from __future__ import annotations

import itertools
import math
from functools import lru_cache

import sympy
import torch
import torch.fx as fx

from derivations.synthesis import graph as graph_synthesis
from derivations.synthesis.graph_terms import canonical
from ollie.capture import biases, conv_terms, graph_rules, tilings
from ollie.capture.conv_terms import CONV, CONV_OUT
from ollie.capture.slice_pieces import (Piece, match_pieces, nonnegative_pieces, operands,
                                        rank, resolve_pieces, shape_of, split_point)

aten = torch.ops.aten
WEIGHT = "ollie_weight"  # placeholder meta key: the value is a weight held fixed (foldable)
ARITHMETIC = {"add": aten.add.Tensor, "sub": aten.sub.Tensor,  # (no alpha: kwargs are refused)
              "mul": aten.mul.Tensor}
SCALES = (aten.mul.Tensor, aten.div.Tensor)
SLICES = ("head0", "tail0", "head1", "tail1")   # at a source's root only (``_directions``)
SCALAR = "c"  # the binding of ``scale``'s number: (aten op, number)
OPERATORS = ("mm", CONV, "add", "sub", "mul", "scale", "T", "cat0", "cat1") + SLICES


def mark_weights(gm: fx.GraphModule, indices) -> None:
    """Mark the placeholders at ``indices`` (Inductor's static inputs of an inference graph)
    as weights, which the rules' costs may treat as folded."""
    wanted = set(indices)
    for i, n in enumerate(gm.graph.find_nodes(op="placeholder")):
        if i in wanted:
            n.meta[WEIGHT] = True


@lru_cache(maxsize=1)
def _directions() -> list[tuple[tuple, tuple, graph_synthesis.GraphRule]]:
    """(source pattern, target, rule) for both directions of every rule and of its instance
    on untransposed operands (``graph_synthesis.untransposed``: ``mm(mm(X, U), V) =
    mm(X, mm(U, V))``), each rule once up to its operands' names; a bare operand is never a
    source (it would match every node)."""
    out, seen = [], set()
    for r in graph_synthesis.loaded_rules():
        for r in filter(None, (r, graph_synthesis.untransposed(r))):
            key = min(_named_in_order(r.lhs, r.rhs), _named_in_order(r.rhs, r.lhs))
            if key in seen:
                continue
            seen.add(key)
            for source, target in ((r.lhs, r.rhs), (r.rhs, r.lhs)):
                if source[0] != "var" and _builds(source, target):
                    out.append((source, target, r))
    # a regrouping that costs more alone and a rule that then saves a contraction, as one
    # rule (``x @ W + (x @ A) @ B = x @ (W + A @ B)``), judged as a whole
    for r in graph_synthesis.two_steps(out):
        key = _named_in_order(canonical(r.lhs), r.rhs)
        if key not in seen and _builds(r.lhs, r.rhs):
            seen.add(key)
            out.append((r.lhs, r.rhs, r))
    return out


def _builds(source: tuple, target: tuple) -> bool:
    """Whether a match of ``source`` gives all that ``target`` is built from: its operands,
    ``scale``'s number, and no slice (a slice only at a source's root, where it is matched)."""
    ops, below = graph_synthesis.operators, list(source[1:]) if source[0] in SLICES else [source]
    return graph_synthesis.variables(target) <= graph_synthesis.variables(source) and \
        all(op not in ops(target) or op in ops(source) for op in ("scale", CONV)) and \
        not any(ops(t) & set(SLICES) for t in [target, *below])


def _named_in_order(*sides: tuple) -> str:
    """``sides`` as text with the operands renamed in the order they first appear."""
    names: dict[str, str] = {}

    def rename(t: tuple) -> tuple:
        if t[0] == "var":
            return ("var", names.setdefault(t[1], f"v{len(names)}"))
        return (t[0], *(rename(c) for c in t[1:]))
    return " = ".join(graph_synthesis.to_text(rename(t)) for t in sides)


def apply(graph: fx.Graph, fewer_products: bool = False, fused: bool = False) -> list[str]:
    """Apply each rule where it lowers the cost, once per node per round; a line each.
    ``fewer_products``: only where it lowers the multiply-adds; ``fused``: Inductor compiles
    the graph, fusing elementwise work into the kernel that makes its operands."""
    constant = _constants(graph)
    applied, used = [], set()
    for n in list(graph.nodes):
        if n in used or n.op != "call_function" or rank(n) < 0:
            continue
        rooted = sorted(d for root, ds in _by_root().items() if _children(n, *root) for d in ds)
        for _, (source, target, rule) in rooted:  # (most nodes are the root of none)
            match = _match_root(source, n, rule)
            match = match and resolve_pieces(source, n, rule, *match)
            if match is None:
                continue
            binding, inner, rest, view = match
            terms = [(t, (k,)) for k, t in enumerate(_chain(source))] \
                if source[0] == "add" else [(source, ())]
            bias = biases.carried(target, binding, terms, binding.get(SCALAR))
            after, before = nonnegative_pieces(binding, _cost(target, binding, constant, fused),
                                               _cost(source, binding, constant, fused, n))
            if bias is biases.REFUSED or inner & used or \
                    not _cheaper(after, before, products_only=fewer_products):
                continue
            with graph.inserting_before(n):
                new = _build(graph, target, binding, biases.build(graph, bias))
                if view is not None:
                    new = graph.call_function(aten.view.default, (new, view))
                for term in rest:
                    new = graph.call_function(aten.add.Tensor, (new, _item_node(graph, term)))
            n.replace_all_uses_with(new)
            used |= inner | {n}
            applied.append(f"generated: {graph_synthesis.to_text(source)} → "
                           f"{graph_synthesis.to_text(target)}")
            break
    return applied


# -- matching ------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def _by_root() -> dict[tuple[str, str], list]:
    """``(place in _directions, direction)`` by the (operator, kind) of sources' roots."""
    out: dict = {}
    for k, d in enumerate(_directions()):
        out.setdefault((d[0][0], conv_terms.kind(d[0])), []).append((k, d))
    return out


def _children(n, op: str, of: str = "matrix") -> list | None:
    """The operands of ``n`` when it is the rules' operator ``op`` on terms of kind ``of``
    (``conv_terms.kind``)."""
    if isinstance(n, tuple):  # an addmm's product, read as a term of its sum
        return list(n[1:]) if op == "mm" and n[0] == "mm" else None
    if not isinstance(n, fx.Node) or n.op != "call_function" or n.kwargs and op != "T":
        return None
    if of != "matrix" and op not in ARITHMETIC and op != "scale":  # (no slice: 2-d only)
        return conv_terms.children(n, op, of)
    if op == "mm" and n.target == aten.mm.default:
        return list(n.args)
    if op == "mm" and biases.bias(n) is not None:  # an addmm: its bias is carried (``biases``)
        return list(n.args[1:])
    if op in ARITHMETIC and n.target == ARITHMETIC[op] and \
            all(isinstance(a, fx.Node) for a in n.args):
        return list(n.args)
    if op == "scale" and _scaled(n) is not None:
        return [_scaled(n)[1]]
    if op in SLICES and n.target == aten.slice.Tensor and rank(n) == 2 and \
            split_point(n, op) is not None:
        return [n.args[0]]
    if op == "T" and rank(n) == 2 and (
            n.target == aten.t.default or
            n.target == aten.permute.default and list(n.args[1]) == [1, 0] or
            n.target == aten.transpose.int and sorted(d % 2 for d in n.args[1:]) == [0, 1]):
        return [n.args[0]]
    if op in ("cat0", "cat1") and n.target == aten.cat.default and rank(n) == 2 and \
            len(n.args[0]) == 2 and (n.args[1] if len(n.args) > 1 else 0) % 2 == int(op[-1]):
        return list(n.args[0])
    return None


def _match(pattern: tuple, item, binding: dict, inner: set, pieces: bool = False,
           path: tuple = ()) -> bool:
    """Whether ``item`` matches ``pattern``, extending ``binding`` and the matched nodes
    ``inner``; ``pieces``: under a slice, where a matrix matches ``cat(X, Z)``. The binding
    keeps the item each operator matched under ``(biases.AT, path)``, ``path`` being the
    operator's place in the source (the child indices from its root)."""
    if pattern[0] == "var":
        if not conv_terms.operand_fits(pattern[1], item):
            return False
        return binding.setdefault(pattern[1], item) is item
    children = _children(item, pattern[0], conv_terms.kind(pattern))
    if children is None:
        return pieces and match_pieces(pattern, item, binding)
    scalar = {SCALAR: _scaled(item)[0]} if pattern[0] == "scale" else \
        {CONV: conv_terms.settings(item), CONV_OUT: conv_terms.output_sizes(item)} \
        if pattern[0] == CONV else {}
    orders = [children, children[::-1]] if pattern[0] in ("add", "mul") else [children]
    for order in orders:
        b, i = dict(binding), set(inner)
        if all(b.setdefault(k, v) == v for k, v in scalar.items()) and \
                all(_match(p, c, b, i, pieces, path + (k,))
                    for k, (p, c) in enumerate(zip(pattern[1:], order))):
            b[biases.AT, path] = item
            binding.clear(), binding.update(b), inner.clear(), inner.update(i)
            if isinstance(item, fx.Node):
                inner.add(item)
            return True
    return False


def _match_root(source: tuple, n: fx.Node, rule) -> tuple[dict, set, list, list] | None:
    """(binding, matched nodes, the sum's other terms, the view the matched terms went
    through or None) where ``source`` matches at ``n``."""
    if source[0] != "add":
        binding, inner = {}, set()
        if _match(source, n, binding, inner, pieces=source[0] in SLICES) and \
                _checked(binding, inner - {n}, rule):
            return binding, inner - {n}, [], None
        return None
    wanted = _chain(source)
    terms, sums = _summands(n, root=True)
    for chosen in itertools.permutations(range(len(terms)), len(wanted)):
        picked = [_unviewed(terms[i]) for i in chosen]
        view = picked[0][1]
        if any(v != view for _, v in picked):  # (a view's sizes: ints, or size nodes)
            continue
        binding, inner = {}, set(sums)
        if all(_match(p, core, binding, inner, path=(k,))
               for k, (p, (core, _)) in enumerate(zip(wanted, picked))) \
                and _checked(binding, inner - {n}, rule):
            rest = [t for i, t in enumerate(terms) if i not in chosen]
            return binding, inner - {n}, rest, view
    return None


def _checked(binding, inner, rule) -> bool:
    shapes = {v: conv_terms.matrix_shape(v, b) if conv_terms.is_convolution_operand(v)
              else shape_of(b)
              for v, b in operands(binding, rule).items()}
    return graph_synthesis.consistent(rule, shapes, lambda s: s) and \
        conv_terms.agree(binding) and \
        not any(len(m.users) > 1 and not _is_view(m) for m in inner)


def _scaled(n) -> tuple[tuple, fx.Node] | None:
    """((aten op, number), matrix) where ``n`` multiplies or divides a tensor by one finite
    Python number."""
    if not isinstance(n, fx.Node) or n.op != "call_function" or n.target not in SCALES or \
            n.kwargs or len(n.args) != 2:
        return None
    orders = [n.args, n.args[::-1]] if n.target == aten.mul.Tensor else [n.args]
    for x, c in orders:
        if isinstance(x, fx.Node) and isinstance(c, (int, float)) and \
                not isinstance(c, bool) and math.isfinite(c):
            return (n.target, c), x
    return None


def _chain(t: tuple) -> list[tuple]:
    return _chain(t[1]) + _chain(t[2]) if t[0] == "add" else [t]


VIEWS = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)


def _summands(n: fx.Node, root: bool = False) -> tuple[list, set]:
    """The terms of the sum ``n`` (through adds that have no other user) and the nodes
    consumed in finding them. ``addmm(b, A, B)`` is the terms ``("mm", A, B)`` and ``b``; a
    view of a matrix (a linear map of a batch of sequences, flattened and viewed back) is
    ``("view", matrix, sizes)``, its addmm's bias a term of its own where the view keeps the
    last size (the bias broadcasts along it either way)."""
    if not (root or len(n.users) == 1):
        return [n], set()
    if _children(n, "add") is not None:
        terms, sums = [], {n}
        for a in n.args:
            t, s = _summands(a)
            terms, sums = terms + t, sums | s
        return terms, sums
    if n.op == "call_function" and n.target in VIEWS and rank(n.args[0]) == 2 and \
            len(n.args[0].users) == 1:
        inner, sizes = n.args[0], list(n.args[1])
        parts, consumed = _summands(inner, root=True)
        if len(parts) == 2 and isinstance(parts[0], tuple) and rank(parts[1]) == 1 and \
                sizes[-1] == inner.meta["val"].shape[-1]:
            return [("view", parts[0], sizes), parts[1]], consumed | {n}
        return [("view", inner, sizes)], {n}
    if n.op == "call_function" and n.target == aten.addmm.default and not n.kwargs:
        bias, a, b = n.args
        return [("mm", a, b), bias], {n}
    return [n], set()


def _unviewed(term) -> tuple[object, list | None]:
    """A sum's term without its view, and the view's sizes (None when it has none)."""
    return (term[1], term[2]) if isinstance(term, tuple) and term[0] == "view" else (term, None)


# -- building and costs --------------------------------------------------------------------------
def _build(graph: fx.Graph, t: tuple, binding: dict, bias: fx.Node | None = None) -> fx.Node:
    """The nodes of ``t``; ``bias``: the bias of its root, a contraction."""
    if t[0] == "var":
        b = binding[t[1]]
        return graph.call_function(aten.slice.Tensor, (b.node, b.dim, b.start, b.end)) \
            if isinstance(b, Piece) else b
    args = [_build(graph, c, binding) for c in t[1:]]
    if t[0] == "T":
        return graph.call_function(aten.permute.default, (args[0], [1, 0]))
    if t[0] == "scale":
        op, number = binding[SCALAR]
        return graph.call_function(op, (args[0], number))
    if t[0] == "mm":
        return graph.call_function(aten.mm.default, tuple(args)) if bias is None else \
            graph.call_function(aten.addmm.default, (bias, *args))
    if t[0] in ARITHMETIC:
        return graph.call_function(ARITHMETIC[t[0]], tuple(args))
    if conv_terms.kind(t) != "matrix":
        return conv_terms.build(graph, t[0], args, conv_terms.kind(t), binding, bias)
    cat = graph.call_function(aten.cat.default, (args, int(t[0][-1])))
    return tilings.simplified_cat(graph, cat, graph_rules.ON) or cat


def _item_node(graph: fx.Graph, item) -> fx.Node:
    """The node of a sum's term (``_summands``), made where it was read through an addmm."""
    if not isinstance(item, tuple):
        return item
    if item[0] == "view":
        return graph.call_function(aten.view.default, (_item_node(graph, item[1]), item[2]))
    return graph.call_function(aten.mm.default, item[1:])


def _cheaper(after: tuple, before: tuple, products_only: bool) -> bool:
    """Whether cost ``after`` is below ``before`` at every size: the first component that
    differs decides, and it must differ the same way at every size (``products_only``: the
    multiply-adds must be that component)."""
    for i, (a, b) in enumerate(zip(after, before)):
        gap = sympy.expand(b - a)
        if gap == 0:
            continue
        if products_only and i:
            return False
        if gap.is_number:
            return bool(gap > 0)
        try:  # a polynomial in the sizes: no negative coefficient
            terms = sympy.Poly(gap, *sorted(gap.free_symbols, key=str)).coeffs()
        except sympy.PolynomialError:  # a size like s0 // 2: not compared
            return False
        return all(c >= 0 for c in terms)
    return False


def _cost(t: tuple, binding: dict, constant: set, fused: bool = False,
          root: fx.Node | None = None) -> tuple:
    """(multiply-adds, kernels, elements written) of ``t``'s work on every call: numbers, or
    polynomials in the size symbols. ``fused``: elementwise work on operands made by
    elementwise ops costs nothing (Inductor computes it in the kernel that makes them: a
    scale moved off hard-swish's result saves no pass over memory). ``root``: the node ``t``
    matched (a slice's sizes)."""
    total = [0, 0, 0]

    def walk(t) -> tuple[tuple[int, int], bool]:  # (shape, reads only weights)
        if t[0] == "var":
            b = binding[t[1]]
            sizes = conv_terms.cost_shape(t[1], b) if conv_terms.is_convolution_operand(t[1]) \
                else shape_of(b)
            return sizes, (b.node if isinstance(b, Piece) else b) in constant
        parts = [walk(c) for c in t[1:]]
        shapes = [s for s, _ in parts]
        fixed = all(c for _, c in parts)
        if t[0] == "T":
            return shapes[0][::-1], fixed
        if t[0] in SLICES:  # a view, at a source's root
            return shape_of(root), fixed
        cut = [binding.get(c[1]) for c in t[1:] if c[0] == "var"]
        if t[0] in ("cat0", "cat1") and len(cut) == 2 and isinstance(cut[1], Piece) and \
                cut[1].first:  # the matrix its two pieces cut: no work
            return shape_of(cut[1].node), fixed
        if t[0] == "mm":
            out = (shapes[0][0], shapes[1][1])
        elif t[0] == CONV:  # (the filter's columns hold its kernel: in · kernel area)
            out = (shapes[0][0], conv_terms.output_positions(binding))
        elif t[0] in ARITHMETIC or t[0] == "scale":
            out = shapes[0]
        else:
            d = int(t[0][-1])
            out = tuple(a + b if i == d else a for i, (a, b) in enumerate(zip(*shapes)))
        if fused and _fused(t, binding, constant):
            return out, fixed
        if not fixed:
            total[0] += shapes[0][0] * shapes[0][1] * out[1] if t[0] in ("mm", CONV) else 0
            total[1] += 1
            total[2] += math.prod(out)
        return out, fixed

    walk(t)
    return tuple(total)


def _fused(t: tuple, binding: dict, constant: set) -> bool:
    """Whether ``t`` is elementwise work on operands (weights aside) that elementwise ops
    make: Inductor computes it in their kernel."""
    if t[0] not in ARITHMETIC and t[0] != "scale" or any(c[0] != "var" for c in t[1:]):
        return False
    made = [b.node if isinstance(b, Piece) else b for b in (binding[c[1]] for c in t[1:])]
    made = [m for m in made if m not in constant]
    return bool(made) and all(
        isinstance(m, fx.Node) and m.op == "call_function" and
        torch.Tag.pointwise in getattr(m.target, "tags", ()) for m in made)


def _constants(graph: fx.Graph) -> set[fx.Node]:
    """Nodes computed from weights alone (``mark_weights``) and attributes."""
    constant: set[fx.Node] = set()
    for n in graph.nodes:
        if n.op == "get_attr" or n.meta.get(WEIGHT) or n.op == "call_function" and \
                n.all_input_nodes and all(a in constant for a in n.all_input_nodes) and \
                torch.Tag.nondeterministic_seeded not in getattr(n.target, "tags", ()):
            constant.add(n)
    return constant



def _is_view(n: fx.Node) -> bool:
    return _children(n, "T") is not None
