"""The Longformer banded matmuls (EinNet's G2BMM and GBMM), with width ``w`` and dilation ``d``.

``g2bmm(q, k, w, d)``: each row ``i`` of ``q`` is dotted with the ``2w+1`` rows of ``k``
around it, ``d`` apart::

    out[b, i, j] = sum[c] q[b, i, c] * k[b, i + d*(j - w), c]        j in 0:2w+1

``gbmm(a, v, w, d)``: the banded weights combine those rows of ``v``::

    out[b, i, c] = sum[j] a[b, i, j] * v[b, i + d*(j - w), c]

Rows of ``k`` / ``v`` before 0 or past the end are out of bounds and read 0.
"""
from __future__ import annotations

from ir.nodes import Scope

from ir.ops._util import OpError, check_rank, dtype_of, fmt_shape, iters, operand, read, scope

__all__ = ["g2bmm", "gbmm"]


def _band(op: str, w, d) -> None:
    for name, v, least in (("w", w, 0), ("d", d, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < least:
            raise OpError(op, f"{name} must be an int >= {least}, got {v!r}")


def _batch(op: str, a, b, a_name: str, b_name: str) -> None:
    if a.shape[0] != b.shape[0]:
        raise OpError(op, f"batch sizes differ: {a_name} {fmt_shape(a.shape)} has "
                          f"{a.shape[0]}, {b_name} {fmt_shape(b.shape)} has {b.shape[0]}")


def g2bmm(q, k, w: int, d: int = 1) -> Scope:
    """out (B, M, 2w+1) from q (B, M, C) and k (B, N, C)."""
    q, k = operand("g2bmm", q, "q"), operand("g2bmm", k, "k")
    check_rank("g2bmm", q, [3], "q"), check_rank("g2bmm", k, [3], "k")
    _band("g2bmm", w, d)
    _batch("g2bmm", q, k, "q", "k")
    if q.shape[2] != k.shape[2]:
        raise OpError("g2bmm", f"feature sizes differ: dim 2 of q {fmt_shape(q.shape)} "
                               f"({q.shape[2]}) != dim 2 of k {fmt_shape(k.shape)} "
                               f"({k.shape[2]})")
    bb, i, j = iters(["b", "i", "j"], [q.shape[0], q.shape[1], 2 * w + 1])
    (c,) = iters(["c"], [q.shape[2]])
    b_, i_, j_, c_ = bb.symbol, i.symbol, j.symbol, c.symbol
    body = read(q, b_, i_, c_) * read(k, b_, i_ + d * (j_ - w), c_)
    return scope("g2bmm", (bb, i, j), (c,), body, dtype=dtype_of(q, k))


def gbmm(a, v, w: int, d: int = 1) -> Scope:
    """out (B, M, C) from a (B, M, 2w+1) and v (B, N, C)."""
    a, v = operand("gbmm", a, "a"), operand("gbmm", v, "v")
    check_rank("gbmm", a, [3], "a"), check_rank("gbmm", v, [3], "v")
    _band("gbmm", w, d)
    _batch("gbmm", a, v, "a", "v")
    if a.shape[2] != 2 * w + 1:
        raise OpError("gbmm", f"dim 2 of a {fmt_shape(a.shape)} must be the band size "
                              f"2*w+1 = {2 * w + 1}, got {a.shape[2]}")
    bb, i, c = iters(["b", "i", "c"], [a.shape[0], a.shape[1], v.shape[2]])
    (j,) = iters(["j"], [2 * w + 1])
    b_, i_, j_, c_ = bb.symbol, i.symbol, j.symbol, c.symbol
    body = read(a, b_, i_, j_) * read(v, b_, i_ + d * (j_ - w), c_)
    return scope("gbmm", (bb, i, c), (j,), body, dtype=dtype_of(a, v))
