"""Shape ops: each is a scope with no summation whose body reads its input at remapped indices.

``transpose``/``permute`` swap iterators; ``reshape`` groups input and output dims whose sizes
multiply alike and maps each group through its flat index (floor-div / mod only where the
group really merges or splits dims); ``slice`` and ``unfold`` are affine reads; ``pad`` and
``cat`` rely on out-of-bounds reads being 0 (``cat`` is a sum of shifted reads);
``as_strided`` reads the input's row-major elements at an affine flat position, unravelled
with the output's ranges so that floors and mods appear only where they are needed.
"""
from __future__ import annotations

import builtins
from typing import Sequence

import sympy

from ir.index_math import simplify_index
from ir.nodes import Const, Expr, Scope
from ir.ops._util import (
    OpError, axis_names, fmt_shape, iters, normalize_dim, normalize_dims, numel, operand, read,
    scope, syms,
)

__all__ = ["transpose", "permute", "reshape", "view", "flatten", "squeeze", "unsqueeze",
           "slice", "unfold", "pad", "cat", "stack", "expand", "contiguous", "as_strided",
           "getitem"]


def _remap(op: str, x, out_shape: Sequence[int], index_of) -> Scope:
    """``out[i...] = x[index_of(i...)]`` with ``out`` of ``out_shape``."""
    out = iters(axis_names(len(out_shape)), out_shape)
    return scope(op, out, (), read(x, *index_of(syms(out))), dtype=x.dtype)


def _ints(op: str, what: str, values) -> tuple[int, ...]:
    if len(values) == 1 and not isinstance(values[0], int):
        values = tuple(values[0])
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise OpError(op, f"{what} must be ints, got {values!r}")
    return tuple(values)


def transpose(input, dim0: int, dim1: int):
    x = operand("transpose", input)
    a, b = normalize_dim("transpose", dim0, x.rank), normalize_dim("transpose", dim1, x.rank)
    perm = list(range(x.rank))
    if x.rank:
        perm[a], perm[b] = perm[b], perm[a]
    return _permute("transpose", x, perm)


def permute(input, *dims):
    """torch.permute: ``permute(x, (2, 0, 1))`` or ``permute(x, 2, 0, 1)``."""
    x = operand("permute", input)
    dims = _ints("permute", "dims", dims)
    if len(dims) != x.rank:
        raise OpError("permute", f"number of dims {len(dims)} does not match the input rank "
                                 f"{x.rank} (shape {fmt_shape(x.shape)})")
    perm = [normalize_dim("permute", d, x.rank) for d in dims]
    if sorted(perm) != list(range(x.rank)):
        raise OpError("permute", f"dims {dims} is not a permutation of 0..{x.rank - 1}")
    return _permute("permute", x, perm)


def _permute(op: str, x, perm: list[int]):
    shape = [x.shape[p] for p in perm]

    def index_of(s):
        idx = [None] * x.rank
        for out_dim, in_dim in enumerate(perm):
            idx[in_dim] = s[out_dim]
        return idx
    return _remap(op, x, shape, index_of)


def _infer_shape(op: str, shape: tuple[int, ...], total: int) -> tuple[int, ...]:
    if shape.count(-1) > 1:
        raise OpError(op, f"only one dimension can be inferred, got shape {shape}")
    if any(n < -1 for n in shape):
        raise OpError(op, f"invalid shape dimension in {shape}")
    known = numel([n for n in shape if n != -1])
    if -1 in shape:
        if known == 0 or total % known:
            raise OpError(op, f"shape {fmt_shape(shape)} is invalid for input of size {total}")
        shape = tuple(total // known if n == -1 else n for n in shape)
    if numel(shape) != total:
        raise OpError(op, f"shape {fmt_shape(shape)} is invalid for input of size {total}")
    return shape


def _groups(a: Sequence[int], b: Sequence[int]):
    """Pairs (input dims, output dims) of non-1 dims with equal size products, in order."""
    ia = [d for d, n in enumerate(a) if n != 1]
    ib = [d for d, n in enumerate(b) if n != 1]
    groups, i, j = [], 0, 0
    while i < len(ia):
        ga, gb = [ia[i]], [ib[j]]
        pa, pb = a[ia[i]], b[ib[j]]
        i, j = i + 1, j + 1
        while pa != pb:
            if pa < pb:
                ga.append(ia[i]); pa *= a[ia[i]]; i += 1  # noqa: E702
            else:
                gb.append(ib[j]); pb *= b[ib[j]]; j += 1  # noqa: E702
        groups.append((ga, gb))
    return groups


def reshape(input, *shape):
    """torch.reshape / view, ``-1`` inferred: each merged/split group reads through its flat
    index, ``x[.., (flat // stride) % size, ..]``."""
    return _reshape("reshape", input, shape)


def view(input, *shape):
    return _reshape("view", input, shape)


def _reshape(op: str, input, shape):
    x = operand(op, input)
    shape = _infer_shape(op, _ints(op, "shape", shape), numel(x.shape))
    if numel(shape) == 0:  # nothing to read: an empty scope of the right shape
        out = iters(axis_names(len(shape)), shape)
        return scope(op, out, (), Const(0.0), dtype=x.dtype)

    def index_of(s):
        idx: list[Expr] = [sympy.Integer(0)] * x.rank
        for ga, gb in _groups(x.shape, shape):
            flat, stride = sympy.Integer(0), 1
            for d in reversed(gb):
                flat, stride = flat + s[d] * stride, stride * shape[d]
            stride = 1
            for k, d in enumerate(reversed(ga)):
                e = sympy.floor(flat / stride) if stride != 1 else flat
                idx[d] = e if k == len(ga) - 1 else sympy.Mod(e, x.shape[d])
                stride *= x.shape[d]
        return idx
    return _remap(op, x, shape, index_of)


def flatten(input, start_dim: int = 0, end_dim: int = -1):
    x = operand("flatten", input)
    if x.rank == 0:
        return _reshape("flatten", x, (1,))
    a = normalize_dim("flatten", start_dim, x.rank)
    b = normalize_dim("flatten", end_dim, x.rank)
    if a > b:
        raise OpError("flatten", f"start_dim {start_dim} comes after end_dim {end_dim}")
    shape = x.shape[:a] + (numel(x.shape[a:b + 1]),) + x.shape[b + 1:]
    return _reshape("flatten", x, shape)


def squeeze(input, dim=None):
    """torch.squeeze: drop size-1 dims (all, one, or a tuple); other named dims stay."""
    x = operand("squeeze", input)
    dims = range(x.rank) if dim is None else normalize_dims("squeeze", dim, x.rank)
    drop = {d for d in dims if x.shape[d] == 1}
    keep = [d for d in range(x.rank) if d not in drop]

    def index_of(s):
        where = dict(zip(keep, s))
        return [where.get(d, 0) for d in range(x.rank)]
    return _remap("squeeze", x, [x.shape[d] for d in keep], index_of)


def unsqueeze(input, dim: int):
    x = operand("unsqueeze", input)
    d = normalize_dim("unsqueeze", dim, x.rank + 1)
    shape = x.shape[:d] + (1,) + x.shape[d:]
    return _remap("unsqueeze", x, shape, lambda s: s[:d] + s[d + 1:])


def slice(input, dim: int = 0, start=None, end=None, step: int = 1):  # noqa: A001
    """``x[..., start:end:step, ...]`` along ``dim`` (torch.ops.aten.slice; step > 0)."""
    x = operand("slice", input)
    d = normalize_dim("slice", dim, x.rank)
    if x.rank == 0:
        raise OpError("slice", "cannot slice a 0-D input")
    if not isinstance(step, int) or step <= 0:
        raise OpError("slice", f"slice step must be a positive int, got {step!r}")
    lo, hi, _ = builtins.slice(start, end, step).indices(x.shape[d])
    n = len(range(lo, hi, step))
    shape = x.shape[:d] + (n,) + x.shape[d + 1:]
    return _remap("slice", x, shape, lambda s: s[:d] + [lo + step * s[d]] + s[d + 1:])


def unfold(input, dimension: int, size: int, step: int):
    """torch.Tensor.unfold: windows of ``size`` every ``step`` along ``dimension``, as a new
    last dim: ``out[.., w, .., k] = x[.., w * step + k, ..]``."""
    x = operand("unfold", input)
    d = normalize_dim("unfold", dimension, x.rank)
    n = x.shape[d] if x.rank else 1
    if not isinstance(step, int) or step <= 0:
        raise OpError("unfold", f"step must be a positive int, got {step!r}")
    if not isinstance(size, int) or size < 0 or size > n:
        raise OpError("unfold", f"maximum size for tensor at dimension {d} is {n} "
                                f"but size is {size}")
    windows = (n - size) // step + 1
    if x.rank == 0:
        return _remap("unfold", x, (size,), lambda s: [])
    shape = x.shape[:d] + (windows,) + x.shape[d + 1:] + (size,)
    return _remap("unfold", x, shape,
                  lambda s: s[:d] + [s[d] * step + s[-1]] + s[d + 1:-1])


def pad(input, pad: Sequence[int], mode: str = "constant", value=None):
    """torch.nn.functional.pad, constant 0: ``pad = (left_last, right_last, left_prev, ...)``;
    negative amounts crop. ``out[.., i, ..] = x[.., i - left, ..]``."""
    x = operand("pad", input)
    if mode != "constant" or value not in (None, 0, 0.0):
        raise OpError("pad", f"only constant zero padding is supported, got mode={mode!r} "
                             f"value={value!r}")
    amounts = _ints("pad", "pad", (pad,))
    if len(amounts) % 2 or len(amounts) // 2 > x.rank:
        raise OpError("pad", f"padding length {len(amounts)} must be even and at most twice "
                             f"the input rank {x.rank}")
    left = [0] * x.rank
    shape = list(x.shape)
    for k in range(len(amounts) // 2):
        d = x.rank - 1 - k
        left[d] = amounts[2 * k]
        shape[d] += amounts[2 * k] + amounts[2 * k + 1]
        if shape[d] < 0:
            raise OpError("pad", f"padding {amounts} makes dim {d} of input shape "
                                 f"{fmt_shape(x.shape)} negative ({shape[d]})")
    return _remap("pad", x, shape, lambda s: [i - l for i, l in zip(s, left)])


def cat(tensors, dim: int = 0):
    """torch.cat: ``out[.., i, ..] = x0[.., i, ..] + x1[.., i - n0, ..] + ...``; each read is
    0 outside its own slab, so the sum picks exactly one."""
    xs = [operand("cat", t, f"tensors[{k}]") for k, t in enumerate(tensors)]
    if not xs:
        raise OpError("cat", "expected a non-empty list of tensors")
    if any(x.rank == 0 for x in xs):
        raise OpError("cat", "zero-dimensional tensors cannot be concatenated")
    d = normalize_dim("cat", dim, xs[0].rank)
    for k, x in enumerate(xs):
        if x.rank != xs[0].rank or any(x.shape[e] != xs[0].shape[e]
                                       for e in range(x.rank) if e != d):
            raise OpError("cat", f"sizes of tensors must match except in dimension {d}: "
                                 f"tensors[0] has shape {fmt_shape(xs[0].shape)} but "
                                 f"tensors[{k}] has shape {fmt_shape(x.shape)}")
    shape = list(xs[0].shape)
    shape[d] = builtins.sum(x.shape[d] for x in xs)
    out = iters(axis_names(len(shape)), shape)
    s = syms(out)
    body, offset = None, 0
    for x in xs:
        term = read(x, *(s[:d] + [s[d] - offset] + s[d + 1:]))
        body = term if body is None else body + term
        offset += x.shape[d]
    return scope("cat", out, (), body, dtype=xs[0].dtype)


def stack(tensors, dim: int = 0):
    """torch.stack: cat of unsqueezed inputs."""
    xs = [operand("stack", t, f"tensors[{k}]") for k, t in enumerate(tensors)]
    if not xs:
        raise OpError("stack", "expected a non-empty list of tensors")
    for k, x in enumerate(xs):
        if x.shape != xs[0].shape:
            raise OpError("stack", f"stack expects each tensor to be equal size, but got "
                                   f"{fmt_shape(xs[0].shape)} at entry 0 and "
                                   f"{fmt_shape(x.shape)} at entry {k}")
    d = normalize_dim("stack", dim, xs[0].rank + 1)
    result = cat([unsqueeze(x, d) for x in xs], d)
    return scope("stack", result.traversal, (), result.body, dtype=result.dtype)


def expand(input, *sizes):
    """torch.Tensor.expand: stretch size-1 dims (``-1`` keeps a size); new dims lead."""
    x = operand("expand", input)
    sizes = _ints("expand", "sizes", sizes)
    lead = len(sizes) - x.rank
    if lead < 0:
        raise OpError("expand", f"the number of sizes provided ({len(sizes)}) must be at "
                                f"least the input rank ({x.rank})")
    shape = list(sizes)
    for d, n in enumerate(x.shape):
        want = sizes[lead + d]
        if want == -1:
            shape[lead + d] = n
        elif n != 1 and want != n:
            raise OpError("expand", f"the expanded size {want} must match the existing size "
                                    f"{n} at non-singleton dim {d} (input shape "
                                    f"{fmt_shape(x.shape)})")
    if any(n < 0 for n in shape[:lead]):
        raise OpError("expand", f"-1 is not allowed for new leading dims, got {sizes}")
    return _remap("expand", x, shape, lambda s: [
        0 if n == 1 and shape[lead + d] != 1 else s[lead + d] for d, n in enumerate(x.shape)])


def contiguous(input, memory_format=None):
    """torch.Tensor.contiguous: the same values (a copy the derivations inline away)."""
    x = operand("contiguous", input)
    return _remap("contiguous", x, x.shape, lambda s: s)


def as_strided(input, size, stride, storage_offset: int | None = None):
    """torch.as_strided over a contiguous input:
    ``out[i...] = flat(x)[storage_offset + sum_k stride[k] * i[k]]``, ``flat(x)`` being ``x``'s
    elements in row-major order. torch reads the tensor's *storage*; the two agree when ``x``
    is contiguous and ``storage_offset`` counts from ``x``'s first element (the caller's
    job). Every position read must lie inside ``x``."""
    x = operand("as_strided", input)
    size, stride = _ints("as_strided", "size", (size,)), _ints("as_strided", "stride", (stride,))
    offset = 0 if storage_offset is None else storage_offset
    if len(size) != len(stride):
        raise OpError("as_strided", f"size {size} and stride {stride} differ in length")
    if builtins.any(n < 0 for n in size) or not isinstance(offset, int):
        raise OpError("as_strided", f"bad size {size} or storage_offset {offset!r}")
    if builtins.all(n > 0 for n in size):
        first = offset + builtins.sum(min(0, s * (n - 1)) for s, n in zip(stride, size))
        last = offset + builtins.sum(max(0, s * (n - 1)) for s, n in zip(stride, size))
        if first < 0 or last >= numel(x.shape):
            raise OpError("as_strided", f"reads flat positions {first}..{last}, outside the "
                                        f"{numel(x.shape)} elements of {fmt_shape(x.shape)}")

    def index_of(s):
        ranges = {str(v): (0, n) for v, n in zip(s, size)}
        flat = offset + builtins.sum((k * v for k, v in zip(stride, s)), sympy.Integer(0))
        out, inner = [], 1
        for d in reversed(range(x.rank)):  # dim d's index is digit d of flat, in x's shape
            digit = sympy.floor(flat / inner)
            if d > 0:  # dim 0 needs no mod: flat < numel(x)
                digit = sympy.Mod(digit, x.shape[d])
            out.append(simplify_index(digit, ranges))
            inner *= x.shape[d]
        return out[::-1]
    return _remap("as_strided", x, size, index_of)


def getitem(input, index):
    """``x[index]`` with basic indexing: ints, slices (step > 0), ``...`` and ``None``."""
    x = operand("getitem", input)
    items = index if isinstance(index, tuple) else (index,)
    real = [i for i in items if i is not None and i is not Ellipsis]
    if builtins.sum(i is Ellipsis for i in items) > 1 or len(real) > x.rank:
        raise OpError("getitem", f"index {index!r} does not fit shape {fmt_shape(x.shape)}")
    fill = (builtins.slice(None),) * (x.rank - len(real))
    if Ellipsis in items:
        k = items.index(Ellipsis)
        items = items[:k] + fill + items[k + 1:]
    else:
        items = items + fill
    shape, reads, d = [], [], 0  # reads: per output dim or int index, how x's dim is read
    for item in items:
        if item is None:
            shape.append(1)
            reads.append(("new",))
            continue
        n = x.shape[d]
        if isinstance(item, int) and not isinstance(item, bool):
            if not -n <= item < n:
                raise OpError("getitem", f"index {item} is out of bounds for dim {d} of "
                                         f"size {n}")
            reads.append(("at", item % n))
        elif isinstance(item, builtins.slice):
            lo, hi, step = item.indices(n)
            if step <= 0:
                raise OpError("getitem", f"slice step must be positive, got {step}")
            shape.append(len(range(lo, hi, step)))
            reads.append(("range", lo, step))
        else:
            raise OpError("getitem", f"only ints, slices, ... and None index a tensor here, "
                                     f"got {type(item).__name__}")
        d += 1

    def index_of(s):
        out, k = [], 0
        for r in reads:
            if r[0] == "at":
                out.append(r[1])
                continue
            if r[0] == "range":
                out.append(r[1] + r[2] * s[k])
            k += 1
        return out
    return _remap("getitem", x, shape, index_of)
