"""Expressions → text (the parser's syntax) and → LaTeX.

``to_text`` writes one statement per scope, dependencies first, so that
``parse(to_text(e, declarations=True)) == e`` for every valid ``e``: parentheses only where the
tree needs them, ``where`` only where range inference (``ir.parser.infer_ranges``) would get
another range, index terms ordered by the scope's iterator order (``h+r-1``, constants last).
The printer never raises: ``Scope.__repr__`` uses it, also on invalid scopes.
"""
from __future__ import annotations

import math

import sympy

from ir.nodes import Access, Binary, BinOp, Const, Expr, Reduce, Scope, Tensor, UnOp, Unary, accesses, sub_scopes
from ir.lexer import BINARY_FUNCS, DTYPE_SHORT, RESERVED
from ir.parser import infer_ranges

ADD, MUL, UNARY, ATOM = 1, 2, 3, 4  # precedence levels, loosest first
PREC = {BinOp.ADD: ADD, BinOp.SUB: ADD, BinOp.MUL: MUL, BinOp.DIV: MUL}
LATEX_UNARY = {UnOp.EXP: r"\exp", UnOp.LOG: r"\log", UnOp.TANH: r"\tanh", UnOp.SIGMOID: r"\sigma",
               UnOp.RELU: r"\mathrm{relu}", UnOp.ERF: r"\operatorname{erf}"}
LATEX_BINARY = {BinOp.MAX: r"\max", BinOp.MIN: r"\min"}
LATEX_COMPARISON = {BinOp.LT: "<", BinOp.LE: r"\le", BinOp.GT: ">", BinOp.GE: r"\ge",
                    BinOp.EQ: "=", BinOp.NE: r"\ne"}


# -- index expressions -----------------------------------------------------------------------
def _term_key(term: sympy.Expr, order: dict[str, int]):
    if term.is_Number:
        return (1, 0, "")
    pos = min((order.get(s.name, len(order)) for s in term.free_symbols), default=len(order))
    return (0, pos, str(term))


def _name(n: str, latex: bool) -> str:
    return _latex_name(n) if latex else n


def _ix(e: sympy.Expr, order: dict[str, int], latex: bool = False) -> tuple[str, int]:
    """(text, precedence) of an index expression."""
    def wrap(sub, min_prec):
        text, p = _ix(sub, order, latex)
        return f"({text})" if p < min_prec else text

    if e.is_Integer:
        return str(int(e)), ATOM if e >= 0 else UNARY
    if e.is_Symbol:
        return _name(e.name, latex), ATOM
    if isinstance(e, sympy.Add):
        terms = sorted(e.args, key=lambda t: _term_key(t, order))
        out = wrap(terms[0], ADD)
        for t in terms[1:]:
            if t.as_coeff_Mul()[0] < 0:
                out += "-" + wrap(-t, MUL)
            else:
                out += "+" + wrap(t, MUL)
        return out, ADD
    if isinstance(e, sympy.Mul):
        coeff, rest = e.as_coeff_Mul()
        if coeff == -1:
            return "-" + wrap(rest, ATOM), UNARY
        if coeff.is_Integer and coeff != 1:
            return f"{int(coeff)}{r' ' if latex else '*'}{wrap(rest, ATOM)}", MUL
        if coeff == 1:
            return ("*".join(wrap(a, ATOM) for a in e.args)), MUL
        return f"({coeff})*{wrap(rest, ATOM)}", MUL  # not affine; printed for error messages
    if isinstance(e, sympy.floor):
        num, den = e.args[0].as_numer_denom()
        if den.is_Integer and den > 1:
            if latex:
                return rf"\lfloor {_ix(num, order, latex)[0]}/{int(den)} \rfloor", ATOM
            return f"{wrap(num, MUL)}//{int(den)}", MUL
    if isinstance(e, sympy.Mod):
        a, m = e.args
        op = r" \bmod " if latex else "%"
        return f"{wrap(a, MUL)}{op}{wrap(m, ATOM)}", MUL
    return f"{e}", ATOM


def index_text(e: sympy.Expr, order: dict[str, int] | None = None) -> str:
    """An index expression as the parser reads it: ``h+r-1``, ``i//2``, ``i%3``, ``2*i+1``."""
    return _ix(sympy.sympify(e), order or {})[0]


# -- body expressions ------------------------------------------------------------------------
def const_text(v) -> str:
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if v.is_integer() and abs(v) < 1e16:
        return str(int(v))
    return repr(v)


class _Printer:
    def __init__(self, names: dict, order: dict[str, int], latex: bool = False):
        self.names, self.order, self.latex = names, order, latex

    def source(self, src) -> str:
        n = src.name if isinstance(src, Tensor) else self.names.get(src, src.name or "?")
        return _latex_name(n) if self.latex else n

    def paren(self, text: str) -> str:
        return rf"\left({text}\right)" if self.latex else f"({text})"

    def wrap(self, e: Expr, min_prec: int) -> str:
        text, p = self.expr(e)
        return self.paren(text) if p < min_prec else text

    def expr(self, e: Expr) -> tuple[str, int]:
        if isinstance(e, Const):
            text = const_text(e.value)
            return text, UNARY if text.startswith("-") else ATOM
        if isinstance(e, Access):
            idx = [_ix(i, self.order, self.latex)[0] for i in e.indices]
            if self.latex:
                return self.source(e.source) + (f"_{{{','.join(idx)}}}" if idx else ""), ATOM
            return f"{self.source(e.source)}[{','.join(idx)}]", ATOM
        if isinstance(e, Unary):
            return self.unary(e)
        if isinstance(e, Binary):
            return self.binary(e)
        return f"<{type(e).__name__}>", ATOM

    def unary(self, e: Unary) -> tuple[str, int]:
        if e.op is UnOp.NEG:
            # `-2` reads back as the constant -2, so the negation of a constant keeps its parens
            keep = isinstance(e.x, Const) and not const_text(e.x.value).startswith("-")
            return "-" + (self.paren(self.expr(e.x)[0]) if keep else self.wrap(e.x, UNARY)), UNARY
        inner = self.expr(e.x)[0]
        if not self.latex:
            return f"{getattr(e.op, 'value', e.op)}({inner})", ATOM
        if e.op is UnOp.SQRT:
            return rf"\sqrt{{{inner}}}", ATOM
        if e.op is UnOp.ABS:
            return rf"\left|{inner}\right|", ATOM
        if e.op is UnOp.RECIP:
            return rf"\frac{{1}}{{{inner}}}", ATOM
        name = LATEX_UNARY.get(e.op, rf"\mathrm{{{getattr(e.op, 'value', '?')}}}")
        return name + self.paren(inner), ATOM

    def binary(self, e: Binary) -> tuple[str, int]:
        if self.latex and e.op in LATEX_COMPARISON:  # Iverson bracket: 1 where it holds
            a, b = self.wrap(e.lhs, ADD), self.wrap(e.rhs, ADD)
            return rf"\left[{a} {LATEX_COMPARISON[e.op]} {b}\right]", ATOM
        if self.latex and e.op is BinOp.POW:
            return f"{{{self.wrap(e.lhs, ATOM)}}}^{{{self.expr(e.rhs)[0]}}}", ATOM
        if getattr(e.op, "value", "") in BINARY_FUNCS:  # max(a, b), pow(a, b), ...
            a, b = self.expr(e.lhs)[0], self.expr(e.rhs)[0]
            fn = LATEX_BINARY.get(e.op, rf"\mathrm{{{e.op.value}}}") if self.latex else e.op.value
            return f"{fn}" + self.paren(f"{a}, {b}"), ATOM
        if e.op is BinOp.DIV and self.latex:
            return rf"\frac{{{self.expr(e.lhs)[0]}}}{{{self.expr(e.rhs)[0]}}}", ATOM
        p = PREC.get(e.op, ATOM)
        a, b = self.wrap(e.lhs, p), self.wrap(e.rhs, p + 1)
        op = getattr(e.op, "value", "?")
        if self.latex and e.op is BinOp.MUL:
            op = r"\cdot" if isinstance(e.lhs, Const) or isinstance(e.rhs, Const) else ""
        return (f"{a} {op} {b}" if op else f"{a} {b}"), p


# -- statements and programs -----------------------------------------------------------------
def scope_names(root: Scope) -> dict[Scope, str]:
    """A distinct statement name per distinct scope (name hint, else fresh T0, T1, ...)."""
    scopes = sub_scopes(root)
    taken = {a.source.name for s in scopes for a in accesses(s.body) if isinstance(a.source, Tensor)}
    names: dict[Scope, str] = {}
    fresh = 0
    for s in scopes:
        if s in names:
            continue
        n = s.name
        if not n or not n.isidentifier() or n in taken or n in RESERVED:
            while f"T{fresh}" in taken or any(f"T{fresh}" == x.name for x in scopes):
                fresh += 1
            n = f"T{fresh}"
        taken.add(n)
        names[s] = n
    return names


def _explicit(s: Scope) -> list:
    """Iterators whose range inference would not recover (they need a ``where``)."""
    inferred = infer_ranges(s.body)
    return [it for it in s.traversal + s.summation
            if set(inferred.get(it.name, {})) != {(it.lo, it.hi)}]


def statement_text(s: Scope, names: dict[Scope, str] | None = None, name: str | None = None) -> str:
    """One statement ``Name[t...] = reduce[s...] body where ...``."""
    names = names if names is not None else {}
    order = {it.name: k for k, it in enumerate(s.traversal + s.summation)}
    name = name or names.get(s) or s.name or "T"
    out = f"{name}[{','.join(it.name for it in s.traversal)}] = "
    if s.summation or s.reduce is not Reduce.SUM:
        out += f"{getattr(s.reduce, 'value', s.reduce)}[{','.join(it.name for it in s.summation)}] "
    out += _Printer(names, order).expr(s.body)[0]
    where = _explicit(s)
    if where:
        out += " where " + ", ".join(f"{it.name} in {it.lo}:{it.hi}" for it in where)
    return out


def _tensors(scopes) -> list[Tensor]:
    found: dict[str, Tensor] = {}
    for s in scopes:
        for a in accesses(s.body):
            if isinstance(a.source, Tensor):
                found.setdefault(a.source.name, a.source)
    return list(found.values())


def declaration_text(t: Tensor) -> str:
    return f"{t.name}: {DTYPE_SHORT.get(t.dtype, t.dtype)}[{', '.join(str(n) for n in t.shape)}]"


def to_text(scope: Scope, declarations: bool = False) -> str:
    """The program rooted at ``scope``: one line per distinct sub-scope, the root last."""
    names = scope_names(scope)
    lines = [declaration_text(t) for t in _tensors(names)] if declarations else []
    lines += [statement_text(s, names) for s in names]
    return "\n".join(lines)


# -- LaTeX -----------------------------------------------------------------------------------
def _latex_name(n: str) -> str:
    n = str(n)
    return n if len(n) == 1 else r"\mathrm{" + n.replace("_", r"\_") + "}"


def _latex_statement(s: Scope, names: dict[Scope, str], aligned: bool) -> str:
    order = {it.name: k for k, it in enumerate(s.traversal + s.summation)}
    explicit = {it.name for it in _explicit(s)}

    def it_text(it):
        n = _latex_name(it.name)
        return rf"{n} \in [{it.lo}, {it.hi})" if it.name in explicit else n

    p = _Printer(names, order, latex=True)
    lhs = _latex_name(names.get(s, "T"))
    if s.traversal:
        lhs += "_{" + ",".join(_latex_name(it.name) for it in s.traversal) + "}"
    rhs = p.expr(s.body)[0]
    if s.summation or s.reduce is not Reduce.SUM:
        if p.expr(s.body)[1] == ADD:
            rhs = p.paren(rhs)
        sub = ", ".join(it_text(it) for it in s.summation)
        rhs = rf"\{getattr(s.reduce, 'value', 'sum')}_{{{sub}}} {rhs}"
    trav = [it_text(it) for it in s.traversal if it.name in explicit]
    if trav:
        rhs += r" \quad " + ", ".join(trav)
    return f"{lhs} {'&=' if aligned else '='} {rhs}"


def to_latex(scope: Scope) -> str:
    r"""LaTeX for the program: ``C_{i,j} = \sum_{k} A_{i,k} B_{k,j}``; explicit ranges shown."""
    names = scope_names(scope)
    if len(names) == 1:
        return _latex_statement(scope, names, aligned=False)
    body = r" \\ ".join(_latex_statement(s, names, aligned=True) for s in names)
    return r"\begin{aligned} " + body + r" \end{aligned}"
