"""Features of what a candidate runs: its lowering's ATen calls, with their shapes.

A program is lowered by codegen (the kernel measurement times) and called once on meta
tensors under a dispatch mode that records every ATen operator reaching the dispatcher. So
the features describe the library calls that really run -- ``torch.einsum("ik,ki->i")`` shows
up as a batched matmul of 1x1 results, a three-factor einsum as two matmuls and their
intermediate, a permuted operand as the copy it costs -- and lowering and features cannot
drift apart: there is one lowering.

Per call, its class (matmul, conv, softmax, reduction, copy, pointwise, view), flops and
bytes; per program, sums and maxima per class, the count of kernels launched (views are
free), the bytes of every intermediate, and torch's thread count (the model is trained at the
counts users run).
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

import ir

FEATURE_VERSION = 2
aten = torch.ops.aten

MATMUL = {aten.mm.default, aten.bmm.default, aten.addmm.default, aten.mv.default,
          aten.dot.default, aten.baddbmm.default, aten.addmv.default, aten.addbmm.default}
CONV = {aten.convolution.default}
SOFTMAX = {aten._softmax.default, aten._log_softmax.default, aten.logsumexp.default}
REDUCE = {"sum", "amax", "amin", "mean", "max", "min", "prod", "any", "all", "argmax",
          "argmin", "norm", "linalg_vector_norm"}
COPY = {"clone", "copy_", "_to_copy", "cat", "stack", "index", "gather", "index_select",
        "constant_pad_nd", "flip", "repeat", "zeros", "full", "empty", "new_zeros",
        "new_full", "new_empty", "zeros_like", "empty_like", "full_like", "scatter",
        "scatter_add", "index_put", "index_put_", "fill_", "zero_", "_unsafe_index",
        "tril", "triu", "diag_embed", "roll", "where"}
SPECIAL = {"exp", "log", "tanh", "sigmoid", "sqrt", "rsqrt", "erf", "pow", "log1p", "expm1",
           "reciprocal", "sin", "cos", "div"}
CACHED_BYTES = 2 << 20  # a call touching less stays in cache when a program runs again
TINY_BMM = 400  # torch's CPU bmm loops in place, no BLAS, below this m*n*k per matrix
CLASSES = ("matmul", "conv", "softmax", "reduce", "copy", "pointwise")
_PER_CLASS = ("calls", "log_elems", "log_bytes")
NAMES: tuple[str, ...] = (
    "threads", "kernels", "views", "log_matmul_flops", "log_matmul_matrices",
    "log_small_matmul_flops", "log_tiny_bmm_flops", "log_matvec_flops",
    "log_matmul_max_flops", "log_strided_matrices", "log_strided_matmul_bytes",
    "log_conv_flops", "pointwise_convs",
    "log_special_elems", "log_noncontiguous_bytes", "log_intermediate_bytes",
    "log_max_call_bytes", "log_input_bytes", "log_output_bytes", "log_total_bytes",
    "log_cached_bytes",
) + tuple(f"{c}_{f}" for c in CLASSES for f in _PER_CLASS)
_COL = {n: k for k, n in enumerate(NAMES)}


def _touched(t: torch.Tensor) -> int:
    """Elements a tensor's view can touch (a broadcast axis, stride 0, reads one)."""
    return math.prod(s for s, st in zip(t.shape, t.stride()) if st != 0) if t.dim() else 1


def _bytes(t: torch.Tensor) -> float:
    return float(_touched(t) * t.element_size())


class _Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls: list[tuple] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        flat_in = [a for a in torch.utils._pytree.tree_leaves((args, kwargs))
                   if isinstance(a, torch.Tensor)]
        flat_out = [o for o in torch.utils._pytree.tree_leaves(out)
                    if isinstance(o, torch.Tensor)]
        self.calls.append((func, flat_in, flat_out, args, kwargs or {}))
        return out


def _is_view(func, flat_in, flat_out) -> bool:
    if func._schema.is_mutable:
        return False
    return bool(func.is_view) if hasattr(func, "is_view") else any(
        a.alias_info is not None and not a.alias_info.is_write for a in func._schema.returns)


def _strided_operand(t: torch.Tensor) -> bool:
    """A matrix operand whose rows and columns both step through memory (no unit stride in
    its last two dims): BLAS cannot take it, the library loops or copies."""
    dims = [d for d in range(max(t.dim() - 2, 0), t.dim()) if t.shape[d] > 1]
    return bool(dims) and all(t.stride(d) != 1 for d in dims)


def _matmul_dims(func, flat_in, out) -> tuple[int, int, int, int]:
    """(batch, m, n, k) of a matrix-family call."""
    a = flat_in[-2] if func in (aten.addmm.default, aten.baddbmm.default,
                                aten.addmv.default, aten.addbmm.default) else flat_in[0]
    k = a.shape[-1] if a.dim() else 1
    if func in (aten.bmm.default, aten.baddbmm.default):
        return out.shape[0], out.shape[1], out.shape[2], k
    if func is aten.addbmm.default:
        return a.shape[0], out.shape[0], out.shape[1], k
    if func in (aten.mv.default, aten.addmv.default):
        return 1, out.shape[0], 1, k
    if func is aten.dot.default:
        return 1, 1, 1, k
    return 1, out.shape[0], out.shape[1], k


@lru_cache(maxsize=1024)
def _kernel(program: ir.Scope, fused: bool):
    import codegen
    return codegen.lower(program, backend="torch", fused=fused)


def work_key(program: ir.Scope, fused: bool = False) -> tuple:
    """The calls ``program``'s lowering makes, with their operands' shapes and strides:
    programs with the same key do the same work (extraction may find several spellings of
    one program)."""
    return tuple((str(func), tuple((tuple(t.shape), t.stride()) for t in ins))
                 for func, ins, outs, *_ in trace_calls(program, fused))


def operators(program: ir.Scope, fused: bool = False) -> frozenset[str]:
    """The ATen operators ``program``'s lowering calls (views aside)."""
    return frozenset(str(func) for func, ins, outs, *_ in trace_calls(program, fused)
                     if not _is_view(func, ins, outs))


@lru_cache(maxsize=1024)
def trace_calls(program: ir.Scope, fused: bool = False) -> list[tuple]:
    """The ATen calls of ``program``'s lowering (``codegen.lower``'s ``fused``: what the
    measurement times), run once on meta tensors: ``(operator, tensor inputs, tensor
    outputs, args, kwargs)`` each."""
    kernel = _kernel(program, fused)
    tensors = ir.inputs(program)
    args = [torch.empty(tensors[n].shape, device="meta",  # ir's dtypes are torch's names
                        dtype=getattr(torch, str(tensors[n].dtype), torch.float32))
            for n in kernel.input_names]
    with _Recorder() as rec, torch.no_grad():
        kernel(*args)
    return rec.calls


@lru_cache(maxsize=4096)
def _program_vector(program: ir.Scope, fused: bool) -> np.ndarray:
    acc = dict.fromkeys(NAMES, 0.0)
    per = {c: [0.0, 0.0, 0.0] for c in CLASSES}
    max_flops = max_bytes = 0.0
    inputs = ir.inputs(program)
    for func, flat_in, flat_out, args, kwargs in trace_calls(program, fused):
        if _is_view(func, flat_in, flat_out):
            acc["views"] += 1
            continue
        name = func._schema.name.split("::")[-1]
        out_elems = float(sum(o.numel() for o in flat_out))
        nbytes = sum(_bytes(t) for t in flat_in) + sum(_bytes(o) for o in flat_out)
        noncontig = sum(_bytes(t) for t in flat_in if t.dim() > 1 and not t.is_contiguous()
                        and _touched(t) == t.numel())
        if func in MATMUL:
            cls = "matmul"
            b, m, n, k = _matmul_dims(func, flat_in, flat_out[0])
            flops = 2.0 * b * m * n * k
            acc["log_matmul_flops"] += flops
            acc["log_matmul_matrices"] += b
            tiny = func in (aten.bmm.default, aten.baddbmm.default) and m * n * k < TINY_BMM
            if tiny:  # strides cost little there: no matrix is packed for BLAS
                acc["log_tiny_bmm_flops"] += flops
            elif min(m, n, k) < 16:
                acc["log_small_matmul_flops"] += flops
            if min(m, n) == 1:
                acc["log_matvec_flops"] += flops
            max_flops = max(max_flops, flops)
            strided = [t for t in flat_in if t.dim() >= 1 and _strided_operand(t)]
            if strided and not tiny:
                acc["log_strided_matrices"] += b
                acc["log_strided_matmul_bytes"] += sum(_bytes(t) for t in strided)
        elif func in CONV:
            cls = "conv"  # torch's own formula: transposed and grouped convolutions too
            acc["log_conv_flops"] += float(flop_registry[func.overloadpacket](
                *args, **kwargs, out_val=flat_out[0]))
            if math.prod(flat_in[1].shape[2:]) == 1:  # oneDNN runs 1x1 kernels its own way
                acc["pointwise_convs"] += 1
        elif func in SOFTMAX:
            cls = "softmax"
            acc["log_special_elems"] += out_elems
        elif name in REDUCE:
            cls = "reduce"
            out_elems = float(sum(t.numel() for t in flat_in[:1]))  # the elements reduced
        elif name in COPY:
            cls = "copy"
        else:
            cls = "pointwise"
            if name in SPECIAL:
                acc["log_special_elems"] += out_elems
        acc["kernels"] += 1
        acc["log_noncontiguous_bytes"] += noncontig
        acc["log_intermediate_bytes"] += sum(_bytes(o) for o in flat_out)
        acc["log_total_bytes"] += nbytes
        if nbytes <= CACHED_BYTES:
            acc["log_cached_bytes"] += nbytes
        max_bytes = max(max_bytes, nbytes)
        per[cls][0] += 1
        per[cls][1] += out_elems
        per[cls][2] += nbytes
    root_bytes = float(math.prod(program.shape) * 4)
    acc["log_intermediate_bytes"] = max(acc["log_intermediate_bytes"] - root_bytes, 0.0)
    acc["log_matmul_max_flops"] = max_flops
    acc["log_max_call_bytes"] = max_bytes
    acc["log_input_bytes"] = float(sum(math.prod(t.shape) * 4 for t in inputs.values()))
    acc["log_output_bytes"] = root_bytes
    for c in CLASSES:
        acc[f"{c}_calls"], acc[f"{c}_log_elems"], acc[f"{c}_log_bytes"] = per[c]
    vec = np.asarray([_lg(acc[n]) if n.startswith("log_") or "_log_" in n else acc[n]
                      for n in NAMES], dtype=np.float64)
    return vec


def _lg(x: float) -> float:
    return math.log2(1.0 + max(float(x), 0.0))


def program_features(program: ir.Scope, threads: int | None = None,
                     fused: bool = False) -> np.ndarray:
    """``len(NAMES)`` floats describing ``program``'s lowering at ``threads`` (default:
    torch's current count)."""
    vec = _program_vector(program, fused).copy()
    vec[_COL["threads"]] = float(threads or torch.get_num_threads())
    return vec


def column(name: str) -> int:
    return _COL[name]
