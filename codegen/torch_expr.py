"""Torch code for a scope body: reads of sources, elementwise operators, axis alignment.

Every body sub-expression becomes a ``Value``: a Python expression whose tensor has one axis
per iterator in ``labels`` (the iterators it depends on, and only those) -- the interpreter's
labelled arrays, as code. Operands are aligned by broadcasting: ``B[:, None]`` puts ``B[j]``
on the ``j`` axis of an ``(i, j, k)`` grid. Reads follow ``codegen.access`` plans: slices and
strided views cost nothing; gathers use index tensors from the kernel's index table ``ix``.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

from codegen.access import (
    FlatRead, GatherRead, SliceRead, StridedRead, ZeroRead, plan_read,
)
from ir.interpreter import BINARY as NP_BINARY, UNARY as NP_UNARY
from ir.nodes import (
    COMPARISONS, Access, Binary, BinOp, Const, Expr, Scope, UnOp, Unary, selection, walk,
)

ATOM, UNARY_MINUS, PRODUCT, SUM, COMPARE = 9, 3, 2, 1, 0  # precedence of the outermost operator

INFIX = {BinOp.ADD: ("+", SUM), BinOp.SUB: ("-", SUM), BinOp.MUL: ("*", PRODUCT),
         BinOp.DIV: ("/", PRODUCT)}
# (tensor-tensor function, tensor-number function)
EXTREMUM = {BinOp.MAX: ("torch.maximum", "torch.clamp_min"),
            BinOp.MIN: ("torch.minimum", "torch.clamp_max")}
# binary functions that take a tensor or a Python number on either side
FUNCTION = {BinOp.POW: "torch.pow"}
COMPARE_SYMBOL = {BinOp.LT: "<", BinOp.LE: "<=", BinOp.GT: ">", BinOp.GE: ">=", BinOp.EQ: "==",
                  BinOp.NE: "!="}
UNARY = {
    UnOp.RELU: "torch.relu({})", UnOp.EXP: "torch.exp({})", UnOp.LOG: "torch.log({})",
    UnOp.TANH: "torch.tanh({})", UnOp.SIGMOID: "torch.sigmoid({})",
    UnOp.SQRT: "torch.sqrt({})",
    UnOp.ABS: "torch.abs({})", UnOp.RECIP: "torch.reciprocal({})", UnOp.ERF: "torch.erf({})",
}
HOIST_WIDTH = 72  # a longer expression becomes a temporary of its own


@dataclass(frozen=True)
class Value:
    code: str
    labels: tuple[str, ...]
    prec: int = ATOM
    const: float | None = None  # the value, when the code is a Python number
    fresh: bool = True          # False: a view of an input or of another scope's tensor
    view_of: str | None = None  # for a non-overlapping view (slice, permute, reshape): its base
    boolean: bool = False       # a torch.bool tensor holding the IR's 1.0 / 0.0

    @property
    def atom(self) -> str:
        """The code, parenthesized unless a suffix (``[...]``, ``.f()``) can follow it."""
        return self.code if self.prec == ATOM else f"({self.code})"


def number(v: float) -> Value:
    """A Python float literal (``float('inf')`` and the like for non-finite values)."""
    code = repr(float(v)) if math.isfinite(v) else f"float('{v}')"
    return Value(code, (), UNARY_MINUS if code.startswith("-") else ATOM, const=float(v))


def aligned(v: Value, target: tuple[str, ...], full_rank: bool = False) -> str:
    """Code for ``v`` with its axes permuted to ``target``'s order and size-1 axes inserted
    for missing labels, so that it broadcasts against a tensor with axes ``target``.
    Leading size-1 axes are left to broadcasting unless ``full_rank``."""
    if not v.labels and not (full_rank and target):
        return v.code
    order = [n for n in target if n in v.labels]
    assert len(order) == len(v.labels), f"{v.labels} not within {target}"
    code = v.code
    if list(v.labels) != order:
        code = permuted(v, [v.labels.index(n) for n in order])
        v = Value(code, v.labels)
    first = 0 if full_rank or not order else target.index(order[0])
    index = [":" if n in v.labels else "None" for n in target[first:]]
    while index and index[-1] == ":":
        index.pop()
    return f"{v.atom}[{', '.join(index)}]" if index else code


def permuted(v: Value, perm) -> str:
    """Code for ``v``'s axes in order ``perm``: ``.T`` / ``.mT`` for a swap of the last two."""
    perm = list(perm)
    if perm == list(range(len(perm))):
        return v.code
    if perm == list(range(len(perm) - 2)) + [len(perm) - 1, len(perm) - 2]:
        return f"{v.atom}.T" if len(perm) == 2 else f"{v.atom}.mT"
    return f"{v.atom}.permute({int_list(perm)})"


def int_list(xs) -> str:
    return ", ".join(str(x) for x in xs)


def shape_literal(xs) -> str:
    return f"({xs[0]},)" if len(xs) == 1 else f"({int_list(xs)})"


class BodyEmitter:
    """Emits the statements computing a scope's body sub-expressions as ``Value``s.

    ``setup`` collects views (computed once per scope); ``lines`` the rest. When the scope is
    chunked over summation iterator ``chunk = (name, start_variable, size)``, ``lines`` runs
    inside the chunk loop and every value is restricted to the chunk.
    """

    def __init__(self, kernel, scope: Scope, chunk: tuple[str, str, int] | None = None):
        self.kernel = kernel  # the kernel writer: names, sources, index arrays
        self.ranges = {it.name: (it.lo, it.hi) for it in scope.traversal + scope.summation}
        self.grid = tuple(self.ranges)
        self.chunk = chunk
        self.setup: list[str] = []
        self.lines: list[str] = []
        self._memo: dict[Expr, Value] = {}
        self._setup_vars: dict[str, str] = {}  # code -> variable, for views and copies
        # sub-expressions used more than once are computed once, into a temporary
        uses = Counter(n for n in walk(scope.body) if isinstance(n, (Unary, Binary)))
        self._shared = {n for n, count in uses.items() if count > 1}

    def extent(self, name: str) -> int:
        lo, hi = self.ranges[name]
        return hi - lo

    def temp(self, hint: str, v: Value, setup: bool = False) -> Value:
        """``v`` assigned to a new variable; ``setup``: before the chunk loop, reused if equal."""
        if setup and v.code in self._setup_vars:
            return Value(self._setup_vars[v.code], v.labels, fresh=v.fresh)
        name = self.kernel.fresh(hint)
        (self.setup if setup else self.lines).append(f"{name} = {v.code}")
        if setup:
            self._setup_vars[v.code] = name
        return Value(name, v.labels, fresh=v.fresh, boolean=v.boolean)

    def numeric(self, v: Value) -> Value:
        """``v`` as numbers: a bool tensor (a comparison) converted to the inputs' dtype."""
        if not v.boolean:
            return v
        return Value(f"{v.atom}.to({self.kernel.number_dtype()})", v.labels)

    def condition(self, v: Value) -> str:
        """Code of a bool tensor that holds where ``v`` is non-zero."""
        return v.code if v.boolean else f"{v.atom} != 0"

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
            v = self.select(*(self.value(x) for x in picked))
        elif isinstance(e, Unary):
            v = self.unary(e.op, self.value(e.x))
        elif isinstance(e, Binary):
            v = self.binary(e.op, self.value(e.lhs), self.value(e.rhs))
        else:
            raise TypeError(f"cannot lower {type(e).__name__} inside a scope body")
        if v.const is None and (e in self._shared or len(v.code) > HOIST_WIDTH):
            return self.temp("t", v)
        return v

    def unary(self, op: UnOp, x: Value) -> Value:
        if x.const is not None:
            return number(float(NP_UNARY[op](np.float64(x.const))))
        x = self.numeric(x)
        if op is UnOp.NEG:
            return Value(f"-{x.atom if x.prec <= UNARY_MINUS else x.code}", x.labels, UNARY_MINUS)
        return Value(UNARY[op].format(x.code), x.labels)

    def binary(self, op: BinOp, a: Value, b: Value) -> Value:
        if a.const is not None and b.const is not None:
            return number(float(NP_BINARY[op](np.float64(a.const), np.float64(b.const))))
        if op is BinOp.MASK:
            return self.select(a, b, number(0.0))
        a, b = self.numeric(a), self.numeric(b)
        labels = tuple(n for n in self.grid if n in a.labels or n in b.labels)
        lhs, rhs = aligned(a, labels), aligned(b, labels)
        if op in COMPARISONS:
            lhs = f"({lhs})" if a.prec <= COMPARE and lhs == a.code else lhs
            rhs = f"({rhs})" if b.prec <= COMPARE and rhs == b.code else rhs
            return Value(f"{lhs} {COMPARE_SYMBOL[op]} {rhs}", labels, COMPARE, boolean=True)
        if op in EXTREMUM:
            both, one = EXTREMUM[op]
            if b.const is not None or a.const is not None:  # torch.maximum needs two tensors
                tensor, num = (lhs, rhs) if b.const is not None else (rhs, lhs)
                return Value(f"{one}({tensor}, {num})", labels)
            return Value(f"{both}({lhs}, {rhs})", labels)
        if op in FUNCTION:
            return Value(f"{FUNCTION[op]}({lhs}, {rhs})", labels)
        sym, prec = INFIX[op]
        right_assoc = op in (BinOp.SUB, BinOp.DIV)
        if a.prec < prec and lhs == a.code:  # alignment suffixes parenthesize by themselves
            lhs = f"({lhs})"
        if (b.prec < prec or (right_assoc and b.prec == prec)) and rhs == b.code:
            rhs = f"({rhs})"
        return Value(f"{lhs} {sym} {rhs}", labels, prec)

    def select(self, c: Value, a: Value, b: Value) -> Value:
        """``where(c, a, b)``: torch.where, a number branch kept in the tensors' dtype."""
        if c.const is not None:
            return a if c.const != 0 else b
        a, b = self.numeric(a), self.numeric(b)
        labels = tuple(n for n in self.grid if n in c.labels + a.labels + b.labels)
        if a.const is not None and b.const is not None:  # torch.where would make float32
            a = Value(f"{self.kernel.number_ref()}.new_tensor({a.code})", ())
        cond = Value(self.condition(c), c.labels, COMPARE if not c.boolean else c.prec)
        args = [aligned(v, labels) for v in (cond, a, b)]
        return Value(f"torch.where({', '.join(args)})", labels)

    # -- reads ------------------------------------------------------------------------------
    def read(self, a: Access) -> Value:
        v = self._read(a)
        if v.const is None and self.kernel.holds_bool(a.source):  # a bool input, a comparison
            v = Value(v.code, v.labels, v.prec, fresh=v.fresh, view_of=v.view_of, boolean=True)
        return v

    def _read(self, a: Access) -> Value:
        src = self.kernel.source_var(a.source)
        plan = plan_read(a, self.ranges, self.grid)
        if isinstance(plan, ZeroRead):
            return number(0.0)
        if isinstance(plan, GatherRead):
            return self._gather(src, plan)
        if isinstance(plan, SliceRead):
            v = self._slice(src, plan)
        elif isinstance(plan, StridedRead):
            v = self._strided(src, plan)
        else:
            v = self._flat(src, plan, math.prod(a.source.shape))
        return self.in_chunk(v)

    def in_chunk(self, v: Value) -> Value:
        """``v`` restricted to the current chunk of the chunk iterator, if it has that axis."""
        if self.chunk is None or self.chunk[0] not in v.labels:
            return v
        name, start, size = self.chunk
        index = [":"] * v.labels.index(name) + [f"{start}:{start} + {size}"]
        return Value(f"{v.atom}[{', '.join(index)}]", v.labels, fresh=v.fresh, view_of=v.view_of)

    def _window(self, src: str, windows, select=None) -> tuple[str, bool]:
        """``src`` sliced (and ``select``ed) to the windows, then zero-padded: (code, padded)."""
        select = select or (None,) * len(windows)
        index = []
        for w, sel in zip(windows, select):
            lo, hi = w.slice
            index.append(str(lo + sel) if sel is not None else
                         ":" if (lo, hi) == (0, w.size) else f"{lo}:{hi}")
        while index and index[-1] == ":":
            index.pop()
        code = f"{src}[{', '.join(index)}]" if index else src
        pads = [w.pad for w, sel in zip(windows, select) if sel is None]
        padded = [d for d, p in enumerate(pads) if p != (0, 0)]
        if not padded:
            return code, False
        amounts = [x for p in reversed(pads[padded[0]:]) for x in p]
        return f"F.pad({code}, ({int_list(amounts)}))", True

    def _flipped(self, src: str, flips: tuple[int, ...]) -> str:
        if not flips:
            return src
        flipped = Value(f"{src}.flip({int_list(flips)})", ())
        return self.temp(f"{src}_flip", flipped, setup=True).code

    def _slice(self, src: str, plan: SliceRead) -> Value:
        src = self._flipped(src, plan.flips)
        code, padded = self._window(src, plan.windows, plan.select)
        if padded:
            return self.temp(f"{src}_pad", Value(code, plan.labels), setup=True)
        return Value(code, plan.labels, fresh=False, view_of=src)

    def _strided(self, src: str, plan: StridedRead) -> Value:
        src = self._flipped(src, plan.flips)
        code, padded = self._window(src, plan.windows)
        base = src if code == src else \
            self.temp(f"{src}_pad" if padded else f"{src}_win", Value(code, ()), setup=True).code
        stride = self.kernel.fresh("st")
        terms = [[f"{stride}[{d}]" if c == 1 else f"{c} * {stride}[{d}]"
                  for d, c in enumerate(cs) if c] for cs in plan.coeffs]
        strides = [" + ".join(t) if t else "0" for t in terms]
        self.setup.append(f"{stride} = {base}.stride()")
        view = (f"{base}.as_strided({shape_literal(plan.sizes)}, {shape_literal(strides)}, "
                f"{base}.storage_offset())")
        return self.temp(f"{src}_view", Value(view, plan.labels, fresh=False), setup=True)

    def _flat(self, src: str, plan: FlatRead, numel: int) -> Value:
        row_major = [math.prod(plan.sizes[d + 1:]) for d in range(len(plan.sizes))]
        if plan.offset == 0 and math.prod(plan.sizes) == numel and all(
                st == rm for st, rm, n in zip(plan.strides, row_major, plan.sizes) if n > 1):
            return Value(f"{src}.reshape({shape_literal(plan.sizes)})", plan.labels, fresh=False,
                         view_of=src)
        base = self.temp(f"{src}_c", Value(f"{src}.contiguous()", ()), setup=True).code
        offset = f"{base}.storage_offset() + {plan.offset}" if plan.offset else \
            f"{base}.storage_offset()"
        view = (f"{base}.as_strided({shape_literal(plan.sizes)}, "
                f"{shape_literal(plan.strides)}, {offset})")
        return self.temp(f"{src}_view", Value(view, plan.labels, fresh=False), setup=True)

    def _gather(self, src: str, plan: GatherRead) -> Value:
        index = [self._index(f"{src}_pos{d}", p, plan.labels) for d, p in enumerate(plan.positions)]
        code = f"{src}[{', '.join(index)}]"
        if plan.mask is not None:
            code = f"torch.where({self._index(f'{src}_ok', plan.mask, plan.labels)}, {code}, 0.0)"
        return self.temp(f"{src}_at", Value(code, plan.labels))

    def _index(self, hint: str, array: np.ndarray, labels: tuple[str, ...]) -> str:
        """A reference ``ix.<name>`` to an index tensor, restricted to the current chunk."""
        v = Value(f"ix.{self.kernel.index_array(hint, array)}", labels)
        if self.chunk is not None and self.chunk[0] in labels \
                and array.shape[labels.index(self.chunk[0])] > 1:
            return self.in_chunk(v).code
        return v.code
