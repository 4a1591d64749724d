"""Shared helpers of the operator library: argument checks, iterator naming, reads.

Every op reads its operands through :func:`read`, which takes *logical* indices (0-based, as
in torch) and shifts them by the operand's lower bounds, so a ``Scope`` whose traversal does
not start at 0 is read correctly. Reads outside an operand's bounds are 0 (the IR's rule);
ops use that for padding instead of guards.
"""
from __future__ import annotations

import math
from typing import Iterable, Sequence, Union

import sympy

from ir.errors import IRError
from ir.nodes import Access, Const, Expr, Iter, Reduce, Scope, Tensor

Operand = Union[Tensor, Scope]
Scalar = Union[int, float]


class OpError(IRError):
    """A bad argument to an operator-library function (an ``IRError``, so a ``ValueError``).
    The message starts with the op name: ``conv2d: groups must be a positive int, got 0``."""

    def __init__(self, op: str, message: str):
        super().__init__(f"{op}: {message}")
        self.op = op


def is_operand(x) -> bool:
    return isinstance(x, (Tensor, Scope))


def is_scalar(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def operand(op: str, x, what: str = "input") -> Operand:
    """``x`` if it is a tensor-like source (``ir.Tensor`` or ``ir.Scope``), else an OpError."""
    if is_operand(x):
        return x
    raise OpError(op, f"{what} must be an ir.Tensor or ir.Scope, got {type(x).__name__}")


def check_rank(op: str, x: Operand, ranks: Iterable[int], what: str = "input") -> None:
    ranks = tuple(ranks)
    if x.rank not in ranks:
        want = " or ".join(f"{r}-D" for r in ranks)
        raise OpError(op, f"expected {what} to be {want}, got {x.rank}-D {what} of shape "
                          f"{fmt_shape(x.shape)}")


def fmt_shape(shape: Sequence[int]) -> str:
    return str(tuple(int(n) for n in shape))


def read(x: Operand, *indices) -> Access:
    """``x`` at logical (0-based) ``indices``: shifted by ``x``'s lower bounds."""
    bounds = x.bounds()
    assert len(indices) == len(bounds), f"{len(indices)} indices for rank-{len(bounds)} {x!r}"
    return Access(x, tuple(sympy.sympify(i) + lo for i, (lo, _) in zip(indices, bounds)))


def scalar_or_read(x, *indices) -> Expr:
    return Const(float(x)) if is_scalar(x) else read(x, *indices)


_LETTERS = "ijklmnpq"


def axis_names(rank: int, letters: str = _LETTERS, prefix: str = "i") -> list[str]:
    """Readable traversal names: ``i, j, k, ...`` for small ranks, ``i0, i1, ...`` beyond."""
    if rank <= len(letters):
        return list(letters[:rank])
    return [f"{prefix}{d}" for d in range(rank)]


def iters(names: Sequence[str], extents: Sequence[int]) -> tuple[Iter, ...]:
    """Iterators ``name in 0:extent``."""
    assert len(set(names)) == len(names), f"duplicate iterator names {names}"
    return tuple(Iter(n, 0, int(e)) for n, e in zip(names, extents))


def syms(its: Sequence[Iter]) -> list[sympy.Symbol]:
    return [it.symbol for it in its]


def dtype_of(*xs) -> str:
    for x in xs:
        if is_operand(x):
            return x.dtype
    return "float32"


def scope(name: str, traversal, summation, body: Expr, reduce: Reduce = Reduce.SUM,
          dtype: str = "float32") -> Scope:
    return Scope(tuple(traversal), tuple(summation), body, reduce, name=name, dtype=dtype)


def normalize_dim(op: str, dim: int, rank: int) -> int:
    """torch's dim wrapping: ``dim`` in ``[-rank, rank)``; a 0-D tensor accepts -1 and 0."""
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise OpError(op, f"dim must be an int, got {type(dim).__name__}")
    n = max(rank, 1)
    if not -n <= dim < n:
        raise OpError(op, f"dim out of range (expected to be in range of [{-n}, {n - 1}], "
                          f"but got {dim})")
    return dim % n if rank else 0


def normalize_dims(op: str, dims, rank: int) -> tuple[int, ...]:
    """A sorted tuple of distinct wrapped dims from an int or a sequence of ints."""
    if isinstance(dims, int):
        dims = (dims,)
    out = [normalize_dim(op, d, rank) for d in dims]
    if len(set(out)) != len(out):
        raise OpError(op, f"dim {tuple(dims)} names a dimension more than once")
    return tuple(sorted(d for d in set(out) if d < rank))


def tuple_arg(op: str, name: str, value, n: int, minimum: int | None = None) -> tuple[int, ...]:
    """An int or a length-``n`` sequence of ints, each at least ``minimum``."""
    vals = (value,) * n if isinstance(value, int) else tuple(value)
    if len(vals) != n or not all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
        raise OpError(op, f"{name} must be an int or a tuple of {n} ints, got {value!r}")
    if minimum is not None and any(v < minimum for v in vals):
        raise OpError(op, f"{name} must be >= {minimum}, got {value!r}")
    return vals


def numel(shape: Sequence[int]) -> int:
    return math.prod(shape)


def broadcast_shapes(op: str, *shapes: Sequence[int]) -> tuple[int, ...]:
    """numpy/torch broadcasting of shapes (right-aligned; a size-1 dim stretches)."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for d in range(rank):
        sizes = [s[len(s) - rank + d] for s in shapes if len(s) - rank + d >= 0]
        big = {n for n in sizes if n != 1}
        if len(big) > 1:
            listed = " and ".join(fmt_shape(s) for s in shapes)
            raise OpError(op, f"shapes {listed} are not broadcastable: dim {d - rank} has "
                              f"sizes {', '.join(str(n) for n in sizes)}")
        out.append(big.pop() if big else 1)
    return tuple(out)


def broadcast_read(x: Operand, out_syms: Sequence[sympy.Expr],
                   out_shape: Sequence[int]) -> Access:
    """``x`` read at broadcast position ``out_syms`` (right-aligned); stretched dims read 0."""
    offset = len(out_shape) - x.rank
    idx = [0 if n == 1 and out_shape[offset + d] != 1 else out_syms[offset + d]
           for d, n in enumerate(x.shape)]
    return read(x, *idx)
