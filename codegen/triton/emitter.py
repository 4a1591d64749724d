"""IR bodies as tile values of one generated kernel (``TileEmitter``).

``TileEmitter`` turns IR body expressions into ``Value``s -- Triton expressions over the
kernel's tile axes -- under a *binding* of IR iterators to sympy expressions over kernel
variables. A read of an input or of a materialised scope is a masked ``tl.load`` (reads
outside the source are 0: the mask covers exactly the bounds interval arithmetic cannot
prove); a read of an inlined scope evaluates that scope's body in place, zero outside its
range; in a row kernel a read of a reduction scope reduces the row in registers.
"""
from __future__ import annotations

import math
from collections import Counter
from contextlib import contextmanager
from dataclasses import replace
from functools import lru_cache

import numpy as np
import sympy

from codegen.triton.indexing import ADD, ATOM, MUL, KVar
from codegen.triton.text import WIDTH, KernelText, Value, constant, extremum
from ir.interpreter import BINARY as NP_BINARY, UNARY as NP_UNARY
from ir.nodes import (
    COMPARISONS, ZERO_PRESERVING, Access, Binary, BinOp, Const, Expr, Reduce, Scope, Tensor,
    UnOp, Unary, accesses, free_iterators, iterator_symbol, selection, walk,
)
from ir.printer import statement_text

HOIST_WIDTH = 64  # a longer arithmetic expression becomes a temporary of its own
# Only core builtins: library helpers written with @triton.jit (tl.sigmoid, ...) break under
# the interpreter when triton was imported before TRITON_INTERPRET was set.
UNARY = {
    UnOp.RELU: extremum("maximum", "{}", "0.0"), UnOp.EXP: "tl.exp({})", UnOp.LOG: "tl.log({})",
    UnOp.TANH: "2.0 / (1.0 + tl.exp(-2.0 * {})) - 1.0",
    UnOp.SIGMOID: "1.0 / (1.0 + tl.exp(-{}))",
    UnOp.SQRT: "tl.sqrt({})",  # NaN below 0, as torch.sqrt
    UnOp.ABS: "tl.abs({})", UnOp.ERF: "tl.erf({})",
}
INFIX = {BinOp.ADD: (" + ", ADD), BinOp.SUB: (" - ", ADD), BinOp.MUL: (" * ", MUL),
         BinOp.DIV: (" / ", MUL)}
COMPARE_SYMBOL = {BinOp.LT: "<", BinOp.LE: "<=", BinOp.GT: ">", BinOp.GE: ">=", BinOp.EQ: "==",
                  BinOp.NE: "!="}
FALSE_AT_ZERO = frozenset({BinOp.LT, BinOp.GT, BinOp.NE})  # op(0, 0) is 0
BOUNDED = frozenset({UnOp.NEG, UnOp.RELU, UnOp.ABS, UnOp.TANH, UnOp.SIGMOID, UnOp.ERF})
IDENTITY = {Reduce.SUM: "0.0", Reduce.MAX: 'float("-inf")', Reduce.MIN: 'float("inf")'}

class CannotFuse(Exception):
    """This grouping of scopes does not fit the kernel being built. ``scope``: the read scope
    that does not fit (the planner retries with it materialised), or None (try another
    kernel)."""

    def __init__(self, message: str, scope: Scope | None = None):
        super().__init__(message)
        self.scope = scope

class TileEmitter:
    """IR body expressions as ``Value``s of one kernel.

    ``policy(scope)`` says how a read of a scope is emitted: ``"load"`` (a materialised
    buffer), ``"inline"`` (evaluate its body in place) or ``"reduce"`` (a reduction over the
    row axis ``row`` = (kernel variable, extent), in a row kernel). ``known`` maps
    ``(scope, indices)`` to values already computed (a reduction's accumulator, for an
    epilogue).
    """

    def __init__(self, kt: KernelText, names: dict, policy, row: tuple[KVar, int] | None = None):
        self.kt, self.names, self.policy, self.row = kt, names, policy, row
        self.known: dict = {}
        self.used_known: set = set()
        self.inlined: list[Scope] = []
        self.loaded: list = []
        self._memo: dict = {}
        self._shared: dict = {}

    # -- bookkeeping ------------------------------------------------------------------------
    def _remember(self, key, v: Value) -> Value:
        self._memo[key] = v
        return v

    def _recall(self, key) -> Value | None:
        return self._memo.get(key)

    @contextmanager
    def loop(self, header: str):
        with self.kt.loop(header):
            yield
        self._memo = {k: v for k, v in self._memo.items() if v.level <= self.kt.level}

    def temp(self, hint: str, v: Value, comment: str | None = None) -> Value:
        if v.const is not None:
            return v
        name = self.kt.fresh(hint)
        if comment:
            self.kt.line(f"# {comment}", v.level)
        self.kt.assign(name, v.code, v.level)
        return replace(v, code=name, prec=ATOM)

    def statement(self, s: Scope) -> str:
        return statement_text(s, self.names, self.names.get(s))

    # -- indices ----------------------------------------------------------------------------
    def indices(self, a: Access, env: dict) -> tuple:
        subs = {iterator_symbol(n): e for n, e in env.items()}
        return tuple(sympy.expand(sympy.sympify(i).xreplace(subs)) for i in a.indices)

    def checks(self, idx: tuple, bounds) -> tuple[list[str], bool]:
        """Bounds checks of ``idx`` against ``bounds`` interval arithmetic cannot prove, and
        whether some index is never in bounds (the read is 0)."""
        pr, out = self.kt.printer, []
        for i, (lo, hi) in zip(idx, bounds):
            i_lo, i_hi = pr.interval(i)
            if i_hi < lo or i_lo >= hi:
                return [], True
            c, rest = sympy.sympify(i).as_coeff_Add()
            code, c = (pr.code(rest), int(c)) if rest != 0 else (pr.code(i), 0)
            if i_lo < lo:
                out.append(f"({code} >= {lo - c})")
            if i_hi >= hi:
                out.append(f"({code} < {hi - c})")
        return out, False

    def axes_of(self, idx: tuple) -> frozenset:
        out = frozenset()
        for i in idx:
            out |= self.kt.printer.axes(i)
        return out

    def level_of(self, idx: tuple) -> int:
        return max((self.kt.printer.level(i) for i in idx), default=0)

    # -- expressions ------------------------------------------------------------------------
    def value(self, e: Expr, env: dict) -> Value:
        if isinstance(e, Const):
            return constant(e.value)
        if isinstance(e, Access):
            return self.access(e, env)
        key = (e, tuple((n, env[n]) for n in sorted(free_iterators(e))))
        hit = self._recall(key)
        if hit is not None:
            return hit
        picked = selection(e)
        if picked is not None:
            v = self.select(*(self.value(x, env) for x in picked))
        elif isinstance(e, Unary):
            v = self.unary(e.op, self.value(e.x, env))
        elif isinstance(e, Binary):
            v = self.binary(e.op, self.value(e.lhs, env), self.value(e.rhs, env))
        else:
            raise TypeError(f"cannot lower {type(e).__name__} inside a scope body")
        if v.const is None and (self._shared.get(e, 0) > 1 or len(v.code) > HOIST_WIDTH):
            v = self.temp("t", v)
        return self._remember(key, v)

    def unary(self, op: UnOp, x: Value) -> Value:
        if x.const is not None:
            return constant(float(NP_UNARY[op](np.float64(x.const))))
        zero = x.zero if op in ZERO_PRESERVING else frozenset()
        # finite on padded lanes: bounded functions of finite values; exp and sqrt of lanes
        # that are all 0 (1 and 0); never log or recip (-inf and inf at 0)
        finite = x.finite and (op in BOUNDED or op in (UnOp.EXP, UnOp.SQRT) and x.zero >= x.axes)
        if op is UnOp.NEG:
            return Value(f"-{x.atom if x.prec <= MUL else x.code}", x.axes, x.level, ADD, zero,
                         finite=finite)
        if op is UnOp.RECIP:
            return Value(f"1.0 / {x.atom if x.prec <= MUL else x.code}", x.axes, x.level, MUL)
        arg = x.code if op not in (UnOp.TANH, UnOp.SIGMOID) or x.prec >= MUL else f"({x.code})"
        return Value(UNARY[op].format(arg), x.axes, x.level,
                     ADD if op is UnOp.TANH else MUL if op is UnOp.SIGMOID else ATOM, zero,
                     finite=finite)

    def binary(self, op: BinOp, a: Value, b: Value) -> Value:
        if a.const is not None and b.const is not None:
            return constant(float(NP_BINARY[op](np.float64(a.const), np.float64(b.const))))
        axes, level = a.axes | b.axes, max(a.level, b.level)
        # padded lanes hold 0 where a factor is 0 and the other finite (0 * inf is NaN), where
        # a numerator is 0 over a non-zero constant, where both terms of a sum are 0
        zero = (a.zero if b.finite else frozenset()) | (b.zero if a.finite else frozenset()) \
            if op is BinOp.MUL else a.zero if op is BinOp.DIV and b.const not in (None, 0.0) \
            else frozenset() if op is BinOp.DIV else a.zero & b.zero
        finite = a.finite and b.finite and op in (BinOp.ADD, BinOp.SUB, BinOp.MUL, BinOp.MAX,
                                                  BinOp.MIN)
        if op in (BinOp.MAX, BinOp.MIN):
            fn = "maximum" if op is BinOp.MAX else "minimum"
            return Value(extremum(fn, a.code, b.code), axes, level, ATOM, zero, finite=finite)
        if op is BinOp.POW:
            return self.power(a, b)
        if op is BinOp.MASK:
            return self.select(a, b, constant(0.0))
        if op in COMPARISONS:
            cond = f"{a.code} {COMPARE_SYMBOL[op]} {b.code}"
            zero = a.zero & b.zero if op in FALSE_AT_ZERO else frozenset()
            return Value(f"tl.where({cond}, 1.0, 0.0)", axes, level, ATOM, zero, cond=cond,
                         finite=True)
        sym, prec = INFIX[op]
        lhs = a.code if a.prec >= prec else f"({a.code})"
        right_assoc = op in (BinOp.SUB, BinOp.DIV)
        rhs = b.code if b.prec > prec or (b.prec == prec and not right_assoc) else f"({b.code})"
        return Value(f"{lhs}{sym}{rhs}", axes, level, prec, zero, finite=finite)

    def select(self, c: Value, a: Value, b: Value) -> Value:
        """``where(c, a, b)`` as ``tl.where`` on ``c``'s boolean form."""
        if c.const is not None:
            return a if c.const != 0 else b
        axes, level = c.axes | a.axes | b.axes, max(c.level, a.level, b.level)
        zero_b = axes if b.const == 0 else b.zero
        zero = (c.zero & zero_b) | (a.zero & zero_b)
        cond = c.cond or f"{c.code} != 0.0"
        return Value(f"tl.where({cond}, {a.code}, {b.code})", axes, level, ATOM, zero,
                     finite=a.finite and b.finite)

    def atom(self, v: Value) -> Value:
        """``v`` as a name or a literal, so that code may repeat it."""
        return v if v.const is not None or v.code.isidentifier() else self.temp("t", v)

    def power(self, a: Value, b: Value) -> Value:
        """torch.pow: C's pow built from exp2/log2 of |base| (libdevice's pow does not run
        under the interpreter), with the sign of odd integer powers, NaN for a finite negative
        base with a non-integer exponent, 1 for ``x**0``, ``1**y`` and ``(-1)**inf``; a
        constant exponent takes torch's fast paths (sqrt, rsqrt, small integer products).
        Conditions known from a constant operand are decided here, not in the kernel."""
        axes, level = a.axes | b.axes, max(a.level, b.level)
        c, k = a.const, b.const
        if k is not None and k in (0.5, -0.5):
            root = f"tl.sqrt({a.code})"
            return Value(root, axes, level, ATOM) if k > 0 else Value(f"1.0 / {root}", axes,
                                                                        level, MUL)
        x = self.atom(a)
        if k is not None and math.isfinite(k) and k == int(k) and abs(k) <= 4:
            if k == 0:
                return constant(1.0)
            prod = " * ".join([x.code] * int(abs(k)))
            if k > 0:
                return Value(prod, axes, level, MUL if k > 1 else ATOM, x.zero, finite=x.finite)
            return Value(f"1.0 / ({prod})" if k < -1 else f"1.0 / {x.code}", axes, level, MUL)
        y = self.atom(b)
        # predicates: Triton code, or a Python bool when a constant operand decides them
        def test(const, code, fn):
            return code if const is None else bool(fn(const))
        whole = test(k, f"tl.floor({y.code}) == {y.code}", lambda v: v == np.floor(v))
        fraction = test(k, f"tl.floor({y.code}) != {y.code}", lambda v: v != np.floor(v))
        odd = test(k, f"tl.floor({y.code} * 0.5) * 2.0 != {y.code}",
                   lambda v: math.isfinite(v) and v % 2 == 1)
        negative = test(c, f"{x.code} < 0.0", lambda v: v < 0)
        sign = test(c, f"({x.code} < 0.0) | (1.0 / {x.code} < 0.0)",  # -0.0 too
                    lambda v: math.copysign(1.0, v) < 0)
        finite_neg = test(c, f'{x.code} > float("-inf")', lambda v: v > -math.inf)
        one = _any(test(k, f"{y.code} == 0.0", lambda v: v == 0),
                   test(c, f"{x.code} == 1.0", lambda v: v == 1),
                   _all(test(c, f"{x.code} == -1.0", lambda v: v == -1),
                        test(k, f'tl.abs({y.code}) == float("inf")', lambda v: abs(v) == math.inf)))
        log_abs = f"tl.log2(tl.abs({x.code}))" if c is None else \
            constant(math.log2(abs(c)) if c == c and c != 0 else -math.inf if c == 0 else c).code
        r = self.temp("t", Value(f"tl.exp2({y.code} * {log_abs})", axes, level))
        out = _where(_all(sign, whole, odd), f"-{r.code}", r.code)
        out = _where(_all(negative, finite_neg, fraction), 'float("nan")', out)
        out = _where(one, "1.0", out)
        return constant(float(out)) if _is_number(out) else Value(out, axes, level)

    # -- reads ------------------------------------------------------------------------------
    def access(self, a: Access, env: dict) -> Value:
        idx = self.indices(a, env)
        key = (a.source, idx)
        if key in self.known:
            self.used_known.add(key)
            return self.known[key]
        hit = self._recall(key)
        if hit is not None:
            return hit
        if isinstance(a.source, Tensor):
            v = self.load(("in", a.source.name), a.source.name, a.source, idx)
        else:
            how = self.policy(a.source)
            if how == "load":
                v = self.load(("buf", a.source), self.names[a.source], a.source, idx)
            elif how == "inline":
                v = self.inline(a.source, idx)
            elif how == "reduce":
                v = self.reduce_row(a.source, idx)
            else:
                raise CannotFuse(f"{self.statement(a.source)} read at {idx}")
        return self._remember(key, v)

    def load(self, key, hint: str, source, idx: tuple) -> Value:
        checks, never = self.checks(idx, source.bounds())
        if never:
            return constant(0.0)
        self.loaded.append(key)
        ptr = self.kt.pointer(key, hint)
        axes = self.axes_of(idx)
        mask = " & ".join(self.kt.lane_masks(axes) + checks)
        where = self.kt.address(ptr, idx, source.bounds(), source.shape)
        level = self.level_of(idx)
        name = self.kt.fresh(hint)
        room = WIDTH - 4 * (level + 1) - len(f"{name} = tl.load(, mask=, other=0.0).to(ACC)")
        where, mask = self.kt.hoist(name, where, mask, room, level)
        args = f"{where}, mask={mask}, other=0.0" if mask else where
        self.kt.line(f"{name} = tl.load({args}).to(ACC)", level)
        return Value(name, axes, level, ATOM, frozenset(axes), finite=True)  # 0 off the mask

    def inline(self, s: Scope, idx: tuple) -> Value:
        """The value of map scope ``s`` at iterator values ``idx`` (0 outside its range).

        An iterator bound to a compound index that ``s`` divides or takes a modulus of gets a
        kernel variable of its own (``uh = h + r - 1``), so the index code stays short."""
        env, divided = {}, _divided(s)
        for it, i in zip(s.traversal, idx):
            if it.name in divided and not (i.is_Integer or i.as_coeff_Add()[1].is_Symbol):
                lo, hi = self.kt.printer.interval(i)
                v = self.kt.kvar(it.name, self.kt.printer.code(i), self.axes_of((i,)), lo, hi,
                                 level=self.level_of((i,)))
                i = v.symbol
            env[it.name] = i
        checks, never = self.checks(idx, s.bounds())
        if never:
            return constant(0.0)
        self.inlined.append(s)
        self._shared.update({n: c for n, c in _uses(s.body).items() if c > 1})
        v = self.value(s.body, env)
        if checks:
            v = Value(f"tl.where({' & '.join(checks)}, {v.code}, 0.0)", v.axes | self.axes_of(idx),
                      max(v.level, self.level_of(idx)), ATOM, v.zero, finite=v.finite)
        return self.temp(self.names.get(s, "t"), v, self.statement(s))

    def reduce_row(self, s: Scope, idx: tuple) -> Value:
        """Reduction scope ``s`` at scalar ``idx``: its single summation over the row axis."""
        if self.row is None or self.axes_of(idx) or len(s.summation) != 1:
            raise CannotFuse(f"{self.statement(s)} is not a reduction along the row", s)
        col, extent = self.row
        (it,) = s.summation
        if it.extent != extent:
            raise CannotFuse(f"{self.statement(s)} reduces {it.extent} elements, the row has "
                             f"{extent}", s)
        checks, never = self.checks(idx, s.bounds())
        if never:
            return constant(0.0)
        self.inlined.append(s)
        self._shared.update({n: c for n, c in _uses(s.body).items() if c > 1})
        env = {t.name: i for t, i in zip(s.traversal, idx)}
        env[it.name] = it.lo + col.symbol
        v = self.value(s.body, env)
        (label,) = col.axes
        if label not in v.axes:  # constant along the row
            r = v if s.reduce is not Reduce.SUM else \
                Value(f"{v.atom if v.prec < MUL else v.code} * {extent}.0", v.axes, v.level, MUL)
        else:
            v = self.kt.masked(v, {label}, IDENTITY[s.reduce])
            r = Value(self.kt.reduce(v.code, s.reduce, 0), v.axes - {label}, v.level)
        if checks:
            r = Value(f"tl.where({' & '.join(checks)}, {r.code}, 0.0)", r.axes, r.level)
        return self.temp(self.names.get(s, "t"), r, self.statement(s))


def _all(*ps):
    """Conjunction of predicates (Triton code or Python bools), simplified."""
    if any(p is False for p in ps):
        return False
    codes = [p for p in ps if p is not True]
    return True if not codes else " & ".join(f"({p})" for p in codes)


def _any(*ps):
    if any(p is True for p in ps):
        return True
    codes = [p for p in ps if p is not False]
    return False if not codes else " | ".join(f"({p})" for p in codes)


def _where(cond, then: str, other: str) -> str:
    if cond is True:
        return then
    if cond is False:
        return other
    return f"tl.where({cond}, {then}, {other})"


def _is_number(code: str) -> bool:
    try:
        float(code)
        return True
    except ValueError:
        return False


@lru_cache(maxsize=None)
def _divided(s: Scope) -> frozenset:
    """Iterators of ``s`` its reads use inside a floor-division or a modulus."""
    out = set()
    for a in accesses(s.body):
        for i in a.indices:
            for f in sympy.sympify(i).atoms(sympy.floor, sympy.ceiling, sympy.Mod):
                out |= {sym.name for sym in f.free_symbols}
    return frozenset(out)


def _uses(body: Expr) -> Counter:
    return Counter(n for n in walk(body) if isinstance(n, (Unary, Binary)))
