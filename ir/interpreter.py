"""The reference interpreter: the living definition of what an expression means.

Vectorised on numpy, with no Python loop per element. Every sub-expression is evaluated as a
*labelled array*: an array whose axes are named by the iterators it depends on, and only
those. A tensor access ``I[n,c,h+r-1,w+s-1]`` becomes a gather over its six iterators; a sum
of products becomes one ``np.einsum`` over the factors, so a conv never materialises the full
traversal × summation grid. Reads outside a source's bounds are 0.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import sympy

from ir.nodes import (
    Access, Binary, BinOp, Const, Expr, Reduce, Scope, Tensor, UnOp, Unary, product_factors,
)

BINARY = {
    BinOp.ADD: np.add, BinOp.SUB: np.subtract, BinOp.MUL: np.multiply,
    BinOp.MAX: np.maximum, BinOp.MIN: np.minimum,
}


def _safe_div(a, b):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.divide(a, b)


def _pow(a, b):
    """torch.pow: C's pow (NaN for a negative base with a non-integer exponent, ``x**0 = 1``
    even for NaN, ``1**y = 1``), and torch's scalar fast paths: ``x**0.5`` is ``sqrt(x)`` and
    ``x**-0.5`` is ``rsqrt(x)`` (they differ from C's pow at -inf and -0)."""
    with np.errstate(all="ignore"):
        if np.ndim(b) == 0 and float(b) in (0.5, -0.5):
            root = np.sqrt(a)
            return root if float(b) > 0 else 1.0 / root
        return np.power(a, b)


def _comparison(fn):
    return lambda a, b: fn(a, b).astype(np.float64)  # 1.0 / 0.0, as the IR computes


def _mask(c, x):
    return np.where(c != 0, x, 0.0)  # x where c holds, else 0: a NaN in x does not leak


BINARY[BinOp.DIV] = _safe_div
BINARY[BinOp.POW] = _pow
BINARY[BinOp.MASK] = _mask
BINARY.update({BinOp.LT: _comparison(np.less), BinOp.LE: _comparison(np.less_equal),
               BinOp.GT: _comparison(np.greater), BinOp.GE: _comparison(np.greater_equal),
               BinOp.EQ: _comparison(np.equal), BinOp.NE: _comparison(np.not_equal)})


def _sigmoid(x):
    return 0.5 * (np.tanh(0.5 * x) + 1.0)


def _log(x):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(x)


def _sqrt(x):
    with np.errstate(invalid="ignore"):
        return np.sqrt(x)  # NaN below 0, as torch.sqrt


def _recip(x):
    with np.errstate(divide="ignore"):
        return 1.0 / x


_erf = np.vectorize(math.erf, otypes=[np.float64])  # libm's erf (numpy has none)


UNARY = {
    UnOp.NEG: np.negative, UnOp.RELU: lambda x: np.maximum(x, 0), UnOp.EXP: np.exp,
    UnOp.LOG: _log, UnOp.TANH: np.tanh, UnOp.SIGMOID: _sigmoid,
    UnOp.SQRT: _sqrt, UnOp.ABS: np.abs, UnOp.RECIP: _recip,
    UnOp.ERF: _erf,
}


@dataclass
class Labelled:
    """``array`` with one axis per name in ``labels`` (in order)."""

    array: np.ndarray
    labels: tuple[str, ...]

    def aligned(self, labels: tuple[str, ...]) -> np.ndarray:
        """View with axes ordered as ``labels`` (a superset); missing axes have size 1."""
        assert set(self.labels) <= set(labels), f"{self.labels} not within {labels}"
        arr = np.transpose(self.array, [self.labels.index(l) for l in labels if l in self.labels])
        sizes = iter(arr.shape)
        return arr.reshape([next(sizes) if l in self.labels else 1 for l in labels])


def _union(*label_sets: tuple[str, ...]) -> tuple[str, ...]:
    out: list[str] = []
    for ls in label_sets:
        out.extend(l for l in ls if l not in out)
    return tuple(out)


class Interpreter:
    def __init__(self, env: dict[str, np.ndarray], dtype=np.float64):
        self.env = env
        self.dtype = dtype
        self.memo: dict[int, np.ndarray] = {}
        self.ranges: dict[str, tuple[int, int]] = {}

    # -- index expressions -------------------------------------------------------------
    def index(self, e: sympy.Expr) -> Labelled:
        """Integer values of an affine / floor-div / mod index expression over its iterators."""
        if e.is_Integer:
            return Labelled(np.array(int(e), dtype=np.int64), ())
        if e.is_Symbol:
            lo, hi = self.ranges[e.name]
            return Labelled(np.arange(lo, hi, dtype=np.int64), (e.name,))
        if isinstance(e, sympy.Add):
            return self._combine([self.index(a) for a in e.args], np.add)
        if isinstance(e, sympy.Mul):
            return self._combine([self.index(a) for a in e.args], np.multiply)
        if isinstance(e, sympy.floor):
            num, den = e.args[0].as_numer_denom()
            assert den.is_Integer, f"floor of a non-integer division in index {e}"
            a = self.index(num)
            return Labelled(np.floor_divide(a.array, int(den)), a.labels)
        if isinstance(e, sympy.Mod):
            a, m = self.index(e.args[0]), self.index(e.args[1])
            return self._combine([a, m], np.mod)
        raise ValueError(f"unsupported index expression {e} ({type(e).__name__})")

    @staticmethod
    def _combine(parts: list[Labelled], op) -> Labelled:
        labels = _union(*(p.labels for p in parts))
        out = parts[0].aligned(labels)
        for p in parts[1:]:
            out = op(out, p.aligned(labels))
        return Labelled(out, labels)

    # -- body expressions ------------------------------------------------------------------
    def expr(self, e: Expr) -> Labelled:
        if isinstance(e, Const):
            return Labelled(np.array(e.value, dtype=self.dtype), ())
        if isinstance(e, Access):
            return self.access(e)
        if isinstance(e, Binary):
            a, b = self.expr(e.lhs), self.expr(e.rhs)
            if isinstance(e.rhs, Const):  # a number operand stays a number (torch.pow(x, 0.5))
                return Labelled(BINARY[e.op](a.array, b.array), a.labels)
            labels = _union(a.labels, b.labels)
            return Labelled(BINARY[e.op](a.aligned(labels), b.aligned(labels)), labels)
        if isinstance(e, Unary):
            a = self.expr(e.x)
            return Labelled(UNARY[e.op](a.array), a.labels)
        if isinstance(e, Scope):
            raise TypeError("a scope inside a body must be accessed: write S[i, ...]")
        raise TypeError(f"unknown expression node {type(e).__name__}")

    def access(self, a: Access) -> Labelled:
        src = self.source(a.source)
        bounds = a.source.bounds()
        assert len(a.indices) == len(bounds), f"rank mismatch in {a}"
        idx = [self.index(i) for i in a.indices]
        labels = _union(*(i.labels for i in idx))
        positions, mask = [], None
        for i, (lo, hi) in zip(idx, bounds):
            v = i.aligned(labels)
            ok = (v >= lo) & (v < hi)
            mask = ok if mask is None else mask & ok
            positions.append(np.clip(v - lo, 0, max(hi - lo - 1, 0)))
        if src.size == 0:
            shape = np.broadcast_shapes(*(p.shape for p in positions)) if positions else ()
            return Labelled(np.zeros(shape, dtype=self.dtype), labels)
        values = src[tuple(positions)] if positions else src
        if mask is not None and not mask.all():
            values = np.where(mask, values, 0)
        return Labelled(np.asarray(values, dtype=self.dtype), labels)

    def source(self, s: Tensor | Scope) -> np.ndarray:
        if isinstance(s, Tensor):
            if s.name not in self.env:
                raise KeyError(f"no value given for input tensor {s.name!r}")
            arr = np.asarray(self.env[s.name], dtype=self.dtype)
            if arr.shape != s.shape:
                raise ValueError(f"input {s.name!r} has shape {arr.shape}, expected {s.shape}")
            return arr
        key = id(s)
        if key not in self.memo:
            self.memo[key] = self.scope(s)
        return self.memo[key]

    def scope(self, s: Scope) -> np.ndarray:
        saved = self.ranges
        self.ranges = {it.name: (it.lo, it.hi) for it in s.traversal + s.summation}
        try:
            out_labels = tuple(it.name for it in s.traversal)
            sum_labels = tuple(it.name for it in s.summation)
            if s.reduce is Reduce.SUM:
                factors = [self.expr(f) for f in product_factors(s.body)]
                result = self._einsum(factors, out_labels, sum_labels)
            else:
                body = self.expr(s.body)
                result = self._reduce(body, s.reduce, out_labels, sum_labels)
        finally:
            self.ranges = saved
        return np.broadcast_to(result, s.shape).copy()

    def _extent(self, name: str) -> int:
        lo, hi = self.ranges[name]
        return max(hi - lo, 0)

    def _einsum(self, parts: list[Labelled], out: tuple[str, ...], summed: tuple[str, ...]):
        letters = {l: chr(ord("a") + k) if k < 26 else chr(ord("A") + k - 26)
                   for k, l in enumerate(_union(out, summed))}
        # A summed iterator no factor depends on multiplies the result by its extent.
        scale = 1.0
        used = _union(*(p.labels for p in parts))
        for l in summed:
            if l not in used:
                scale *= self._extent(l)
        operands, specs = [], []
        for p in parts:
            operands.append(p.array)
            specs.append("".join(letters[l] for l in p.labels))
        present = [l for l in out if l in used]
        spec = ",".join(specs) + "->" + "".join(letters[l] for l in present)
        result = np.einsum(spec, *operands, optimize=len(operands) > 2) * scale
        return Labelled(np.asarray(result), tuple(present)).aligned(out)

    def _reduce(self, body: Labelled, op: Reduce, out, summed) -> np.ndarray:
        arr = body.aligned(_union(out, summed))
        full_shape = tuple(self._extent(l) for l in _union(out, summed))
        arr = np.broadcast_to(arr, full_shape)
        axes = tuple(range(len(out), len(out) + len(summed)))
        if not axes:
            return arr
        if op is Reduce.SUM:
            return arr.sum(axis=axes)
        if arr.size == 0 and any(full_shape[a] == 0 for a in axes):
            return np.zeros(full_shape[:len(out)], dtype=self.dtype)
        return arr.max(axis=axes) if op is Reduce.MAX else arr.min(axis=axes)


def evaluate(e: Scope, env: dict[str, np.ndarray], dtype=np.float64) -> np.ndarray:
    """Evaluate scope ``e`` with input arrays ``env`` (by tensor name); returns its array."""
    if not isinstance(e, Scope):
        raise TypeError(f"evaluate() takes a Scope, got {type(e).__name__}")
    return Interpreter(env, dtype).scope(e)
