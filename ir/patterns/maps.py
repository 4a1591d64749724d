"""Elementwise maps, reductions, and the softmax chain of scopes.

A read is *plain* when every dim of its source is read whole by one iterator (position
``it``, extent = size) or, for a size-1 dim, at 0 (a broadcast); dims may be permuted. A
scope without summation over plain reads is elementwise; with summation it is a reduction,
unless it sums a product of two or more factors varying along the summation (a
contraction). Anything that re-indexes (offsets, strides, floor/mod, padding) is not.

``match_prefix_sum`` recognises a running sum, ``out[t] = sum[r] x[t - r]`` (``ir.ops.cumsum``:
the reads before the start are 0).

``match_softmax`` recognises the chain ``ir.ops.softmax`` / ``log_softmax`` build -- a max
scope, an exp scope, a sum scope and the root -- by its structure.
"""
from __future__ import annotations

from dataclasses import dataclass

from ir.nodes import (
    Access, Binary, BinOp, Expr, Reduce, Scope, Tensor, UnOp, Unary, free_iterators, walk,
)
from ir.patterns.table import IteratorTable, iterator_table, product_terms


@dataclass(frozen=True)
class ElementwiseMatch:
    operands: tuple[Access, ...]               # every read, in body order
    dims: tuple[tuple[str | None, ...], ...]   # per read, per source dim: its iterator, or
                                               # None for a size-1 dim read at 0 (broadcast)
    ops: tuple[str, ...]                       # the body's operators, pre-order ("exp", "-", ...)

    @property
    def layout_only(self) -> bool:
        """A lone read: a copy, transpose or broadcast (data movement, no arithmetic)."""
        return not self.ops and len(self.operands) == 1


@dataclass(frozen=True)
class ReductionMatch:
    reduce: Reduce
    axes: tuple[str, ...]                      # reduced (summation) iterators
    kept: tuple[str, ...]                      # traversal iterators
    operands: tuple[Access, ...]
    dims: tuple[tuple[str | None, ...], ...]
    ops: tuple[str, ...]


@dataclass(frozen=True)
class SoftmaxMatch:
    kind: str                   # "softmax" or "log_softmax"
    source: Tensor | Scope      # the input x
    dim: int
    fused: tuple[Scope, ...]    # the chain's inner scopes: max, exp, sum


@dataclass(frozen=True)
class PrefixSumMatch:
    """``out[.., t, ..] = sum[r] x[.., t - r, ..]``, ``r`` over at least ``t``'s range: the
    first ``length`` entries of ``torch.cumsum(x, dim)``."""
    source: Tensor | Scope
    dim: int                    # the source dim accumulated along
    length: int                 # t's extent (at most that dim's size)
    out_dims: tuple[int, ...]   # per traversal iterator, the source dim it reads


def match_prefix_sum(scope: Scope) -> PrefixSumMatch | None:
    """A sum of one read at ``t - r`` along one dim (``r`` the only summation iterator, from
    0, over at least ``t``'s extent) and whole by the other traversal iterators, or None."""
    if scope.reduce is not Reduce.SUM or len(scope.summation) != 1 or \
            not isinstance(scope.body, Access) or scope.summation[0].lo != 0:
        return None
    (shift,) = scope.summation
    read, size = scope.body, scope.body.source.shape
    by_symbol = {it.symbol: it for it in scope.traversal}
    if any(it.lo != 0 for it in scope.traversal) or read.source.rank != len(by_symbol):
        return None
    out_dims: dict[str, int] = {}
    dim = length = None
    for d, index in enumerate(read.indices):
        it = by_symbol.get(index)
        if it is None and dim is None:  # the accumulated dim: t - r
            dim, it = d, by_symbol.get(index + shift.symbol)
            if it is None or shift.extent < it.extent or it.extent > size[d]:
                return None
            length = it.extent
        elif it is None or it.extent != size[d]:
            return None
        if it.name in out_dims:
            return None
        out_dims[it.name] = d
    if dim is None:
        return None
    return PrefixSumMatch(read.source, dim, length,
                          tuple(out_dims[it.name] for it in scope.traversal))


def plain_dims(t: IteratorTable) -> tuple[tuple[str | None, ...], ...] | None:
    """Per access of a table: the iterator reading each dim whole, None at a size-1 dim read
    at 0; None overall if some read re-indexes its source."""
    out = []
    for k, access in enumerate(t.accesses):
        dims = []
        for d, a in enumerate(t.affine[k]):
            it = t.whole(k, d)
            if it is None and not (a is not None and not a.terms and a.const == 0
                                   and access.source.shape[d] == 1):
                return None
            dims.append(it)
        named = [n for n in dims if n is not None]
        if len(set(named)) != len(named):
            return None
        out.append(tuple(dims))
    return tuple(out)


def _ops(body: Expr) -> tuple[str, ...]:
    return tuple(n.op.value for n in walk(body) if isinstance(n, (Unary, Binary)))


def match_elementwise(scope: Scope) -> ElementwiseMatch | None:
    """A scope without summation whose reads are all plain, or None."""
    if scope.summation:
        return None
    t = iterator_table(scope)
    dims = plain_dims(t)
    return None if dims is None else ElementwiseMatch(t.accesses, dims, _ops(scope.body))


def match_reduction(scope: Scope) -> ReductionMatch | None:
    """A sum / max / min over plain reads that is not a contraction, or None."""
    if not scope.summation:
        return None
    t = iterator_table(scope)
    dims = plain_dims(t)
    if dims is None:
        return None
    if scope.reduce is Reduce.SUM:
        reads, _, other = product_terms(scope.body)
        summed = set(t.summation)
        if sum(bool(free_iterators(f) & summed) for f in reads + other) > 1:
            return None
    return ReductionMatch(scope.reduce, t.summation, t.traversal, t.accesses, dims,
                          _ops(scope.body))


# -- softmax ---------------------------------------------------------------------------------
def _reads_at(scope: Scope, access: int, want: list[str | None]) -> bool:
    """Whether ``access`` (position in ``scope``'s table) reads dim ``d`` whole by ``want[d]``,
    or at 0 where ``want[d]`` is None."""
    t = iterator_table(scope)
    if t.accesses[access].source.rank != len(want):
        return False
    for d, name in enumerate(want):
        a = t.affine[access][d]
        if name is None and not (a is not None and not a.terms and a.const == 0):
            return False
        if name is not None and t.whole(access, d) != name:
            return False
    return True


def _keepdim_reduction(s, reduce: Reduce, source, shape: tuple[int, ...]) -> int | None:
    """The dim along which ``s`` is a keepdim ``reduce`` of ``source`` (of ``shape``), or None."""
    if not isinstance(s, Scope) or s.reduce is not reduce or len(s.summation) != 1 or \
            not isinstance(s.body, Access) or s.body.source != source or len(s.shape) != len(shape):
        return None
    uses = iterator_table(s).row(s.summation[0].name).uses
    if len(uses) != 1:
        return None
    d = uses[0].dim
    if s.shape[d] != 1 or any(a != b for k, (a, b) in enumerate(zip(s.shape, shape)) if k != d):
        return None
    names = [it.name for it in s.traversal]
    names[d] = s.summation[0].name
    return d if _reads_at(s, 0, names) else None


def match_softmax(root: Scope) -> SoftmaxMatch | None:
    """``root`` as the last scope of a softmax / log_softmax chain over one dim, or None."""
    body = root.body
    if root.summation or not root.traversal:
        return None
    if isinstance(body, Binary) and body.op is BinOp.DIV and \
            isinstance(body.lhs, Access) and isinstance(body.rhs, Access):
        kind, e_read, s_read, x_read = "softmax", body.lhs, body.rhs, None
    elif isinstance(body, Binary) and body.op is BinOp.SUB and isinstance(body.lhs, Binary) \
            and body.lhs.op is BinOp.SUB and isinstance(body.rhs, Unary) \
            and body.rhs.op is UnOp.LOG and isinstance(body.rhs.x, Access):
        kind, s_read, x_read = "log_softmax", body.rhs.x, body.lhs
        e_read = None
    else:
        return None
    total = s_read.source
    if not isinstance(total, Scope) or not isinstance(total.body, Access):
        return None
    exp = total.body.source
    if not isinstance(exp, Scope) or exp.summation or exp.shape != root.shape or \
            (e_read is not None and e_read.source != exp):
        return None
    shifted = exp.body.x if isinstance(exp.body, Unary) and exp.body.op is UnOp.EXP else None
    if not (isinstance(shifted, Binary) and shifted.op is BinOp.SUB
            and isinstance(shifted.lhs, Access) and isinstance(shifted.rhs, Access)):
        return None
    x, mx = shifted.lhs.source, shifted.rhs.source
    d = _keepdim_reduction(total, Reduce.SUM, exp, root.shape)
    if d is None or _keepdim_reduction(mx, Reduce.MAX, x, root.shape) != d:
        return None
    names = [it.name for it in root.traversal]
    at0 = [None if k == d else n for k, n in enumerate(names)]
    exp_names = [it.name for it in exp.traversal]
    exp_at0 = [None if k == d else n for k, n in enumerate(exp_names)]
    if not (_reads_at(exp, 0, exp_names) and _reads_at(exp, 1, exp_at0)):
        return None
    if kind == "softmax":
        if not (_reads_at(root, 0, names) and _reads_at(root, 1, at0)):
            return None
    elif not (x_read.lhs.source == x and _reads_at(root, 0, names)
              and x_read.rhs.source == mx and _reads_at(root, 1, at0)
              and _reads_at(root, 2, at0)):
        return None
    if x.shape != root.shape:
        return None
    return SoftmaxMatch(kind, x, d, (mx, exp, total))
