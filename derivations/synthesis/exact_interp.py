"""The ``ir`` reference interpreter, run on exact values instead of floats.

:class:`ExactInterpreter` is ``ir.interpreter.Interpreter`` with object arrays and the
arithmetic of an *algebra*: reads, index arithmetic, out-of-bounds zeros, nesting and
einsum-style sums are the reference interpreter's own code, so exact verification checks
the language's living definition, not a second copy of it. Three algebras:

* ``FORMAL``: :mod:`derivations.synthesis.exact` (polynomials over atoms, exp/log, NaN
  domains): for any body;
* ``POLY``: sympy's sparse polynomial ring over QQ, one generator per input element: for
  polynomial bodies (+ - * and constants), where equality of the outputs *is* the sympy
  polynomial identity;
* ``DEP``: which input elements each output element reads (NaN in, NaN out).
"""
from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
from sympy import QQ
from sympy.polys.rings import ring

from ir.interpreter import Interpreter, Labelled, _union
from ir.nodes import Binary, BinOp, Const, Reduce, Scope, UnOp, Unary, inputs, sub_scopes, walk

from derivations.synthesis import elementary, exact

__all__ = ["ExactInterpreter", "Formal", "Poly", "Deps", "Dep", "is_polynomial", "symbolic_inputs",
           "run"]


def _obj(v) -> np.ndarray:
    out = np.empty((), dtype=object)
    out[()] = v
    return out


class Formal:
    """Exact formal values (any body)."""

    name = "exact"

    def const(self, v):
        return exact.num(v)

    def unary(self, op: UnOp, x):
        if op is UnOp.NEG:
            return exact.neg(x)
        if op is UnOp.EXP:
            return elementary.exp(x)
        if op is UnOp.LOG:
            return elementary.log(x)
        if op is UnOp.RECIP:
            return elementary.div(1, x)
        return elementary.func(op.value, x)

    def binary(self, op: BinOp, a, b):
        if op is BinOp.DIV:
            return elementary.div(a, b)
        if op in (BinOp.MAX, BinOp.MIN):
            return elementary.maxn(op.value, [a, b])
        if op is BinOp.POW:
            b = exact.num(b)
            if isinstance(b, int) and 0 <= b <= 8:
                out = 1
                for _ in range(b):
                    out = exact.mul(out, a)
                return out
            return elementary.func("pow", a, b)
        raise AssertionError(op)

    def reduce(self, op: Reduce, values):
        return elementary.maxn(op.value, values)


class Poly:
    """sympy ``PolyElement``s over QQ: polynomial bodies only."""

    name = "sympy"

    def const(self, v):
        return exact.num(v)

    def unary(self, op, x):
        assert op is UnOp.NEG, op
        return -x

    def binary(self, op, a, b):
        assert op is BinOp.DIV and not hasattr(b, "ring"), op  # division by a constant
        return a * (Fraction(1) / Fraction(b))

    def reduce(self, op, values):
        raise AssertionError("max/min is not polynomial")


class Dep:
    """The set of input elements a value reads, for NaN in, NaN out: IEEE arithmetic
    propagates a NaN input through every + - * and function, even times 0. Constants read
    nothing (``Dep(frozenset())``). The int ``0`` is a zero read outside a tensor
    (padding): it reads nothing, and when ``Dep.padding`` is set, a product with it reads
    nothing either (padding is a structural zero, as libraries treat it: they skip such
    products rather than multiply by 0)."""

    __slots__ = ("vars",)
    padding = False   # set by verify.compare_exact for nan="padding"

    def __init__(self, vars_: frozenset):
        self.vars = vars_

    def _join(self, other):
        return Dep(self.vars | other.vars) if isinstance(other, Dep) else self

    def _times(self, other):
        if isinstance(other, Dep):
            return Dep(self.vars | other.vars)
        return 0 if other == 0 and Dep.padding else self

    __add__ = __radd__ = __sub__ = __rsub__ = _join
    __truediv__ = __rtruediv__ = _join
    __mul__ = __rmul__ = _times

    def __neg__(self):
        return self

    def __eq__(self, other):
        return isinstance(other, Dep) and self.vars == other.vars

    def __hash__(self):
        return hash(self.vars)


class Deps:
    """The input elements read (``Dep``): every operation joins its operands' sets."""

    name = "deps"

    def const(self, v):
        return Dep(frozenset())

    def unary(self, op, x):
        return x

    def binary(self, op, a, b):
        return a + b

    def reduce(self, op, values):
        if all(isinstance(v, int) and v == 0 for v in values):
            return 0  # a max of padding zeros is a padding zero
        out = Dep(frozenset())
        for v in values:
            out = out + v
        return out


class ExactInterpreter(Interpreter):
    """The reference interpreter on object arrays with ``algebra``'s arithmetic."""

    def __init__(self, env, algebra):
        super().__init__(env, dtype=object)
        self.alg = algebra

    def expr(self, e):
        if isinstance(e, Const):
            return Labelled(_obj(self.alg.const(e.value)), ())
        if isinstance(e, Binary):
            a, b = self.expr(e.lhs), self.expr(e.rhs)
            labels = _union(a.labels, b.labels)
            x, y = a.aligned(labels), b.aligned(labels)
            if e.op in (BinOp.ADD, BinOp.SUB, BinOp.MUL):
                out = x + y if e.op is BinOp.ADD else x - y if e.op is BinOp.SUB else x * y
            else:
                out = np.frompyfunc(lambda p, q: self.alg.binary(e.op, p, q), 2, 1)(x, y)
            return Labelled(_array(out), labels)
        if isinstance(e, Unary):
            a = self.expr(e.x)
            f = np.frompyfunc(lambda p: self.alg.unary(e.op, p), 1, 1)
            return Labelled(_array(f(a.array)), a.labels)
        return super().expr(e)

    def _einsum(self, parts, out, summed):
        scale = 1
        used = _union(*(p.labels for p in parts))
        for label in summed:
            if label not in used:
                scale *= self._extent(label)
        letters = {l: chr(ord("a") + k) for k, l in enumerate(_union(out, summed))}
        spec = ",".join("".join(letters[l] for l in p.labels) for p in parts)
        present = [l for l in out if l in used]
        spec += "->" + "".join(letters[l] for l in present)
        sizes = {l: self._extent(l) for l in _union(out, summed)}
        if any(sizes[l] == 0 for l in summed if l in used):
            result = np.zeros(tuple(sizes[l] for l in present), dtype=object)
        else:
            result = np.einsum(spec, *(p.array for p in parts))
        result = _array(result)
        if scale != 1:
            result = _array(result * scale)
        return Labelled(result, tuple(present)).aligned(out)

    def _reduce(self, body, op, out, summed):
        if op is Reduce.SUM:
            return super()._reduce(body, op, out, summed)
        arr = body.aligned(_union(out, summed))
        full = tuple(self._extent(l) for l in _union(out, summed))
        arr = np.broadcast_to(arr, full)
        if not summed:
            return arr
        outer = full[:len(out)]
        result = np.empty(outer, dtype=object)
        flat = arr.reshape(outer + (int(np.prod(full[len(out):])),))
        for pos in itertools.product(*(range(n) for n in outer)):
            values = list(flat[pos])
            result[pos] = self.alg.reduce(op, values) if values else 0
        return result


def _array(v) -> np.ndarray:
    return v if isinstance(v, np.ndarray) and v.dtype == object else \
        np.asarray(v, dtype=object) if isinstance(v, np.ndarray) else _obj(v)


def is_polynomial(root: Scope) -> bool:
    """Every scope sums (no max/min), every body is + - * of reads and constants
    (division by constants allowed)."""
    for s in sub_scopes(root):
        if s.reduce is not Reduce.SUM:
            return False
        for n in walk(s.body):
            if isinstance(n, Unary) and n.op is not UnOp.NEG:
                return False
            if isinstance(n, Binary) and n.op not in (BinOp.ADD, BinOp.SUB, BinOp.MUL):
                if not (n.op is BinOp.DIV and isinstance(n.rhs, Const) and n.rhs.value):
                    return False
    return True


def symbolic_inputs(scopes, algebra) -> dict[str, np.ndarray]:
    """One symbolic value per input element of the ``scopes`` (a variable, a sympy
    generator, or the singleton set of the element, by algebra)."""
    tensors = {}
    for s in scopes:
        for name, t in inputs(s).items():
            tensors.setdefault(name, t)
    cells = [(name, idx) for name, t in sorted(tensors.items())
             for idx in itertools.product(*(range(d) for d in t.shape))]
    if isinstance(algebra, Poly):
        gens = ring([f"{n}_{'_'.join(map(str, i))}" for n, i in cells] or ["unused"], QQ)[1:]
        value = dict(zip(cells, gens))
    elif isinstance(algebra, Deps):
        value = {c: Dep(frozenset({c})) for c in cells}
    else:
        value = {c: exact.var(*c) for c in cells}
    env = {}
    for name, t in tensors.items():
        arr = np.empty(t.shape, dtype=object)
        for idx in itertools.product(*(range(d) for d in t.shape)):
            arr[idx] = value[(name, idx)]
        env[name] = arr
    return env


def run(scope: Scope, env, algebra) -> np.ndarray:
    """``scope``'s output as an object array of exact values."""
    return ExactInterpreter(env, algebra).scope(scope)

