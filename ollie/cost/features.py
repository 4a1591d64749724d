"""Numeric features of a candidate program, for the learned cost model.

A program is a tree of scopes; each scope is (roughly) one kernel. Per scope we read off its
structure -- never its values:

- *kind*: ``contraction`` (a sum of products of two or more reads: matmul, conv, einsum),
  ``reduction`` (a sum / max / min of one read), ``elementwise`` (no summation, every index
  a plain iterator or a constant), ``gather`` (no summation, shifted / strided / floor-div /
  mod indices: the memory-bound eOperators: pad, slice, unfold, reshape, upsampling);
- flops (one per body operator per grid point, plus the accumulation; a product of three or
  more factors counts its pairwise contractions, as it runs), bytes read (the
  distinct elements each read can touch) and written, arithmetic intensity;
- iterator extents (log2): output size, summation size, innermost output extent;
- the stride of the innermost output iterator in each read's row-major layout: contiguous (1),
  broadcast (0), strided, or irregular (floor-div / mod) -- weighted by bytes; likewise for
  the innermost summation iterator.

A program's vector aggregates its scopes (counts, sums and maxima per kind) and adds
program-wide totals: number of scopes, intermediate bytes, input and output bytes.
``program_features(scope)`` returns a fixed-length float vector; ``FEATURE_NAMES`` names it.
``own_only=True`` gives the features of one scope alone, reading its sources as inputs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import sympy

from ir.nodes import (
    Access, Binary, BinOp, Const, Reduce, Scope, Tensor, UnOp, Unary, accesses, free_iterators,
    sub_scopes, walk,
)

FEATURE_VERSION = 3
KINDS = ("contraction", "reduction", "elementwise", "gather")
SPECIAL = frozenset({UnOp.EXP, UnOp.LOG, UnOp.TANH, UnOp.SIGMOID, UnOp.SQRT, UnOp.RECIP,
                     UnOp.ERF, BinOp.POW})
DTYPE_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8,
               "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1}


@dataclass(frozen=True)
class ScopeFeatures:
    kind: str
    flops: float
    special_flops: float      # transcendental operations (exp, log, tanh, ...)
    bytes_read: float
    bytes_written: float
    out_elems: float
    sum_elems: float          # product of summation extents (1 without summation)
    inner_extent: int         # extent of the innermost output iterator (1 for a scalar)
    read_space: float         # sum over reads of the iteration space each one spans
    gather_space: float       # the same over floor-div / mod reads (index tables, gathers)
    n_reads: int
    n_iters: int
    windowed: bool            # some index adds two iterators (a conv window)
    stride_mix: tuple[float, float, float, float]  # contiguous/broadcast/strided/irregular
    reduce_contiguous: float  # share of read bytes contiguous along the innermost sum iterator

    @property
    def bytes(self) -> float:
        return self.bytes_read + self.bytes_written

    @property
    def intensity(self) -> float:
        return self.flops / max(self.bytes, 1.0)


def _numel(shape) -> int:
    return int(np.prod(shape, dtype=np.float64)) if len(shape) else 1


def _itemsize(dtype: str) -> int:
    return DTYPE_BYTES.get(str(dtype), 4)


def _has_product_of_reads(body) -> bool:
    for n in walk(body):
        if isinstance(n, Binary) and n.op is BinOp.MUL and accesses(n.lhs) and accesses(n.rhs):
            return True
    return False


def _factors(e) -> list:
    if isinstance(e, Binary) and e.op is BinOp.MUL:
        return _factors(e.lhs) + _factors(e.rhs)
    return [] if isinstance(e, Const) else [e]


def _pairwise_flops(s: Scope, extents: dict[str, int]) -> float | None:
    """Flops of a sum of a product of three or more factors contracted pair by pair, left
    to right (as ``torch.einsum`` does), summing out an iterator once no later factor and
    not the output uses it -- far fewer than the nominal points x factors."""
    factors = _factors(s.body) if s.summation and s.reduce is Reduce.SUM else []
    if len(factors) < 3:
        return None
    labels = [free_iterators(f) for f in factors]
    size = lambda names: float(_numel([extents.get(n, 1) for n in names]))  # noqa: E731
    out = {it.name for it in s.traversal}
    total = sum(size(lab) * sum(isinstance(n, (Binary, Unary)) for n in walk(f))
                for f, lab in zip(factors, labels))  # work inside the factors
    acc = labels[0]
    for k, lab in enumerate(labels[1:], 1):
        both = acc | lab
        total += 2 * size(both)
        acc = both & out.union(*labels[k + 1:])
    return total


def _plain(index: sympy.Expr) -> bool:
    return bool(index.is_Symbol or index.is_Integer)


def _irregular(index: sympy.Expr) -> bool:
    return bool(index.atoms(sympy.floor, sympy.ceiling, sympy.Mod))


def _stride(a: Access, sym: sympy.Symbol) -> float | None:
    """Row-major element stride of iterator ``sym`` in read ``a``; None when irregular."""
    shape = a.source.shape
    stride, total = 1, 0
    for d in range(len(shape) - 1, -1, -1):
        idx = a.indices[d]
        if sym in idx.free_symbols:
            if _irregular(idx):
                return None
            coef = sympy.diff(idx, sym)
            if not coef.is_Integer:
                return None
            total += int(coef) * stride
        stride *= max(int(shape[d]), 1)
    return float(total)


def _stride_class(s: float | None) -> int:
    if s is None:
        return 3
    return 0 if abs(s) == 1 else 1 if s == 0 else 2


@lru_cache(maxsize=4096)
def scope_features(s: Scope) -> ScopeFeatures:
    """The features of one scope's own work (the scopes it reads count as inputs)."""
    extents = {it.name: max(it.extent, 0) for it in s.traversal + s.summation}
    out_elems = float(_numel([it.extent for it in s.traversal]))
    sum_elems = float(_numel([it.extent for it in s.summation]))
    points = out_elems * sum_elems
    nodes = list(walk(s.body))
    ops = sum(isinstance(n, (Binary, Unary)) for n in nodes)
    special = sum(isinstance(n, (Unary, Binary)) and n.op in SPECIAL for n in nodes)
    flops = points * (ops + (1 if s.summation else 0))
    pairwise = _pairwise_flops(s, extents)
    if pairwise is not None:
        flops = min(flops, pairwise)
    reads = list(dict.fromkeys(a for a in nodes if isinstance(a, Access)))
    inner_t = s.traversal[-1].symbol if s.traversal else None
    inner_s = s.summation[-1].symbol if s.summation else None
    bytes_read, mix, red_contig, read_space, gather_space = 0.0, np.zeros(4), 0.0, 0.0, 0.0
    windowed = irregular = shifted = False
    for a in reads:
        used = set().union(*(i.free_symbols for i in a.indices)) if a.indices else set()
        space = float(_numel([extents.get(u.name, 1) for u in used]))
        touched = min(float(_numel(a.source.shape)), space)
        read_space += space
        if any(_irregular(i) for i in a.indices):
            gather_space += space
        nbytes = touched * _itemsize(a.source.dtype)
        bytes_read += nbytes
        for idx in a.indices:
            windowed |= len(idx.free_symbols) >= 2
            irregular |= _irregular(idx)
            shifted |= not _plain(idx)
        if inner_t is not None:
            mix[_stride_class(_stride(a, inner_t))] += nbytes
        else:
            mix[1] += nbytes
        if inner_s is not None and _stride_class(_stride(a, inner_s)) == 0:
            red_contig += nbytes
    mix = mix / max(bytes_read, 1.0)
    if s.summation:
        kind = "contraction" if _has_product_of_reads(s.body) else "reduction"
    else:
        kind = "gather" if (irregular or windowed or shifted) else "elementwise"
    return ScopeFeatures(
        kind=kind, flops=flops, special_flops=points * special, bytes_read=bytes_read,
        bytes_written=out_elems * _itemsize(s.dtype), out_elems=out_elems, sum_elems=sum_elems,
        inner_extent=s.traversal[-1].extent if s.traversal else 1, read_space=read_space,
        gather_space=gather_space, n_reads=len(reads),
        n_iters=len(extents), windowed=windowed, stride_mix=tuple(float(m) for m in mix),
        reduce_contiguous=red_contig / max(bytes_read, 1.0) if s.summation else 0.0)


# -- the program vector -------------------------------------------------------------------------
_PER_KIND = ("count", "log_flops", "log_bytes", "log_max_flops", "log_max_out", "log_max_sum")
_GLOBAL = (
    "n_scopes", "log_flops", "log_bytes", "log_intensity", "log_max_flops", "log_max_bytes",
    "log_special_flops", "log_read_space", "log_gather_space", "log_intermediate_bytes", "log_input_bytes", "log_output_bytes",
    "max_reads", "max_iters", "n_windowed", "log_min_inner_extent", "contiguous_share",
    "broadcast_share", "strided_share", "irregular_share", "reduce_contiguous_share",
    "top_is_contraction", "top_log_intensity",
)
FEATURE_NAMES: tuple[str, ...] = _GLOBAL + tuple(
    f"{k}_{f}" for k in KINDS for f in _PER_KIND)


def _lg(x: float) -> float:
    return math.log2(1.0 + max(float(x), 0.0))


def program_features(root: Scope, own_only: bool = False) -> np.ndarray:
    """Fixed-length vector (``len(FEATURE_NAMES)``) describing the program rooted at ``root``."""
    return _program_features(root, own_only).copy()


@lru_cache(maxsize=4096)
def _program_features(root: Scope, own_only: bool) -> np.ndarray:
    scopes = [root] if own_only else sub_scopes(root)
    feats = [scope_features(s) for s in scopes]
    total_bytes = sum(f.bytes for f in feats)
    read_bytes = max(sum(f.bytes_read for f in feats), 1.0)
    mix = sum(np.array(f.stride_mix) * f.bytes_read for f in feats) / read_bytes
    red = sum(f.reduce_contiguous * f.bytes_read for f in feats) / read_bytes
    inputs: dict[str, Tensor] = {}
    for s in scopes:
        for a in accesses(s.body):
            src = a.source
            if isinstance(src, Tensor) or (own_only and isinstance(src, Scope)):
                inputs.setdefault(src.name if isinstance(src, Tensor) else id(src), src)
    top = max(feats, key=lambda f: f.flops)
    g = {
        "n_scopes": len(feats),
        "log_flops": _lg(sum(f.flops for f in feats)),
        "log_bytes": _lg(total_bytes),
        "log_intensity": math.log2((1 + sum(f.flops for f in feats)) / (1 + total_bytes)),
        "log_max_flops": _lg(top.flops),
        "log_max_bytes": _lg(max(f.bytes for f in feats)),
        "log_special_flops": _lg(sum(f.special_flops for f in feats)),
        "log_read_space": _lg(sum(f.read_space for f in feats)),
        "log_gather_space": _lg(sum(f.gather_space for f in feats)),
        "log_intermediate_bytes": _lg(sum(f.bytes_written for f in feats[:-1])),
        "log_input_bytes": _lg(sum(_numel(t.shape) * _itemsize(t.dtype)
                                   for t in inputs.values())),
        "log_output_bytes": _lg(feats[-1].bytes_written),
        "max_reads": max(f.n_reads for f in feats),
        "max_iters": max(f.n_iters for f in feats),
        "n_windowed": sum(f.windowed for f in feats),
        "log_min_inner_extent": math.log2(max(min(f.inner_extent for f in feats), 1)),
        "contiguous_share": mix[0], "broadcast_share": mix[1], "strided_share": mix[2],
        "irregular_share": mix[3], "reduce_contiguous_share": red,
        "top_is_contraction": float(top.kind == "contraction"),
        "top_log_intensity": math.log2(1 + top.intensity),
    }
    out = [float(g[n]) for n in _GLOBAL]
    for k in KINDS:
        fk = [f for f in feats if f.kind == k]
        out += [float(len(fk)),
                _lg(sum(f.flops for f in fk)),
                _lg(sum(f.bytes for f in fk)),
                _lg(max((f.flops for f in fk), default=0)),
                _lg(max((f.out_elems for f in fk), default=0)),
                _lg(max((f.sum_elems for f in fk), default=0))]
    vec = np.asarray(out, dtype=np.float64)
    assert vec.shape == (len(FEATURE_NAMES),), f"{vec.shape} vs {len(FEATURE_NAMES)} names"
    return np.nan_to_num(vec, nan=0.0, posinf=64.0, neginf=-64.0)


def standalone(s: Scope) -> Scope:
    """``s`` with every scope it reads replaced by an input tensor of that scope's shape
    (``s`` alone as one kernel: what ``own_only`` features describe)."""
    taken = {a.source.name for a in accesses(s.body) if isinstance(a.source, Tensor)}
    renamed: dict[int, Tensor] = {}

    def visit(e):
        if isinstance(e, Access):
            if not isinstance(e.source, Scope):
                return e
            src = e.source
            if id(src) not in renamed:
                n, base = 0, (src.name if src.name and src.name.isidentifier() else "t")
                name = base
                while name in taken:
                    n, name = n + 1, f"{base}{n + 1}"
                taken.add(name)
                renamed[id(src)] = Tensor(name, src.shape, src.dtype)
            shift = [idx - it.lo for idx, it in zip(e.indices, src.traversal)]
            return Access(renamed[id(src)], tuple(shift))
        if isinstance(e, Binary):
            return Binary(e.op, visit(e.lhs), visit(e.rhs))
        if isinstance(e, Unary):
            return Unary(e.op, visit(e.x))
        return e

    return Scope(s.traversal, s.summation, visit(s.body), s.reduce, name=s.name, dtype=s.dtype)


def kinds(root: Scope) -> list[str]:
    """The kind of each scope of the program, dependencies first."""
    return [scope_features(s).kind for s in sub_scopes(root)]
