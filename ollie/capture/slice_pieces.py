"""Slices in the generated graph rules (``ollie.capture.generated_rules``): under a slice of a
matrix from its start or to its end (``head``/``tail``), a matrix matches a concatenation
``cat(X, Z)`` as its two pieces at the slice's point, so that ``head0(mm(cat0(X, Z), U)) =
mm(X, U)`` reads ``(x @ W)[:r] = x[:r] @ W``. The point is known once the whole pattern has
matched: the rule's size symbols say which operand has the slice's first piece."""
from __future__ import annotations

from dataclasses import dataclass, replace

import sympy
import torch
import torch.fx as fx

from derivations.synthesis import graph as graph_synthesis
from derivations.synthesis.graph_terms import shape as term_shape

END = 2 ** 63 - 1  # aten.slice's end for "to the end"
PAST_ANY_SIZE = 2 ** 62  # an end at least this large reads "to the end" too


@dataclass(frozen=True)
class Piece:
    """Rows (``dim`` 0) or columns (1) ``[start, end)`` of ``node`` (aten.slice's arguments;
    ``length`` its size, an integer or an expression), bound to an operand of a
    concatenation that ``node`` matched under a slice. The point is known once the whole
    pattern has matched (``resolve_pieces``): ``first`` names the first piece's operand."""
    node: fx.Node
    dim: int
    first: str | None = None   # None: this is the first piece
    start: object = None
    end: object = None
    length: object = None


def match_pieces(pattern: tuple, item, binding: dict) -> bool:
    """Bind the operands of ``pattern``, a concatenation of two operands, to the pieces of
    the matrix ``item`` (their point not yet known)."""
    val = item.meta.get("val") if isinstance(item, fx.Node) else None
    if pattern[0] not in ("cat0", "cat1") or getattr(val, "ndim", 0) != 2 or \
            any(c[0] != "var" for c in pattern[1:]):
        return False
    d, (a, b) = int(pattern[0][-1]), (c[1] for c in pattern[1:])
    return binding.setdefault(a, Piece(item, d)) == Piece(item, d) and \
        binding.setdefault(b, Piece(item, d, a)) == Piece(item, d, a)


def split_point(n: fx.Node, op: str) -> tuple | None:
    """(size of the first piece, aten.slice's argument for it) where slice ``n`` cuts its
    matrix along ``op``'s dim: the end of a slice from the start (``head``), the start of one
    to the end (``tail``; a negative start counts from the end, at symbolic sizes too).
    None if it is not one, has a step or a point that is not an integer."""
    x, dim, start, end, step = (list(n.args) + [0, None, None, 1][len(n.args) - 1:])[:5]
    size = shape_of(x)[dim % 2]
    if dim % 2 != int(op[-1]) or step != 1:
        return None
    if op.startswith("head"):
        if start not in (None, 0) or not isinstance(end, int) or end <= 0 or \
                isinstance(size, int) and end >= size:
            return None
        return end, end
    if end is not None and not (isinstance(end, int) and end >= PAST_ANY_SIZE) or \
            not isinstance(start, int) or start == 0:
        return None
    first = size + start if start < 0 else start
    return None if isinstance(first, int) and first <= 0 else (first, start)


def resolve_pieces(source: tuple, n: fx.Node, rule, binding: dict, inner: set, rest: list,
                   view) -> tuple | None:
    """The match with its pieces cut at the root slice's point: the first piece's operand
    has the size of the slice's first piece (the rule's size symbols tell which)."""
    pieces = {v: p for v, p in binding.items() if isinstance(p, Piece)}
    if not pieces:
        return binding, inner, rest, view
    sizes: dict = {}
    for v, b in operands(binding, rule).items():
        for symbol, size in zip(rule.dims[v], shape_of(b)):
            sizes.setdefault(symbol, size)
    first = term_shape(source[1], rule.dims)[int(source[0][-1])][0]
    point, arg = split_point(n, source[0])
    if sizes.setdefault(first, point) != point:
        return None
    out = dict(binding)
    for v, p in pieces.items():
        size = sizes.get(rule.dims[p.first or v][p.dim])
        at = arg if size == point else size  # (a size from elsewhere: an integer, or none)
        if size is None or not isinstance(at, int):
            return None
        whole = shape_of(p.node)[p.dim]
        out[v] = replace(p, start=0, end=at, length=size) if p.first is None else \
            replace(p, start=at, end=END, length=whole - size)
    if not graph_synthesis.consistent(rule, operands(out, rule), shape_of):
        return None
    return out, inner, rest, view


def nonnegative_pieces(binding: dict, *costs: tuple) -> list[tuple]:
    """``costs`` with every symbolic piece's size a symbol of its own, at least 0: a cut
    ``s0 - 4`` reads ``q`` with ``s0 = q + 4``. (Where a slice's point lies past the end, the
    slice clamps and the rewrite costs what the original does.)"""
    out = [tuple(sympy.sympify(c) for c in cost) for cost in costs]
    for i, p in enumerate(b for b in binding.values() if isinstance(b, Piece)):
        if isinstance(p.length, int) or p.length is None:
            continue
        length = sympy.sympify(p.length)
        x = next((x for x in sorted(length.free_symbols, key=str)
                  if sympy.diff(length, x) == 1), None)
        if x is not None:
            q = sympy.Symbol(f"piece{i}", nonnegative=True, integer=True)
            whole = sympy.solve(sympy.Eq(length, q), x)[0]
            out = [tuple(c.subs(x, whole) for c in cost) for cost in out]
    return out


def operands(binding: dict, rule) -> dict:
    """The binding's matrices: its operands (not ``scale``'s number), but pieces whose point
    is not yet known."""
    return {v: b for v, b in binding.items()
            if v in rule.dims and not (isinstance(b, Piece) and b.end is None)}


def rank(n) -> int:
    """The node's number of dims; -1 for what is not a tensor node."""
    val = n.meta.get("val") if isinstance(n, fx.Node) else None
    return val.dim() if isinstance(val, torch.Tensor) else -1


def shape_of(node) -> tuple:
    """The node's (or piece's) sizes: integers, or the expressions of symbolic sizes
    (compared as such, a SymInt comparison would add a guard)."""
    if isinstance(node, Piece):
        whole = list(shape_of(node.node))
        whole[node.dim] = node.length
        return tuple(whole)
    return tuple(d if isinstance(d, int) else d.node.expr for d in node.meta["val"].shape)
