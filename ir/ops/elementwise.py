"""Elementwise ops with torch broadcasting: ``out[i...] = f(x[i...], y[i...])``.

A size-1 dim of an operand that is stretched by broadcasting is read at index 0; a Python
scalar operand becomes a ``Const``. Each op returns one scope with no summation.
"""
from __future__ import annotations

from ir.nodes import BinOp, Binary, Const, Expr, Scope, UnOp, Unary

from ir.ops._util import (
    OpError, axis_names, broadcast_read, broadcast_shapes, dtype_of, is_operand, is_scalar,
    iters, operand, scope, syms,
)

__all__ = [
    "add", "sub", "mul", "div", "maximum", "minimum", "pow",
    "relu", "exp", "log", "tanh", "sigmoid", "sqrt", "rsqrt", "abs", "neg", "reciprocal",
    "erf", "gelu", "clamp",
]


def _binary(name: str, build, x, y, dtype: str | None = None) -> Scope:
    for v, what in ((x, "input"), (y, "other")):
        if not (is_operand(v) or is_scalar(v)):
            raise OpError(name, f"{what} must be an ir.Tensor, ir.Scope or a Python number, "
                                f"got {type(v).__name__}")
    if not (is_operand(x) or is_operand(y)):
        raise OpError(name, "at least one operand must be an ir.Tensor or ir.Scope, "
                            "got two Python numbers")
    shape = broadcast_shapes(name, *(v.shape for v in (x, y) if is_operand(v)))
    out = iters(axis_names(len(shape)), shape)
    s = syms(out)

    def term(v) -> Expr:
        return broadcast_read(v, s, shape) if is_operand(v) else Const(float(v))

    return scope(name, out, (), build(term(x), term(y)), dtype=dtype or dtype_of(x, y))


def _scaled(y: Expr, alpha) -> Expr:
    if not is_scalar(alpha):
        raise OpError("add", f"alpha must be a Python number, got {type(alpha).__name__}")
    return y if alpha == 1 else Const(float(alpha)) * y


def add(input, other, *, alpha=1):
    """``input + alpha * other`` (torch.add)."""
    return _binary("add", lambda a, b: a + _scaled(b, alpha), input, other)


def sub(input, other, *, alpha=1):
    """``input - alpha * other`` (torch.sub)."""
    return _binary("sub", lambda a, b: a - _scaled(b, alpha), input, other)


def mul(input, other):
    return _binary("mul", lambda a, b: a * b, input, other)


def div(input, other, *, rounding_mode=None):
    """True division (torch.div); ``rounding_mode`` other than None is not expressible."""
    if rounding_mode is not None:
        raise OpError("div", f"rounding_mode={rounding_mode!r} is not supported "
                             "(only true division, rounding_mode=None)")
    return _binary("div", lambda a, b: a / b, input, other)


def maximum(input, other):
    return _binary("maximum", lambda a, b: Binary(BinOp.MAX, a, b), input, other)


def minimum(input, other):
    return _binary("minimum", lambda a, b: Binary(BinOp.MIN, a, b), input, other)


def pow(input, exponent):  # noqa: A001 - mirrors torch.pow
    """torch.pow: ``input ** exponent``, either a tensor or a Python number (NaN for a
    negative base with a non-integer exponent, as in torch)."""
    return _binary("pow", lambda a, b: Binary(BinOp.POW, a, b), input, exponent)


def _unary(name: str, op: UnOp, x):
    x = operand(name, x)
    out = iters(axis_names(x.rank), x.shape)
    return scope(name, out, (), Unary(op, broadcast_read(x, syms(out), x.shape)),
                 dtype=x.dtype)


def relu(input): return _unary("relu", UnOp.RELU, input)
def exp(input): return _unary("exp", UnOp.EXP, input)
def log(input): return _unary("log", UnOp.LOG, input)
def tanh(input): return _unary("tanh", UnOp.TANH, input)
def sigmoid(input): return _unary("sigmoid", UnOp.SIGMOID, input)
def sqrt(input): return _unary("sqrt", UnOp.SQRT, input)
def rsqrt(input):
    """torch.rsqrt: ``1 / sqrt(x)`` (inf at 0, NaN below)."""
    x = operand("rsqrt", input)
    out = iters(axis_names(x.rank), x.shape)
    body = Unary(UnOp.RECIP, Unary(UnOp.SQRT, broadcast_read(x, syms(out), x.shape)))
    return scope("rsqrt", out, (), body, dtype=x.dtype)


def abs(input): return _unary("abs", UnOp.ABS, input)  # noqa: A001 - mirrors torch.abs
def erf(input): return _unary("erf", UnOp.ERF, input)
def neg(input): return _unary("neg", UnOp.NEG, input)
def reciprocal(input): return _unary("reciprocal", UnOp.RECIP, input)


_SQRT1_2 = 0.7071067811865476      # 1 / sqrt(2)
_GELU_BETA = 0.7978845608028654    # sqrt(2 / pi)
_GELU_KAPPA = 0.044715


def gelu(input, approximate: str = "none"):
    """torch.nn.functional.gelu: ``x/2 * (1 + erf(x/sqrt 2))``, or with ``approximate="tanh"``
    ``x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))``, as torch computes them."""
    x = operand("gelu", input)
    if approximate not in ("none", "tanh"):
        raise OpError("gelu", f"approximate must be 'none' or 'tanh', got {approximate!r}")
    out = iters(axis_names(x.rank), x.shape)
    v = broadcast_read(x, syms(out), x.shape)
    if approximate == "none":
        inner = Unary(UnOp.ERF, v * Const(_SQRT1_2))
    else:
        cube = Binary(BinOp.POW, v, Const(3.0))
        inner = Unary(UnOp.TANH, Const(_GELU_BETA) * (v + Const(_GELU_KAPPA) * cube))
    return scope("gelu", out, (), v * Const(0.5) * (Const(1.0) + inner), dtype=x.dtype)


def clamp(input, min=None, max=None):  # noqa: A002 - mirrors torch.clamp
    """torch.clamp: ``min(max(x, min), max)``; ``min``/``max`` are numbers or tensors (that
    broadcast). NaN in ``x`` (or in a bound) stays NaN, and where ``min > max`` the result is
    ``max``, as in torch."""
    x = operand("clamp", input)
    if min is None and max is None:
        raise OpError("clamp", "at least one of 'min' or 'max' must not be None")
    for v, what in ((min, "min"), (max, "max")):
        if v is not None and not (is_operand(v) or is_scalar(v)):
            raise OpError("clamp", f"{what} must be an ir.Tensor, ir.Scope or a Python number, "
                                   f"got {type(v).__name__}")
    shape = broadcast_shapes("clamp", *(v.shape for v in (x, min, max) if is_operand(v)))
    out = iters(axis_names(len(shape)), shape)
    s = syms(out)

    def term(v) -> Expr:
        return broadcast_read(v, s, shape) if is_operand(v) else Const(float(v))

    body = term(x)
    if min is not None:
        body = Binary(BinOp.MAX, body, term(min))
    if max is not None:
        body = Binary(BinOp.MIN, body, term(max))
    return scope("clamp", out, (), body, dtype=x.dtype)
