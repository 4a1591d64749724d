"""Comparisons and ``where``, NaN-correct.

A comparison is a binary operator whose value is 1.0 where it holds and 0.0 elsewhere (the
scope's dtype says ``bool``); as in torch it is false when an operand is NaN, except ``ne``.
``where(c, a, b)`` is ``mask(c, a) + mask(c == 0, b)``: ``mask(c, x)`` is ``x`` where ``c``
holds and exactly 0 elsewhere, so the branch not taken contributes 0 even when it is NaN or
inf (``c * a + (1 - c) * b`` would not: ``0 * NaN`` is NaN). The sum is exact (one term is
0); only the sign of a zero taken from a branch is lost (``-0.0 + 0.0 = 0.0``).
"""
from __future__ import annotations

from ir.nodes import BinOp, Binary, Const, Expr

from ir.ops._util import (
    OpError, axis_names, broadcast_read, broadcast_shapes, dtype_of, is_operand, is_scalar,
    iters, scope, syms,
)
from ir.ops.elementwise import _binary

__all__ = ["lt", "le", "gt", "ge", "eq", "ne", "where"]


def _compare(name: str, op: BinOp, input, other):
    return _binary(name, lambda a, b: Binary(op, a, b), input, other, dtype="bool")


def lt(input, other): return _compare("lt", BinOp.LT, input, other)
def le(input, other): return _compare("le", BinOp.LE, input, other)
def gt(input, other): return _compare("gt", BinOp.GT, input, other)
def ge(input, other): return _compare("ge", BinOp.GE, input, other)
def eq(input, other): return _compare("eq", BinOp.EQ, input, other)
def ne(input, other): return _compare("ne", BinOp.NE, input, other)


def select_expr(c: Expr, a: Expr, b: Expr) -> Expr:
    """The body of ``where``: ``a`` where ``c`` holds, else ``b`` (a 0 branch is dropped)."""
    taken = Binary(BinOp.MASK, c, a)
    if b == Const(0.0):
        return taken
    other = Binary(BinOp.MASK, Binary(BinOp.EQ, c, Const(0.0)), b)
    return other if a == Const(0.0) else taken + other


def where(condition, input, other):
    """torch.where(condition, input, other): ``input`` where ``condition`` holds (is
    non-zero), else ``other``; ``input``/``other`` are tensors or Python numbers; all three
    broadcast."""
    if not is_operand(condition):
        raise OpError("where", f"condition must be an ir.Tensor or ir.Scope, got "
                               f"{type(condition).__name__}")
    for v, what in ((input, "input"), (other, "other")):
        if not (is_operand(v) or is_scalar(v)):
            raise OpError("where", f"{what} must be an ir.Tensor, ir.Scope or a Python number, "
                                   f"got {type(v).__name__}")
    shape = broadcast_shapes("where", *(v.shape for v in (condition, input, other)
                                        if is_operand(v)))
    out = iters(axis_names(len(shape)), shape)
    s = syms(out)

    def term(v) -> Expr:
        return broadcast_read(v, s, shape) if is_operand(v) else Const(float(v))

    body = select_expr(term(condition), term(input), term(other))
    return scope("pick", out, (), body, dtype=dtype_of(input, other))  # "where" is a keyword
