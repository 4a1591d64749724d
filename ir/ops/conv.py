"""Convolutions: conv1d / conv2d and conv_transpose1d / conv_transpose2d (torch semantics).

``conv2d`` is one scope (iterator names as in the EinNet paper)::

    out[n, f, h, w] = sum[c, r, s] x[n, g*C/G + c, h*sh + r*dh - ph, w*sw + s*dw - pw]
                                   * W[f, c, r, s]        with g = f // (F/G)

Padding is not a guard: positions left of 0 or past the input are out of bounds and read 0
(asymmetric ``padding='same'`` is just a different offset). With ``groups == 1`` the channel
index is plain ``c``. A bias is an outer scope adding ``bias[f]``.

``conv_transpose2d`` with stride ``s`` is two scopes. An inner scope zero-upsamples the
input without any comparison: ``U[n, c, u, v] = x[n, c, u//s + H*(u%s), v//s + W*(v%s)]``
for ``u in 0:s*H`` -- when ``u % s != 0`` the row index is ``>= H`` and reads 0. The output is
then a stride-1 correlation of ``U`` with the spatially flipped, in/out-swapped kernel::

    out[n, o, y, x] = sum[c, r, t] U[n, gc, y + r*d - (d*(k-1) - p), ...] * W[gc, o % O, k-1-r, ...]

with ``gc = (o // O)*C/G + c`` (``O`` = output channels per group). Output positions that
reach before 0 or past ``U`` read 0, which covers padding, dilation and output_padding.
"""
from __future__ import annotations

import sympy

from ir.nodes import Scope

from ir.ops._util import (
    OpError, check_rank, dtype_of, fmt_shape, iters, numel, operand, read, scope, syms,
    tuple_arg,
)

__all__ = ["conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d"]

_SPATIAL = {1: (["l"], ["r"]), 2: (["h", "w"], ["r", "s"])}


def _operands(op: str, nd: int, input, weight):
    x, w = operand(op, input), operand(op, weight, "weight")
    check_rank(op, x, [nd + 1, nd + 2])
    check_rank(op, w, [nd + 2], "weight")
    return x, w, x.rank == nd + 1  # unbatched


def _groups(op: str, groups) -> int:
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise OpError(op, f"groups must be a positive int, got {groups!r}")
    return groups


def _with_bias(op: str, core: Scope, bias, channels: int, channel_dim: int) -> Scope:
    if bias is None:
        return core
    bias = operand(op, bias, "bias")
    if bias.shape != (channels,):
        raise OpError(op, f"bias must have shape ({channels},) (one per output channel), got "
                          f"{fmt_shape(bias.shape)}")
    inner = scope(f"{op}_nobias", core.traversal, core.summation, core.body, dtype=core.dtype)
    s = syms(core.traversal)
    return scope(op, core.traversal, (), read(inner, *s) + read(bias, s[channel_dim]),
                 dtype=core.dtype)


def _conv(op: str, nd: int, input, weight, bias, stride, padding, dilation, groups) -> Scope:
    x, w, unbatched = _operands(op, nd, input, weight)
    groups = _groups(op, groups)
    stride = tuple_arg(op, "stride", stride, nd, minimum=1)
    dilation = tuple_arg(op, "dilation", dilation, nd, minimum=1)
    lead = 0 if unbatched else 1
    channels, spatial = x.shape[lead], x.shape[lead + 1:]
    feats, cg, kernel = w.shape[0], w.shape[1], w.shape[2:]
    if feats % groups:
        raise OpError(op, f"out_channels (weight dim 0 = {feats}) must be divisible by "
                          f"groups={groups}")
    if cg * groups != channels:
        raise OpError(op, f"groups={groups}, weight of shape {fmt_shape(w.shape)} expects "
                          f"{cg * groups} input channels, but the input {fmt_shape(x.shape)} "
                          f"has {channels} channels (dim {lead})")
    span = [d * (k - 1) for d, k in zip(dilation, kernel)]
    if isinstance(padding, str):
        if padding == "valid":
            left = [0] * nd
            out_sizes = [(n - sp - 1) // s + 1 for n, sp, s in zip(spatial, span, stride)]
        elif padding == "same":
            if any(s != 1 for s in stride):
                raise OpError(op, f"padding='same' is not supported for strided convolutions "
                                  f"(stride={stride})")
            left, out_sizes = [sp // 2 for sp in span], list(spatial)
        else:
            raise OpError(op, f"padding must be 'same', 'valid', an int or a tuple, "
                              f"got {padding!r}")
    else:
        left = list(tuple_arg(op, "padding", padding, nd, minimum=0))
        out_sizes = [(n + 2 * p - sp - 1) // s + 1
                     for n, p, sp, s in zip(spatial, left, span, stride)]
    if any(o < 1 for o in out_sizes) and numel(spatial) > 0:
        raise OpError(op, f"kernel size {tuple(kernel)} (dilated {tuple(sp + 1 for sp in span)})"
                          f" can't be greater than the padded input size of input "
                          f"{fmt_shape(x.shape)}")
    out_sizes = [max(o, 0) for o in out_sizes]

    sp_names, k_names = _SPATIAL[nd]
    batch = [] if unbatched else [("n", x.shape[0])]
    out = iters([n for n, _ in batch] + ["f"] + sp_names,
                [e for _, e in batch] + [feats] + out_sizes)
    summation = iters(["c"] + k_names, [cg] + list(kernel))
    o, c, ks = syms(out), summation[0].symbol, syms(summation[1:])
    f = o[lead]
    ch = c if groups == 1 else sympy.floor(f / (feats // groups)) * cg + c
    positions = [h * s + k * d - p
                 for h, s, k, d, p in zip(o[lead + 1:], stride, ks, dilation, left)]
    body = read(x, *(o[:lead] + [ch] + positions)) * read(w, f, c, *ks)
    core = scope(op, out, summation, body, dtype=dtype_of(x, w))
    return _with_bias(op, core, bias, feats, lead)


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1) -> Scope:
    """torch.nn.functional.conv1d: input (N, C, L) or (C, L), weight (F, C/groups, K)."""
    return _conv("conv1d", 1, input, weight, bias, stride, padding, dilation, groups)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1) -> Scope:
    """torch.nn.functional.conv2d: input (N, C, H, W) or (C, H, W), weight (F, C/groups, R, S)."""
    return _conv("conv2d", 2, input, weight, bias, stride, padding, dilation, groups)


def _conv_transpose(op: str, nd: int, input, weight, bias, stride, padding, output_padding,
                    groups, dilation) -> Scope:
    x, w, unbatched = _operands(op, nd, input, weight)
    groups = _groups(op, groups)
    stride = tuple_arg(op, "stride", stride, nd, minimum=1)
    dilation = tuple_arg(op, "dilation", dilation, nd, minimum=1)
    padding = tuple_arg(op, "padding", padding, nd, minimum=0)
    out_pad = tuple_arg(op, "output_padding", output_padding, nd, minimum=0)
    if any(op_ >= max(s, d) for op_, s, d in zip(out_pad, stride, dilation)):
        raise OpError(op, f"output padding must be smaller than either stride or dilation, "
                          f"got output_padding={out_pad}, stride={stride}, dilation={dilation}")
    lead = 0 if unbatched else 1
    channels, spatial = x.shape[lead], x.shape[lead + 1:]
    cin, og, kernel = w.shape[0], w.shape[1], w.shape[2:]
    if cin != channels:
        raise OpError(op, f"weight of shape {fmt_shape(w.shape)} expects {cin} input channels "
                          f"(weight dim 0), but the input {fmt_shape(x.shape)} has {channels} "
                          f"channels (dim {lead})")
    if channels % groups:
        raise OpError(op, f"input channels ({channels}) must be divisible by groups={groups}")
    cg = channels // groups
    span = [d * (k - 1) for d, k in zip(dilation, kernel)]
    out_sizes = [(n - 1) * s - 2 * p + sp + q + 1
                 for n, s, p, sp, q in zip(spatial, stride, padding, span, out_pad)]
    if any(o < 0 for o in out_sizes) or (any(o == 0 for o in out_sizes) and numel(spatial)):
        raise OpError(op, f"the output size {tuple(out_sizes)} is not positive for input "
                          f"{fmt_shape(x.shape)}, kernel {tuple(kernel)}, stride {stride}, "
                          f"padding {padding}, dilation {dilation}")
    out_sizes = [max(o, 0) for o in out_sizes]
    dtype = dtype_of(x, w)

    sp_names, k_names = _SPATIAL[nd]
    batch = [] if unbatched else [("n", x.shape[0])]
    bnames = [n for n, _ in batch]
    src = x
    if any(s > 1 for s in stride):  # U[.., c, u..] = x[.., c, u//s + L*(u%s) ..]
        up = iters(bnames + ["c"] + [f"u{n}" for n in sp_names],
                   [e for _, e in batch] + [channels] +
                   [s * n for s, n in zip(stride, spatial)])
        u = syms(up)
        idx = [sympy.floor(v / s) + n * sympy.Mod(v, s) if s > 1 else v
               for v, s, n in zip(u[lead + 1:], stride, spatial)]
        src = scope(f"{op}_upsample", up, (), read(x, *(u[:lead + 1] + idx)), dtype=dtype)

    cout = og * groups
    out = iters(bnames + ["o"] + sp_names, [e for _, e in batch] + [cout] + out_sizes)
    summation = iters(["c"] + k_names, [cg] + list(kernel))
    t, c, ks = syms(out), summation[0].symbol, syms(summation[1:])
    o = t[lead]
    gc = c if groups == 1 else sympy.floor(o / og) * cg + c
    oc = o if groups == 1 else sympy.Mod(o, og)
    positions = [y + k * d - (sp - p)
                 for y, k, d, sp, p in zip(t[lead + 1:], ks, dilation, span, padding)]
    flipped = [n - 1 - k for n, k in zip(kernel, ks)]
    body = read(src, *(t[:lead] + [gc] + positions)) * read(w, gc, oc, *flipped)
    core = scope(op, out, summation, body, dtype=dtype)
    return _with_bias(op, core, bias, cout, lead)


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1) -> Scope:
    """torch.nn.functional.conv_transpose1d: weight (C, F/groups, K)."""
    return _conv_transpose("conv_transpose1d", 1, input, weight, bias, stride, padding,
                           output_padding, groups, dilation)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1) -> Scope:
    """torch.nn.functional.conv_transpose2d: input (N, C, H, W), weight (C, F/groups, R, S)."""
    return _conv_transpose("conv_transpose2d", 2, input, weight, bias, stride, padding,
                           output_padding, groups, dilation)
