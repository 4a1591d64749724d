"""The operator library: torch-like ops that build ``ir`` scopes.

Each function mirrors its torch namesake's signature, takes ``ir.Tensor`` / ``ir.Scope``
operands (Python numbers where torch allows them) and returns an ``ir.Scope`` named after the
op, whose traversal ranges are ``0:n`` so its shape equals torch's result shape. An op's
result can be another op's operand, which nests the expressions::

    from ir import Tensor
    from ir import ops
    x, w = Tensor("x", (1, 3, 8, 8)), Tensor("w", (4, 3, 3, 3))
    y = ops.softmax(ops.relu(ops.conv2d(x, w, padding="same")), dim=1)

Bad arguments raise :class:`OpError` (a ``ValueError``) naming the op and the problem.
"""
from ir.ops._util import OpError
from ir.ops.banded import g2bmm, gbmm
from ir.ops.comparison import eq, ge, gt, le, lt, ne, where
from ir.ops.conv import conv1d, conv2d, conv_transpose1d, conv_transpose2d
from ir.ops.creation import full
from ir.ops.einsum import einsum
from ir.ops.elementwise import (
    abs, add, clamp, div, erf, exp, gelu, log, maximum, minimum, mul, neg, pow, reciprocal, relu,
    rsqrt, sigmoid, sqrt, sub, tanh,
)
from ir.ops.indexing import diag, diagonal, select, trace
from ir.ops.linear_algebra import bmm, dot, linear, matmul, mm, mv
from ir.ops.pooling import avg_pool2d
from ir.ops.reduction import amax, amin, cumsum, log_softmax, mean, softmax, sum, var
from ir.ops.shape import (
    as_strided, cat, contiguous, expand, flatten, getitem, pad, permute, reshape, slice, squeeze,
    stack, transpose, unfold, unsqueeze, view,
)

__all__ = [
    "OpError",
    # linear algebra
    "matmul", "mm", "bmm", "mv", "dot", "linear", "einsum",
    # convolution and banded products
    "conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d", "g2bmm", "gbmm",
    # elementwise
    "add", "sub", "mul", "div", "maximum", "minimum", "pow", "clamp",
    "relu", "exp", "log", "tanh", "sigmoid", "sqrt", "rsqrt", "abs", "neg", "reciprocal",
    "erf", "gelu",
    # comparisons and selection
    "lt", "le", "gt", "ge", "eq", "ne", "where",
    # reductions
    "sum", "mean", "var", "amax", "amin", "cumsum", "softmax", "log_softmax", "avg_pool2d",
    # shape
    "transpose", "permute", "reshape", "view", "flatten", "squeeze", "unsqueeze", "slice",
    "unfold", "pad", "cat", "stack", "expand", "contiguous", "as_strided", "getitem",
    # indexing and creation
    "select", "diagonal", "diag", "trace", "full",
]
