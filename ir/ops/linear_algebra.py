"""Contractions: matmul (torch.matmul semantics), mm, bmm, mv, dot, linear.

``matmul(A, B)`` over batched operands is ``C[b.., i, j] = sum[k] A[b.., i, k] * B[b.., k, j]``
with batch dims broadcast (a stretched size-1 dim reads index 0). A 1-D operand gets a
dimension prepended (left) or appended (right) that is then dropped from the output, as in
torch. ``linear`` with a bias is an outer scope adding ``bias[o]`` to the contraction.
"""
from __future__ import annotations

from ir.nodes import Scope

from ir.ops._util import (
    OpError, broadcast_shapes, check_rank, dtype_of, fmt_shape, iters, operand, read, scope,
    syms,
)

__all__ = ["matmul", "mm", "bmm", "mv", "dot", "linear"]


def _batch_names(n: int) -> list[str]:
    return ["b"] if n == 1 else [f"b{d}" for d in range(n)]


def matmul(input, other) -> Scope:
    """torch.matmul: dot (1-D·1-D), mv, mm, and broadcast batched matmul."""
    a, b = operand("matmul", input), operand("matmul", other, "other")
    if a.rank == 0 or b.rank == 0:
        raise OpError("matmul", f"both arguments need at least 1 dimension, got "
                                f"{a.rank}-D and {b.rank}-D")
    m = a.shape[-2] if a.rank >= 2 else None  # None: that side is a vector
    n = b.shape[-1] if b.rank >= 2 else None
    k_a = a.shape[-1]
    k_b = b.shape[-2] if b.rank >= 2 else b.shape[0]
    if k_a != k_b:
        raise OpError("matmul", f"size mismatch, input {fmt_shape(a.shape)} and other "
                                f"{fmt_shape(b.shape)}: the last dim of input ({k_a}) must "
                                f"equal the {'first' if b.rank == 1 else 'second-to-last'} dim "
                                f"of other ({k_b})")
    batch_a, batch_b = a.shape[:-2], b.shape[:-2]
    batch = broadcast_shapes("matmul", batch_a, batch_b)
    bnames = _batch_names(len(batch))
    names = bnames + (["i"] if m is not None else []) + (["j"] if n is not None else [])
    extents = list(batch) + ([m] if m is not None else []) + ([n] if n is not None else [])
    out = iters(names, extents)
    (k,) = iters(["k"], [k_a])
    by = {it.name: it.symbol for it in out}
    bsyms = [by[nm] for nm in bnames]

    def batch_index(shape_b):
        off = len(batch) - len(shape_b)
        return [0 if sz == 1 and batch[off + d] != 1 else bsyms[off + d]
                for d, sz in enumerate(shape_b)]

    a_idx = batch_index(batch_a) + ([by["i"]] if m is not None else []) + [k.symbol]
    b_idx = batch_index(batch_b) + [k.symbol] + ([by["j"]] if n is not None else [])
    return scope("matmul", out, (k,), read(a, *a_idx) * read(b, *b_idx), dtype=dtype_of(a, b))


def _renamed(name: str, s: Scope) -> Scope:
    return scope(name, s.traversal, s.summation, s.body, s.reduce, dtype=s.dtype)


def mm(input, mat2) -> Scope:
    a, b = operand("mm", input), operand("mm", mat2, "mat2")
    check_rank("mm", a, [2]), check_rank("mm", b, [2], "mat2")
    if a.shape[1] != b.shape[0]:
        raise OpError("mm", f"mat1 and mat2 shapes cannot be multiplied "
                            f"({a.shape[0]}x{a.shape[1]} and {b.shape[0]}x{b.shape[1]})")
    return _renamed("mm", matmul(a, b))


def mv(input, vec) -> Scope:
    a, v = operand("mv", input), operand("mv", vec, "vec")
    check_rank("mv", a, [2]), check_rank("mv", v, [1], "vec")
    if a.shape[1] != v.shape[0]:
        raise OpError("mv", f"size mismatch, input {fmt_shape(a.shape)}, vec "
                            f"{fmt_shape(v.shape)}: dim 1 of input must equal dim 0 of vec")
    return _renamed("mv", matmul(a, v))


def dot(input, other) -> Scope:
    a, b = operand("dot", input), operand("dot", other, "other")
    check_rank("dot", a, [1]), check_rank("dot", b, [1], "other")
    if a.shape != b.shape:
        raise OpError("dot", f"inconsistent tensor size, input has {a.shape[0]} elements "
                             f"and other has {b.shape[0]}")
    return _renamed("dot", matmul(a, b))


def bmm(input, mat2) -> Scope:
    """torch.bmm: ``C[b, i, j] = sum[k] A[b, i, k] * B[b, k, j]`` (no broadcasting)."""
    a, b = operand("bmm", input), operand("bmm", mat2, "mat2")
    check_rank("bmm", a, [3]), check_rank("bmm", b, [3], "mat2")
    if a.shape[0] != b.shape[0]:
        raise OpError("bmm", f"batch sizes differ: input {fmt_shape(a.shape)} has batch "
                             f"{a.shape[0]}, mat2 {fmt_shape(b.shape)} has batch {b.shape[0]}")
    if a.shape[2] != b.shape[1]:
        raise OpError("bmm", f"size mismatch: dim 2 of input {fmt_shape(a.shape)} "
                             f"({a.shape[2]}) != dim 1 of mat2 {fmt_shape(b.shape)} "
                             f"({b.shape[1]})")
    return _renamed("bmm", matmul(a, b))


def linear(input, weight, bias=None) -> Scope:
    """torch.nn.functional.linear: ``y[.., o] = sum[i] x[.., i] * w[o, i] (+ bias[o])``."""
    x, w = operand("linear", input), operand("linear", weight, "weight")
    if x.rank == 0:
        raise OpError("linear", "input must have at least 1 dimension, got a 0-D input")
    check_rank("linear", w, [1, 2], "weight")
    if w.shape[-1] != x.shape[-1]:
        raise OpError("linear", f"in_features mismatch: the last dim of input "
                                f"{fmt_shape(x.shape)} ({x.shape[-1]}) != the last dim of "
                                f"weight {fmt_shape(w.shape)} ({w.shape[-1]})")
    lead = x.shape[:-1]
    names = ["b"] if len(lead) == 1 else [f"b{d}" for d in range(len(lead))]
    out_names = names + (["o"] if w.rank == 2 else [])
    out = iters(out_names, list(lead) + ([w.shape[0]] if w.rank == 2 else []))
    (i,) = iters(["i"], [x.shape[-1]])
    s = syms(out)
    w_idx = ([s[-1]] if w.rank == 2 else []) + [i.symbol]
    body = read(x, *(s[:len(lead)] + [i.symbol])) * read(w, *w_idx)
    dtype = dtype_of(x, w)
    if bias is None:
        return scope("linear", out, (i,), body, dtype=dtype)
    bias = operand("linear", bias, "bias")
    want = (w.shape[0],) if w.rank == 2 else ()
    if bias.shape != want:
        raise OpError("linear", f"bias must have shape {fmt_shape(want)} (out_features), got "
                                f"{fmt_shape(bias.shape)}")
    core = scope("linear_nobias", out, (i,), body, dtype=dtype)
    return scope("linear", out, (), read(core, *s) + read(bias, *s[len(lead):]), dtype=dtype)
