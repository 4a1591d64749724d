"""Core ATen → ``ir``: one row per ATen operator that is an index-summation expression.

AOTAutograd hands Ollie functional core-ATen graphs. Each row takes an ATen call's arguments
(tensor operands already turned into ``ir`` operands, everything else as ATen passes it) and
returns the ``ir.Scope`` of the operator library (``ir.ops``) with the same meaning. The rows
follow ATen's schemas (``add.Tensor(self, other, *, alpha=1)``), not torch's Python API: the
graph is what they read. An operator without a row, or a call a row refuses (``OpError``),
stays in the graph for Inductor, with the reason kept for ``explain``.

``VIEWS`` are the rows that only move data: a region made of views and a single library
operator is left to that operator (see ``ollie.capture.regions.worth_deriving``).
"""
from __future__ import annotations

import torch

from ir import ops
from ir.ops import OpError

aten = torch.ops.aten


def _with_bias(product_op):
    """``addmm`` and ``baddbmm`` (not core ATen, but Inductor's decompositions keep it):
    ``beta · self + alpha · product(a, b)``; with ``beta`` 0, ``self`` is not read (ATen's
    rule, so that NaNs in it do not propagate)."""
    def row(self, a, b, *, beta=1, alpha=1):
        product = product_op(a, b)
        if alpha != 1:
            product = ops.mul(product, alpha)
        return ops.add(product, self, alpha=beta) if beta != 0 else product
    return row


def _convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding,
                 groups):
    nd = len(weight.shape) - 2
    if transposed:
        build = {1: ops.conv_transpose1d, 2: ops.conv_transpose2d}.get(nd)
        args = dict(stride=stride, padding=padding, output_padding=output_padding,
                    groups=groups, dilation=dilation)
    else:
        build = {1: ops.conv1d, 2: ops.conv2d}.get(nd)
        args = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    if build is None:
        raise OpError("convolution", f"{nd}-d convolutions have no Ollie operator")
    return build(input, weight, bias, **args)


def _div(self, other, *, rounding_mode=None):
    return ops.div(self, other, rounding_mode=rounding_mode)


def _multiply_add(op):
    """``addcmul`` and ``addcdiv``: ``self + value · op(tensor1, tensor2)``."""
    def row(self, tensor1, tensor2, *, value=1):
        term = op(tensor1, tensor2)
        return ops.add(self, term if value == 1 else ops.mul(term, value))
    return row


def _all_dims(dim):
    """ATen's ``dim=[]`` (and ``None``) means every dimension."""
    return None if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0) else dim


def _sum(self, dim=None, keepdim=False, *, dtype=None):
    _same_dtype("sum", self, dtype)
    return ops.sum(self, _all_dims(dim), keepdim)


def _mean(self, dim=None, keepdim=False, *, dtype=None):
    _same_dtype("mean", self, dtype)
    return ops.mean(self, _all_dims(dim), keepdim)


def _cumsum(self, dim, *, dtype=None):
    _same_dtype("cumsum", self, dtype)
    return ops.cumsum(self, dim)


def _extremum(op):
    def row(self, dim=(), keepdim=False):
        return op(self, () if dim is None else dim, keepdim)
    return row


def _softmax(op):
    def row(self, dim, half_to_float):
        if half_to_float:
            raise OpError(op.__name__, "half_to_float=True changes the dtype")
        return op(self, dim)
    return row


def _same_dtype(name, x, dtype):
    if dtype is not None and _ir_dtype(dtype) != x.dtype:
        raise OpError(name, f"dtype={dtype} converts the operand")


def _ir_dtype(dtype) -> str | None:
    return FLOATING.get(dtype)


def _view(self, size):
    return ops.reshape(self, list(size))


def _squeeze(self, dim=None):
    if isinstance(dim, (list, tuple)):
        for d in sorted((d % len(self.shape) for d in dim), reverse=True):
            self = ops.squeeze(self, d) if self.shape[d] == 1 else self
        return ops.contiguous(self)
    return ops.squeeze(self, dim)


def _slice(self, dim=0, start=None, end=None, step=1):
    return ops.slice(self, dim, start, end, step)


def _pad(self, pad, value=0):
    if value != 0:
        raise OpError("constant_pad_nd", f"padding with {value} (reads outside a tensor are 0)")
    return ops.pad(self, list(pad))


def _identity(self, *, memory_format=None):
    return ops.contiguous(self)


def _convert(self, dtype):
    """A copy in the same dtype is the identity; bool to floating point is 1.0 / 0.0. Other
    conversions round, which the IR does not model."""
    if dtype is None or DTYPES.get(dtype) == self.dtype:
        return ops.contiguous(self)
    if self.dtype == "bool" and dtype in FLOATING:
        return ops.where(self, ops.full((), 1.0, dtype=FLOATING[dtype]), 0.0)
    raise OpError("convert", f"converts {self.dtype} to {dtype}")


def _to_copy(self, *, dtype=None, device=None, **layout):
    """Devices do not change inside a graph; see ``_convert`` for dtypes."""
    return _convert(self, dtype)


def _var(self, dim=None, *, correction=None, keepdim=False):
    return ops.var(self, _all_dims(dim), correction=1 if correction is None else correction,
                   keepdim=keepdim)


def _full(size, fill_value, *, dtype=None, **placement):
    if dtype is not None and dtype not in FLOATING:
        raise OpError("full", f"dtype {dtype} is not a floating-point dtype")
    return ops.full(list(size), float(fill_value), dtype=FLOATING.get(dtype, "float32"))


def _scalar_tensor(s, *, dtype=None, **placement):
    return _full((), s, dtype=dtype)


def _expand(self, size, *, implicit=False):
    return ops.expand(self, list(size))


def _as_strided(self, size, stride, storage_offset=None):
    return ops.as_strided(self, size, stride, storage_offset)


FLOATING = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
            torch.bfloat16: "bfloat16"}
DTYPES = {**FLOATING, torch.bool: "bool"}  # what a region reads and computes

# ATen operator (overload packet) -> row.
TABLE = {
    # contractions
    aten.mm: ops.mm, aten.bmm: ops.bmm, aten.mv: ops.mv, aten.dot: ops.dot,
    aten.addmm: _with_bias(ops.mm), aten.baddbmm: _with_bias(ops.bmm),
    aten.convolution: _convolution,
    # elementwise
    aten.add: ops.add, aten.sub: ops.sub, aten.mul: ops.mul,
    aten.div: _div, aten.maximum: ops.maximum, aten.minimum: ops.minimum,
    aten.addcmul: _multiply_add(ops.mul), aten.addcdiv: _multiply_add(ops.div),
    aten.neg: ops.neg, aten.reciprocal: ops.reciprocal, aten.relu: ops.relu,
    aten.exp: ops.exp, aten.log: ops.log, aten.tanh: ops.tanh, aten.sigmoid: ops.sigmoid,
    aten.sqrt: ops.sqrt, aten.abs: ops.abs, aten.rsqrt: ops.rsqrt, aten.erf: ops.erf,
    aten.pow: ops.pow, aten.gelu: lambda self, *, approximate="none": ops.gelu(self, approximate),
    aten.clamp: ops.clamp, aten.clamp_min: lambda self, min: ops.clamp(self, min=min),
    aten.clamp_max: lambda self, max: ops.clamp(self, max=max),
    aten.lt: ops.lt, aten.le: ops.le, aten.gt: ops.gt, aten.ge: ops.ge, aten.eq: ops.eq,
    aten.ne: ops.ne, aten.where: ops.where,
    aten.full: _full, aten.scalar_tensor: _scalar_tensor,
    # reductions
    aten.sum: _sum, aten.mean: _mean, aten.amax: _extremum(ops.amax),
    aten.amin: _extremum(ops.amin), aten.var: _var, aten.cumsum: _cumsum,
    aten._softmax: _softmax(ops.softmax), aten._log_softmax: _softmax(ops.log_softmax),
    # views and data movement
    aten.view: _view, aten._unsafe_view: _view, aten.reshape: _view,
    aten.permute: lambda self, dims: ops.permute(self, list(dims)),
    aten.t: lambda self: ops.transpose(self, 0, -1) if len(self.shape) == 2 else self,
    aten.transpose: ops.transpose, aten.expand: _expand,
    aten.unsqueeze: ops.unsqueeze, aten.squeeze: _squeeze, aten.slice: _slice,
    aten.select: ops.select, aten.diagonal: ops.diagonal, aten.as_strided: _as_strided, aten.cat: ops.cat,
    aten.constant_pad_nd: _pad, aten.unfold: ops.unfold, aten.avg_pool2d: ops.avg_pool2d,
    aten.clone: _identity, aten.alias: _identity, aten._to_copy: _to_copy,
    torch.ops.prims.convert_element_type: _convert,
}

VIEWS = frozenset({
    aten.view, aten._unsafe_view, aten.reshape, aten.permute, aten.t, aten.transpose,
    aten.expand, aten.unsqueeze, aten.squeeze, aten.slice, aten.select, aten.as_strided,
    aten.cat, aten.constant_pad_nd, aten.unfold, aten.clone, aten.alias, aten._to_copy,
    aten.diagonal,
})


# the views that alias their input (no copy), and the calls Inductor leaves to a library as
# they are (its extern kernels on the CPU)
ALIASING_VIEWS = frozenset({aten.view, aten._unsafe_view, aten.reshape, aten.permute, aten.t,
                            aten.transpose, aten.expand, aten.unsqueeze, aten.squeeze,
                            aten.slice, aten.select, aten.alias, aten.diagonal, aten.as_strided})
LIBRARY_CALLS = frozenset({aten.mm, aten.addmm, aten.bmm, aten.baddbmm, aten.convolution})


def nothing_to_fuse(graph) -> bool:
    """Whether every call of an fx graph is a library call or an aliasing view: Inductor's
    compile of it makes the same library calls, only through its own wrapper."""
    return all(getattr(n.target, "overloadpacket", None) in ALIASING_VIEWS | LIBRARY_CALLS
               for n in graph.nodes if n.op == "call_function")


def row(target):
    """The row for an fx node's target (an ATen ``OpOverload``), or None."""
    packet = getattr(target, "overloadpacket", None)
    return TABLE.get(packet) if packet is not None else None


def is_view(target) -> bool:
    return getattr(target, "overloadpacket", None) in VIEWS


def core_aten_ops() -> list[str]:
    """Every core ATen operator (overload packet) of this torch, by name."""
    names = set()
    for name in dir(aten):
        packet = getattr(aten, name)
        if isinstance(packet, torch._ops.OpOverloadPacket) and any(
                torch.Tag.core in getattr(packet, o).tags for o in packet.overloads()):
            names.add(str(packet))
    return sorted(names)


def translated_ops() -> list[str]:
    return sorted(str(p) for p in TABLE)
