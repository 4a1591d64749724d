"""Reductions (sum, mean, amax, amin, cumsum) and the softmax family as nested scopes.

``sum(x, dim=1)`` over ``x[i, j, k]`` is ``out[i, k] = sum[j] x[i, j, k]``: kept dims are
traversal iterators, reduced dims summation iterators. With ``keepdim`` the reduced dims stay
as size-1 traversal iterators the body does not use. ``cumsum`` sums a shifted read whose
reads before the start are out of bounds (0). ``softmax`` is four scopes: the max (for
stability), ``exp(x - max)``, its sum, and the quotient.
"""
from __future__ import annotations

from ir.nodes import Binary, BinOp, Const, Reduce, Scope, UnOp, Unary

from ir.ops._util import (
    OpError, axis_names, iters, normalize_dim, normalize_dims, numel, operand, read,
    scope, syms,
)

__all__ = ["sum", "mean", "var", "amax", "amin", "cumsum", "softmax", "log_softmax"]


def _dims(op: str, x, dim) -> tuple[int, ...]:
    if dim is None:
        return tuple(range(x.rank))
    dims = normalize_dims(op, dim, x.rank)
    if not isinstance(dim, int) and len(tuple(dim)) == 0:  # torch: dim=() reduces everything
        return tuple(range(x.rank))
    return dims


def _reduction(op: str, x, dims: tuple[int, ...], keepdim: bool, reduce: Reduce,
               scale: float | None = None, name: str | None = None) -> Scope:
    """``x`` reduced with ``reduce`` over ``dims``; body multiplied by ``scale`` if given."""
    names = axis_names(x.rank)
    kept = [d for d in range(x.rank) if d not in dims]
    if keepdim:
        traversal = iters(names, [1 if d in dims else x.shape[d] for d in range(x.rank)])
    else:
        traversal = iters([names[d] for d in kept], [x.shape[d] for d in kept])
    summation = iters([f"r{names[d]}" for d in dims], [x.shape[d] for d in dims])
    named = {it.name: it.symbol for it in traversal + summation}
    body = read(x, *(named[f"r{names[d]}" if d in dims else names[d]] for d in range(x.rank)))
    if scale is not None:
        body = body * Const(scale)
    return scope(name or op, traversal, summation, body, reduce, dtype=x.dtype)


def sum(input, dim=None, keepdim: bool = False):  # noqa: A001 - mirrors torch.sum
    """torch.sum: over all dims (``dim=None`` or ``()``), one dim or a tuple of dims."""
    x = operand("sum", input)
    return _reduction("sum", x, _dims("sum", x, dim), keepdim, Reduce.SUM)


def mean(input, dim=None, keepdim: bool = False):
    """torch.mean: the sum scaled by 1/count inside the body (nan for an empty reduction)."""
    x = operand("mean", input)
    dims = _dims("mean", x, dim)
    count = numel([x.shape[d] for d in dims])
    if count == 0:  # torch gives nan: 0 / 0 through an outer scope
        total = _reduction("mean", x, dims, keepdim, Reduce.SUM, name="mean_sum")
        out = iters(axis_names(total.rank), total.shape)
        return scope("mean", out, (), read(total, *syms(out)) / Const(0.0), dtype=x.dtype)
    return _reduction("mean", x, dims, keepdim, Reduce.SUM, scale=1.0 / count)


def var(input, dim=None, *, correction=1, keepdim: bool = False):
    """torch.var: ``sum((x - mean)^2) / max(0, N - correction)`` over ``dim`` (all dims when
    None): two scopes, the mean (kept dims) and the sum of squared deviations. ``N -
    correction <= 0`` divides by 0 (inf, or NaN for a single element), as torch does."""
    x = operand("var", input)
    dims = _dims("var", x, dim)
    if not isinstance(correction, (int, float)) or isinstance(correction, bool):
        raise OpError("var", f"correction must be a number, got {type(correction).__name__}")
    count = numel([x.shape[d] for d in dims])
    m = mean(x, dims, keepdim=True)
    names = axis_names(x.rank)
    full = iters(names, x.shape)
    s = syms(full)
    deviation = read(x, *s) - read(m, *(0 if d in dims else s[d] for d in range(x.rank)))
    squares = scope("var_dev", full, (), Binary(BinOp.POW, deviation, Const(2.0)), dtype=x.dtype)
    total = _reduction("var", squares, dims, keepdim, Reduce.SUM, name="var_sum")
    out = iters(axis_names(total.rank), total.shape)
    return scope("var", out, (), read(total, *syms(out)) / Const(float(max(0, count - correction))),
                 dtype=x.dtype)


def cumsum(input, dim: int):
    """torch.cumsum: ``out[.., t, ..] = sum[j] x[.., t - j, ..]`` over ``j in 0:n``. The
    reads before the start are out of bounds and read 0, so a prefix is a plain sum: the
    last entry of a running sum is the whole sum, and the derivations see it."""
    x = operand("cumsum", input)
    if x.rank == 0:
        raise OpError("cumsum", "a 0-d tensor has nothing to accumulate")
    d = normalize_dim("cumsum", dim, x.rank)
    names = axis_names(x.rank)
    traversal = iters(names, x.shape)
    (shift,) = iters([f"r{names[d]}"], [x.shape[d]])
    at = [it.symbol for it in traversal]
    at[d] = at[d] - shift.symbol
    return scope("cumsum", traversal, (shift,), read(x, *at), Reduce.SUM, dtype=x.dtype)


def _extremum(op: str, reduce: Reduce, input, dim, keepdim):
    x = operand(op, input)
    dims = _dims(op, x, dim)
    for d in dims:
        if x.shape[d] == 0:
            raise OpError(op, f"Expected reduction dim {d} to have non-zero size "
                              f"(input shape {tuple(x.shape)})")
    return _reduction(op, x, dims, keepdim, reduce)


def amax(input, dim=(), keepdim: bool = False):
    """torch.amax: maximum over ``dim`` (all dims when ``()``)."""
    return _extremum("amax", Reduce.MAX, input, dim, keepdim)


def amin(input, dim=(), keepdim: bool = False):
    """torch.amin: minimum over ``dim`` (all dims when ``()``)."""
    return _extremum("amin", Reduce.MIN, input, dim, keepdim)


def _softmax_parts(op: str, input, dim):
    """(x, dim, read of x, read of max, exp scope, read of exp, read of sum) for softmax."""
    x = operand(op, input)
    if dim is None:
        raise OpError(op, "dim must be given (implicit dim choice is deprecated in torch)")
    d = normalize_dim(op, dim, x.rank)
    dims = (d,) if x.rank else ()
    names = axis_names(x.rank)
    out = iters(names, x.shape)
    s = syms(out)
    at_dim0 = [0 if k == d else s[k] for k in range(x.rank)]
    m = _reduction(op, x, dims, True, Reduce.MAX, name=f"{op}_max")
    shifted = read(x, *s) - read(m, *at_dim0)
    e = scope(f"{op}_exp", out, (), Unary(UnOp.EXP, shifted), dtype=x.dtype)
    total = _reduction(op, e, dims, True, Reduce.SUM, name=f"{op}_sum")
    return x, out, shifted, read(e, *s), read(total, *at_dim0)


def softmax(input, dim: int, dtype: str | None = None):
    """torch.softmax: ``exp(x - max) / sum(exp(x - max))`` along ``dim``."""
    x, out, _, e, total = _softmax_parts("softmax", input, dim)
    return scope("softmax", out, (), e / total, dtype=dtype or x.dtype)


def log_softmax(input, dim: int, dtype: str | None = None):
    """torch.log_softmax: ``(x - max) - log(sum(exp(x - max)))`` along ``dim``."""
    x, out, shifted, _, total = _softmax_parts("log_softmax", input, dim)
    return scope("log_softmax", out, (), shifted - Unary(UnOp.LOG, total),
                 dtype=dtype or x.dtype)
