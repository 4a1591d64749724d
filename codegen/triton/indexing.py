"""Integer index arithmetic inside generated kernels: kernel variables, intervals, code.

A *kernel variable* is an integer tensor (or scalar) a kernel computes once -- a program id,
an offset vector, an iterator decoded from an offset -- with the tile axes it spans and the
interval its valid lanes hold. IR index expressions are substituted into sympy expressions
over these variables; interval arithmetic then proves which bounds checks a read can skip,
and ``index_code`` prints the expression as Triton code.

Triton's integer ``//`` and ``%`` truncate toward zero (as in C) while the IR's floor-div and
mod are Python's. The printer only divides non-negative numerators: where the interval of a
numerator reaches below 0 it adds a multiple of the divisor first,
``floor(n/d) == (n + K*d) // d - K``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import sympy

ATOM, MUL, ADD = 3, 2, 1  # precedence of a code's outermost operator


@dataclass(frozen=True)
class KVar:
    """A kernel variable: identifier, tile axes, loop level, and the closed interval
    ``lo..hi`` of its values on valid lanes."""

    name: str
    axes: frozenset
    level: int
    lo: int
    hi: int
    symbol: sympy.Symbol

    @staticmethod
    def make(name: str, axes=(), level: int = 0, lo: int = 0, hi: int = 0) -> "KVar":
        return KVar(name, frozenset(axes), level, lo, hi, sympy.Dummy(name, integer=True))


class UnsupportedIndex(NotImplementedError):
    pass


def _div_parts(arg: sympy.Expr) -> tuple[sympy.Expr, int]:
    num, den = sympy.fraction(sympy.together(arg))
    if not den.is_Integer or int(den) <= 0:
        raise UnsupportedIndex(f"floor/ceiling of a non-integer division in index {arg}")
    return sympy.expand(num), int(den)


class IndexPrinter:
    """Intervals and Triton code of index expressions over a kernel's variables."""

    def __init__(self, kvars: dict[sympy.Symbol, KVar], on_use=None):
        self.kvars = kvars
        self.on_use = on_use  # called with each kernel variable the printed code reads

    # -- intervals --------------------------------------------------------------------------
    def interval(self, e: sympy.Expr) -> tuple[int, int]:
        if e.is_Integer:
            return int(e), int(e)
        if e.is_Symbol:
            v = self.kvars[e]
            return v.lo, v.hi
        if isinstance(e, sympy.Add):
            lo = hi = 0
            for a in e.args:
                a_lo, a_hi = self.interval(a)
                lo, hi = lo + a_lo, hi + a_hi
            return lo, hi
        if isinstance(e, sympy.Mul):
            lo, hi = 1, 1
            for a in e.args:
                a_lo, a_hi = self.interval(a)
                products = (lo * a_lo, lo * a_hi, hi * a_lo, hi * a_hi)
                lo, hi = min(products), max(products)
            return lo, hi
        if isinstance(e, (sympy.floor, sympy.ceiling)):
            num, den = _div_parts(e.args[0])
            lo, hi = self.interval(num)
            rnd = math.floor if isinstance(e, sympy.floor) else math.ceil
            return rnd(lo / den), rnd(hi / den)
        if isinstance(e, sympy.Mod):
            m = e.args[1]
            if not m.is_Integer or int(m) <= 0:
                raise UnsupportedIndex(f"mod by a non-constant in index {e}")
            lo, hi = self.interval(e.args[0])
            m = int(m)
            if 0 <= lo and hi < m:
                return lo, hi
            return 0, m - 1
        raise UnsupportedIndex(f"unsupported index expression {e} ({type(e).__name__})")

    def axes(self, e: sympy.Expr) -> frozenset:
        out = frozenset()
        for s in e.free_symbols:
            out |= self.kvars[s].axes
        return out

    def level(self, e: sympy.Expr) -> int:
        return max((self.kvars[s].level for s in e.free_symbols), default=0)

    # -- code -------------------------------------------------------------------------------
    def code(self, e: sympy.Expr) -> str:
        return self._code(sympy.sympify(e))[0]

    def _order(self, term: sympy.Expr):
        if term.is_Number:
            return (1, 0, "")
        names = list(self.kvars)
        pos = min((names.index(s) for s in term.free_symbols if s in self.kvars), default=0)
        return (0, pos, str(term))

    def _wrap(self, e, least: int) -> str:
        text, prec = self._code(e)
        return f"({text})" if prec < least else text

    def _code(self, e: sympy.Expr) -> tuple[str, int]:
        if e.is_Integer:
            return str(int(e)), ATOM if e >= 0 else ADD
        if e.is_Symbol:
            if self.on_use is not None:
                self.on_use(self.kvars[e])
            return self.kvars[e].name, ATOM
        if isinstance(e, sympy.Add):
            terms = sorted(e.args, key=self._order)
            positive = [t for t in terms if t.as_coeff_Mul()[0] > 0]
            if terms[0].as_coeff_Mul()[0] < 0 and positive:  # kk - t, not -t + kk
                terms.remove(positive[0])
                terms.insert(0, positive[0])
            out = self._wrap(terms[0], ADD)
            for t in terms[1:]:
                if t.as_coeff_Mul()[0] < 0:
                    out += " - " + self._wrap(-t, MUL)
                else:
                    out += " + " + self._wrap(t, MUL)
            return out, ADD
        if isinstance(e, sympy.Mul):
            coeff, rest = e.as_coeff_Mul()
            if coeff == -1:
                return "-" + self._wrap(rest, ATOM), ADD
            if coeff != 1:
                return f"{self._wrap(rest, MUL)} * {int(coeff)}", MUL
            return " * ".join(self._wrap(a, ATOM) for a in e.args), MUL
        if isinstance(e, sympy.floor):
            num, den = _div_parts(e.args[0])
            return self._floordiv(num, den)
        if isinstance(e, sympy.ceiling):  # ceil(n/d) == -floor(-n/d)
            num, den = _div_parts(e.args[0])
            text, _ = self._floordiv(sympy.expand(-num), den)
            return f"-({text})", ADD
        if isinstance(e, sympy.Mod):
            a, m = e.args
            self.interval(e)  # validates the divisor
            lo, _ = self.interval(a)
            if lo < 0:
                shift = -(lo // int(m)) * int(m)
                return f"({self._code(a + shift)[0]}) % {int(m)}", MUL
            return f"{self._wrap(a, MUL)} % {int(m)}", MUL
        raise UnsupportedIndex(f"unsupported index expression {e} ({type(e).__name__})")

    def _floordiv(self, num: sympy.Expr, den: int) -> tuple[str, int]:
        if den == 1:
            return self._code(num)
        lo, _ = self.interval(num)
        if lo < 0:
            k = -(lo // den)
            return f"({self._code(num + k * den)[0]}) // {den} - {k}", ADD
        return f"{self._wrap(num, MUL)} // {den}", MUL
