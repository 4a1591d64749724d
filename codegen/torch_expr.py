"""FX nodes for a scope body: reads of sources, elementwise operators, axis alignment.

Every body sub-expression becomes a ``Value``: an FX proxy whose tensor has one axis per
iterator in ``labels`` (the iterators it depends on, and only those) -- the interpreter's
labelled arrays, as graph nodes. Operands are aligned by broadcasting: ``B[:, None]`` puts
``B[j]`` on the ``j`` axis of an ``(i, j, k)`` grid. Reads follow ``codegen.access`` plans:
slices and strided views cost nothing; gathers use index tensors, constants of the graph.

Operations on proxies record nodes (``torch.relu(x)``, ``x[:, None]``, ``a * b``); a Python
number stays a number until it meets a tensor, so constant sub-expressions fold here.
"""
from __future__ import annotations

import functools
import math
import operator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from codegen.access import (
    FlatRead, GatherRead, SliceRead, SplitRead, StridedRead, ZeroRead, plan_read,
)
from ir.interpreter import BINARY as NP_BINARY, UNARY as NP_UNARY
from ir.nodes import (
    COMPARISONS, Access, Binary, BinOp, Const, Expr, Scope, UnOp, Unary, selection,
)

ARITHMETIC = {BinOp.ADD: operator.add, BinOp.SUB: operator.sub, BinOp.MUL: operator.mul,
              BinOp.DIV: operator.truediv, BinOp.POW: torch.pow}
COMPARE = {BinOp.LT: operator.lt, BinOp.LE: operator.le, BinOp.GT: operator.gt,
           BinOp.GE: operator.ge, BinOp.EQ: operator.eq, BinOp.NE: operator.ne}
# (tensor-tensor function, tensor-number function)
EXTREMUM = {BinOp.MAX: (torch.maximum, torch.clamp_min),
            BinOp.MIN: (torch.minimum, torch.clamp_max)}
UNARY = {
    UnOp.NEG: operator.neg, UnOp.RELU: torch.relu, UnOp.EXP: torch.exp, UnOp.LOG: torch.log,
    UnOp.TANH: torch.tanh, UnOp.SIGMOID: torch.sigmoid, UnOp.SQRT: torch.sqrt,
    UnOp.ABS: torch.abs, UnOp.RECIP: torch.reciprocal, UnOp.ERF: torch.erf,
}


@dataclass(frozen=True, eq=False)  # a proxy's ``==`` records a node: compare by identity
class Value:
    x: Any                       # an FX proxy, or the Python number of a constant
    labels: tuple[str, ...]
    const: float | None = None   # the value, when ``x`` is a Python number
    fresh: bool = True           # False: a view of an input or of another scope's tensor
    view_of: Any = None          # for a non-overlapping view (slice, permute, reshape): its source
    boolean: bool = False        # a torch.bool tensor holding the IR's 1.0 / 0.0


def number(v: float) -> Value:
    return Value(float(v), (), const=float(v))


def aligned(v: Value, target: tuple[str, ...], full_rank: bool = False):
    """``v`` with its axes permuted to ``target``'s order and size-1 axes inserted for
    missing labels, so that it broadcasts against a tensor with axes ``target``.
    Leading size-1 axes are left to broadcasting unless ``full_rank``."""
    if not v.labels and not (full_rank and target):
        return v.x
    order = [n for n in target if n in v.labels]
    assert len(order) == len(v.labels), f"{v.labels} not within {target}"
    x = permuted(v.x, [v.labels.index(n) for n in order])
    first = 0 if full_rank or not order else target.index(order[0])
    index = [slice(None) if n in v.labels else None for n in target[first:]]
    while index and index[-1] == slice(None):
        index.pop()
    return x[tuple(index)] if index else x


def permuted(x, perm):
    """``x``'s axes in order ``perm``: ``t()`` / ``transpose(-2, -1)`` for a swap of the
    last two."""
    perm = list(perm)
    if perm == list(range(len(perm))):
        return x
    if perm == list(range(len(perm) - 2)) + [len(perm) - 1, len(perm) - 2]:
        return x.t() if len(perm) == 2 else x.transpose(-2, -1)
    return x.permute(*perm)


class BodyEmitter:
    """Records the nodes computing a scope's body sub-expressions as ``Value``s.

    When the scope is chunked over summation iterator ``chunk = (name, start, size)``, every
    value is restricted to that chunk; views of whole sources are recorded once per kernel
    (``KernelWriter.view``) and shared by the chunks.
    """

    def __init__(self, kernel, scope: Scope, chunk: tuple[str, int, int] | None = None):
        self.kernel = kernel  # the kernel writer: sources, index tensors, shared views
        self.ranges = {it.name: (it.lo, it.hi) for it in scope.traversal + scope.summation}
        self.grid = tuple(self.ranges)
        self.chunk = chunk
        self._memo: dict[Expr, Value] = {}  # a sub-expression used twice is one node

    def extent(self, name: str) -> int:
        lo, hi = self.ranges[name]
        return hi - lo

    def numeric(self, v: Value) -> Value:
        """``v`` as numbers: a bool tensor (a comparison) converted to the inputs' dtype."""
        if not v.boolean:
            return v
        return Value(v.x.to(self.kernel.number_dtype()), v.labels)

    def condition(self, v: Value):
        """A bool tensor that holds where ``v`` is non-zero."""
        return v.x if v.boolean else v.x != 0

    # -- expressions ------------------------------------------------------------------------
    def value(self, e: Expr) -> Value:
        if e not in self._memo:
            self._memo[e] = self._value(e)
        return self._memo[e]

    def _value(self, e: Expr) -> Value:
        if isinstance(e, Const):
            return number(e.value)
        if isinstance(e, Access):
            return self.read(e)
        picked = selection(e)
        if picked is not None:
            return self.select(*(self.value(x) for x in picked))
        if isinstance(e, Unary):
            return self.unary(e.op, self.value(e.x))
        if isinstance(e, Binary):
            return self.binary(e.op, self.value(e.lhs), self.value(e.rhs))
        raise TypeError(f"cannot lower {type(e).__name__} inside a scope body")

    def unary(self, op: UnOp, x: Value) -> Value:
        if x.const is not None:
            return number(float(NP_UNARY[op](np.float64(x.const))))
        x = self.numeric(x)
        return Value(UNARY[op](x.x), x.labels)

    def binary(self, op: BinOp, a: Value, b: Value) -> Value:
        if a.const is not None and b.const is not None:
            return number(float(NP_BINARY[op](np.float64(a.const), np.float64(b.const))))
        if op is BinOp.MASK:
            return self.select(a, b, number(0.0))
        a, b = self.numeric(a), self.numeric(b)
        labels = tuple(n for n in self.grid if n in a.labels or n in b.labels)
        lhs, rhs = aligned(a, labels), aligned(b, labels)
        if op in COMPARISONS:
            return Value(COMPARE[op](lhs, rhs), labels, boolean=True)
        if op in EXTREMUM:
            both, one = EXTREMUM[op]
            if b.const is not None or a.const is not None:  # torch.maximum needs two tensors
                tensor, num = (lhs, rhs) if b.const is not None else (rhs, lhs)
                return Value(one(tensor, num), labels)
            return Value(both(lhs, rhs), labels)
        return Value(ARITHMETIC[op](lhs, rhs), labels)

    def select(self, c: Value, a: Value, b: Value) -> Value:
        """``where(c, a, b)``: torch.where, a number branch kept in the tensors' dtype."""
        if c.const is not None:
            return a if c.const != 0 else b
        a, b = self.numeric(a), self.numeric(b)
        labels = tuple(n for n in self.grid if n in c.labels + a.labels + b.labels)
        if a.const is not None and b.const is not None:  # torch.where would make float32
            a = Value(self.kernel.number_ref().new_tensor(a.const), ())
        cond = Value(self.condition(c), c.labels)
        return Value(torch.where(*(aligned(v, labels) for v in (cond, a, b))), labels)

    # -- reads ------------------------------------------------------------------------------
    def read(self, a: Access) -> Value:
        v = self._read(a)
        if v.const is None and self.kernel.holds_bool(a.source):  # a bool input, a comparison
            v = Value(v.x, v.labels, fresh=v.fresh, view_of=v.view_of, boolean=True)
        return v

    def _read(self, a: Access) -> Value:
        src = a.source
        plan = plan_read(a, self.ranges, self.grid)
        if isinstance(plan, ZeroRead):
            return number(0.0)
        if isinstance(plan, GatherRead):
            return self._gather(src, plan)
        if isinstance(plan, SplitRead):
            return self.in_chunk(self._merged(self._view(src, plan.inner), plan.merges))
        return self.in_chunk(self._view(src, plan))

    def _view(self, src, plan) -> Value:
        if isinstance(plan, SliceRead):
            return self._slice(src, plan)
        if isinstance(plan, StridedRead):
            return self._strided(src, plan)
        return self._flat(src, plan, math.prod(src.shape))

    @staticmethod
    def _merged(v: Value, merges) -> Value:
        """``v`` with each iterator's two digit axes (high, low) merged into its one axis; a
        digit it does not read is broadcast first."""
        x, labels = v.x, list(v.labels)
        for label, (high, highs), (low, lows) in merges:
            for digit, extent, other, after in ((high, highs, low, 0), (low, lows, high, 1)):
                if digit not in labels:
                    at = labels.index(other) + after
                    sizes = [-1] * (len(labels) + 1)
                    sizes[at] = extent
                    x = x.unsqueeze(at).expand(*sizes)
                    labels.insert(at, digit)
            order = [n for n in labels if n != low]
            order.insert(order.index(high) + 1, low)
            x = x.permute([labels.index(n) for n in order])
            at = order.index(high)
            x, labels = x.flatten(at, at + 1), order[:at] + [label] + order[at + 2:]
        return Value(x, tuple(labels))

    def in_chunk(self, v: Value) -> Value:
        """``v`` restricted to the current chunk of the chunk iterator, if it has that axis."""
        if self.chunk is None or self.chunk[0] not in v.labels:
            return v
        name, start, size = self.chunk
        index = (slice(None),) * v.labels.index(name) + (slice(start, start + size),)
        return Value(v.x[index], v.labels, fresh=v.fresh, view_of=v.view_of)

    def _window(self, x, windows, select=None):
        """``x`` sliced (and ``select``ed) to the windows, then zero-padded: (x, padded)."""
        select = select or (None,) * len(windows)
        index = []
        for w, sel in zip(windows, select):
            lo, hi = w.slice
            index.append(lo + sel if sel is not None else
                         slice(None) if (lo, hi) == (0, w.size) else slice(lo, hi))
        while index and index[-1] == slice(None):
            index.pop()
        if index:
            x = x[tuple(index)]
        pads = [w.pad for w, sel in zip(windows, select) if sel is None]
        padded = [d for d, p in enumerate(pads) if p != (0, 0)]
        if not padded:
            return x, False
        return F.pad(x, [n for p in reversed(pads[padded[0]:]) for n in p]), True

    def _flipped(self, src, flips: tuple[int, ...]):
        x = self.kernel.source_node(src)
        if not flips:
            return x
        return self.kernel.view(("flip", src, flips), lambda: x.flip(*flips))

    def _slice(self, src, plan: SliceRead) -> Value:
        base = self._flipped(src, plan.flips)
        key = ("window", src, plan.flips, plan.windows, plan.select)
        x, padded = self.kernel.view(key, lambda: self._window(base, plan.windows, plan.select))
        if padded:
            return Value(x, plan.labels)
        return Value(x, plan.labels, fresh=False, view_of=src)

    def _strided(self, src, plan: StridedRead) -> Value:
        def view():
            base, _ = self._window(self._flipped(src, plan.flips), plan.windows)
            stride = base.stride()
            strides = tuple(_total([stride[d] if c == 1 else c * stride[d]
                                    for d, c in enumerate(cs) if c]) for cs in plan.coeffs)
            return base.as_strided(plan.sizes, strides, base.storage_offset())
        x = self.kernel.view(("strided", src, plan.flips, plan.windows, plan.sizes, plan.coeffs),
                             view)
        return Value(x, plan.labels, fresh=False)

    def _flat(self, src, plan: FlatRead, numel: int) -> Value:
        x = self.kernel.source_node(src)
        row_major = [math.prod(plan.sizes[d + 1:]) for d in range(len(plan.sizes))]
        if plan.offset == 0 and math.prod(plan.sizes) == numel and all(
                st == rm for st, rm, n in zip(plan.strides, row_major, plan.sizes) if n > 1):
            return Value(x.reshape(plan.sizes), plan.labels, fresh=False, view_of=src)

        def view():
            base = x.contiguous()
            offset = base.storage_offset()
            return base.as_strided(plan.sizes, plan.strides,
                                   offset + plan.offset if plan.offset else offset)
        x = self.kernel.view(("flat", src, plan.sizes, plan.strides, plan.offset), view)
        return Value(x, plan.labels, fresh=False)

    def _gather(self, src, plan: GatherRead) -> Value:
        name = src.name or "t"
        index = tuple(self._index(f"{name}_pos{d}", p, plan.labels)
                      for d, p in enumerate(plan.positions))
        x = self.kernel.source_node(src)[index]
        if plan.mask is not None:
            x = torch.where(self._index(f"{name}_ok", plan.mask, plan.labels), x, 0.0)
        return Value(x, plan.labels)

    def _index(self, hint: str, array: np.ndarray, labels: tuple[str, ...]):
        """An index tensor (a constant of the graph), restricted to the current chunk."""
        v = Value(self.kernel.index_tensor(hint, array), labels)
        if self.chunk is not None and self.chunk[0] in labels \
                and array.shape[labels.index(self.chunk[0])] > 1:
            return self.in_chunk(v).x
        return v.x


def _total(terms: list):
    """The sum of ``terms`` (0 for none), without a leading ``0 +`` node."""
    return functools.reduce(operator.add, terms) if terms else 0
