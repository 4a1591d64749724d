"""Ops that read a sub-lattice of their input: ``select``, ``diagonal``, ``diag``, ``trace``.

Each is an affine read: ``diagonal`` reads ``x[.., i + a, .., i + b, ..]`` with one iterator
for both dims, so derivations see the diagonal of a product as a product read along one
iterator (and can drop the off-diagonal work). ``diag`` of a vector writes it on a diagonal
of a square matrix with the IR's own padding rule: the vector, seen as a column, is read at
``x[i, j - i - k]``, in bounds (non-zero) only where ``j = i + k``.
"""
from __future__ import annotations

from ir.nodes import Reduce, Scope

from ir.ops._util import (
    OpError, axis_names, check_rank, iters, normalize_dim, operand, read, scope, syms,
)
from ir.ops.shape import unsqueeze

__all__ = ["select", "diagonal", "diag", "trace"]


def _int(op: str, name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise OpError(op, f"{name} must be an int, got {type(value).__name__}")
    return value


def select(input, dim: int, index: int):
    """torch.select: ``x[.., index, ..]`` along ``dim``, that dim removed (``index`` < 0
    counts from the end)."""
    x = operand("select", input)
    if x.rank == 0:
        raise OpError("select", "cannot select on a 0-D tensor")
    d = normalize_dim("select", dim, x.rank)
    n, index = x.shape[d], _int("select", "index", index)
    if not -n <= index < n:
        raise OpError("select", f"index {index} out of range for dim {d} of size {n}")
    out = iters(axis_names(x.rank - 1), x.shape[:d] + x.shape[d + 1:])
    s = syms(out)
    return scope("select", out, (), read(x, *(s[:d] + [index % n] + s[d:])), dtype=x.dtype)


def diagonal(input, offset: int = 0, dim1: int = 0, dim2: int = 1):
    """torch.diagonal: the other dims first, then the diagonal of dims ``dim1``/``dim2``
    (``offset`` > 0 above the main diagonal, < 0 below)."""
    x = operand("diagonal", input)
    if x.rank < 2:
        raise OpError("diagonal", f"expected a tensor of at least 2 dims, got {x.rank}-D")
    a, b = normalize_dim("diagonal", dim1, x.rank), normalize_dim("diagonal", dim2, x.rank)
    if a == b:
        raise OpError("diagonal", f"dim1 and dim2 must differ, both are {a}")
    return _diagonal("diagonal", x, _int("diagonal", "offset", offset), a, b)


def _diagonal(op: str, x, k: int, a: int, b: int) -> Scope:
    size = max(0, min(x.shape[a] - max(-k, 0), x.shape[b] - max(k, 0)))
    rest = [d for d in range(x.rank) if d not in (a, b)]
    names = axis_names(len(rest) + 1)
    out = iters(names, [x.shape[d] for d in rest] + [size])
    s = syms(out)
    idx = [None] * x.rank
    for d, v in zip(rest, s):
        idx[d] = v
    idx[a], idx[b] = s[-1] + max(-k, 0), s[-1] + max(k, 0)
    return scope(op, out, (), read(x, *idx), dtype=x.dtype)


def diag(input, diagonal: int = 0):
    """torch.diag: a 1-D input on the ``diagonal``-th diagonal of a square matrix (zeros
    elsewhere), or the ``diagonal``-th diagonal of a 2-D input."""
    x = operand("diag", input)
    check_rank("diag", x, [1, 2])
    k = _int("diag", "diagonal", diagonal)
    if x.rank == 2:
        return _diagonal("diag", x, k, 0, 1)
    n = x.shape[0] + abs(k)
    out = iters("ij", (n, n))
    i, j = syms(out)
    column = unsqueeze(x, 1)  # column[p, 0] = x[p]; column[p, q != 0] reads 0
    at = read(column, i, j - i - k) if k >= 0 else read(column, j, i - j + k)
    return scope("diag", out, (), at, dtype=x.dtype)


def trace(input):
    """torch.trace: the sum of the main diagonal of a 2-D input."""
    x = operand("trace", input)
    check_rank("trace", x, [2])
    (i,) = iters(["i"], [min(x.shape)])
    return scope("trace", (), (i,), read(x, i.symbol, i.symbol), Reduce.SUM, dtype=x.dtype)
