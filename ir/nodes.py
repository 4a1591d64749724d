"""The expression language: tensors, iterators, scopes and the expression nodes of a body.

A *scope* is ``T[t...] = reduce[s...] body``: traversal iterators ``t`` (the output's axes),
summation iterators ``s`` (reduced away with ``reduce``), and a body built from tensor
accesses, constants, binary and unary operators. Every iterator has a half-open integer
range ``lo:hi``. A scope can be accessed like a tensor (``Access(scope, indices)``): the
element at iterator values ``v`` is read at position ``v - lo``. Reading outside a tensor's
or a scope's range yields 0; this is how padding is expressed.

Nodes are frozen dataclasses: structurally equal nodes are equal and hash alike, so they can
key dictionaries and sets. Index expressions are sympy expressions over ``iterator_symbol``s.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from functools import cached_property

import sympy


def iterator_symbol(name: str) -> sympy.Symbol:
    """The sympy symbol standing for iterator ``name`` inside index expressions."""
    return sympy.Symbol(name, integer=True)


class BinOp(enum.Enum):
    ADD = "+"
    SUB = "-"
    MUL = "*"
    DIV = "/"
    MAX = "max"
    MIN = "min"
    POW = "pow"    # torch.pow: NaN for a negative base with a non-integer exponent
    LT = "lt"      # comparisons: 1.0 where true, else 0.0 (false for NaN, but NaN != x)
    LE = "le"
    GT = "gt"
    GE = "ge"
    EQ = "eq"
    NE = "ne"
    MASK = "mask"  # mask(c, x): x where c != 0, else exactly 0 (never 0 * x: NaN stays out)


class UnOp(enum.Enum):
    NEG = "neg"
    RELU = "relu"
    EXP = "exp"
    LOG = "log"
    TANH = "tanh"
    SIGMOID = "sigmoid"
    SQRT = "sqrt"
    ABS = "abs"
    RECIP = "recip"
    ERF = "erf"


class Reduce(enum.Enum):
    SUM = "sum"
    MAX = "max"
    MIN = "min"


# Algebraic properties as data, for rules and canonical forms.
COMMUTATIVE = frozenset({BinOp.ADD, BinOp.MUL, BinOp.MAX, BinOp.MIN, BinOp.EQ, BinOp.NE})
ASSOCIATIVE = frozenset({BinOp.ADD, BinOp.MUL, BinOp.MAX, BinOp.MIN})
COMPARISONS = frozenset({BinOp.LT, BinOp.LE, BinOp.GT, BinOp.GE, BinOp.EQ, BinOp.NE})
# f(0) == 0: applying these to an out-of-bounds read keeps it zero.
ZERO_PRESERVING = frozenset({UnOp.NEG, UnOp.RELU, UnOp.TANH, UnOp.SQRT, UnOp.ABS, UnOp.ERF})


@dataclass(frozen=True)
class Iter:
    """An iterator with its half-open range ``lo:hi``."""

    name: str
    lo: int
    hi: int

    @property
    def extent(self) -> int:
        return max(self.hi - self.lo, 0)

    @property
    def symbol(self) -> sympy.Symbol:
        return iterator_symbol(self.name)

    def __repr__(self) -> str:
        return f"{self.name} in {self.lo}:{self.hi}"


@dataclass(frozen=True)
class Tensor:
    """A program input."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"

    @property
    def rank(self) -> int:
        return len(self.shape)

    def bounds(self) -> tuple[tuple[int, int], ...]:
        """The in-bounds index range ``(lo, hi)`` of each dimension."""
        return tuple((0, n) for n in self.shape)

    def __getitem__(self, indices) -> "Access":
        return Access(self, indices if isinstance(indices, tuple) else (indices,))


class Expr:
    """Base of body nodes. Operators build nodes: ``a * b``, ``a + 1``, ``-a``."""

    def __add__(self, other): return Binary(BinOp.ADD, self, as_expr(other))
    def __radd__(self, other): return Binary(BinOp.ADD, as_expr(other), self)
    def __sub__(self, other): return Binary(BinOp.SUB, self, as_expr(other))
    def __rsub__(self, other): return Binary(BinOp.SUB, as_expr(other), self)
    def __mul__(self, other): return Binary(BinOp.MUL, self, as_expr(other))
    def __rmul__(self, other): return Binary(BinOp.MUL, as_expr(other), self)
    def __truediv__(self, other): return Binary(BinOp.DIV, self, as_expr(other))
    def __rtruediv__(self, other): return Binary(BinOp.DIV, as_expr(other), self)
    def __neg__(self): return Unary(UnOp.NEG, self)


def as_expr(x) -> Expr:
    if isinstance(x, Expr):
        return x
    if isinstance(x, (int, float)):
        return Const(float(x))
    raise TypeError(f"cannot use {x!r} ({type(x).__name__}) as an expression")


@dataclass(frozen=True, eq=True)
class Const(Expr):
    value: float


@dataclass(frozen=True, eq=True)
class Access(Expr):
    """``source[indices]`` where source is an input ``Tensor`` or a ``Scope``."""

    source: "Tensor | Scope"
    indices: tuple[sympy.Expr, ...]

    def __post_init__(self):
        object.__setattr__(self, "indices", tuple(sympy.sympify(i) for i in self.indices))


@dataclass(frozen=True, eq=True)
class Binary(Expr):
    op: BinOp
    lhs: Expr
    rhs: Expr


@dataclass(frozen=True, eq=True)
class Unary(Expr):
    op: UnOp
    x: Expr


@dataclass(frozen=True, eq=True)
class Scope(Expr):
    """``name[traversal] = reduce[summation] body``; ``name`` is only a printing hint."""

    traversal: tuple[Iter, ...]
    summation: tuple[Iter, ...]
    body: Expr
    reduce: Reduce = Reduce.SUM
    name: str | None = field(default=None, compare=False)
    dtype: str = field(default="float32", compare=False)

    @cached_property
    def shape(self) -> tuple[int, ...]:
        return tuple(it.extent for it in self.traversal)

    @property
    def rank(self) -> int:
        return len(self.traversal)

    def bounds(self) -> tuple[tuple[int, int], ...]:
        return tuple((it.lo, it.hi) for it in self.traversal)

    @cached_property
    def iterators(self) -> dict[str, Iter]:
        return {it.name: it for it in self.traversal + self.summation}

    def __getitem__(self, indices) -> Access:
        if not isinstance(indices, tuple):
            indices = (indices,)
        return Access(self, indices)

    def __repr__(self) -> str:
        from ir.printer import to_text
        return to_text(self)

    def _repr_latex_(self) -> str:
        from ir.printer import to_latex
        return f"$${to_latex(self)}$$"


def _scope_hash(self: Scope) -> int:
    h = self.__dict__.get("_hash")
    if h is None:
        h = hash((self.traversal, self.summation, self.body, self.reduce))
        object.__setattr__(self, "_hash", h)
    return h


Scope.__hash__ = _scope_hash  # cached: scopes nest deeply and are hashed often


def _cached_hash(cls, fields: tuple[str, ...]) -> None:
    """``cls``'s hash cached on the instance: a body of n nested terms would otherwise cost
    n^2 to hash node by node (``flops`` counts distinct terms of a 32-term sum)."""
    def __hash__(self) -> int:
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash(tuple(getattr(self, f) for f in fields))
            object.__setattr__(self, "_hash", h)
        return h
    cls.__hash__ = __hash__


_cached_hash(Access, ("source", "indices"))
_cached_hash(Binary, ("op", "lhs", "rhs"))
_cached_hash(Unary, ("op", "x"))


def index_iterators(index: sympy.Expr) -> frozenset[str]:
    """Names of the iterators an index expression depends on."""
    return frozenset(s.name for s in index.free_symbols)


def children(e: Expr) -> tuple[Expr, ...]:
    """Direct body sub-expressions (a scope accessed from a body is *not* a child: it is a source)."""
    if isinstance(e, Binary):
        return (e.lhs, e.rhs)
    if isinstance(e, Unary):
        return (e.x,)
    if isinstance(e, Scope):
        return (e.body,)
    return ()


def product_factors(e: Expr) -> list[Expr]:
    """The factors of the product tree at the top of ``e`` (``[e]`` if it is no product)."""
    if isinstance(e, Binary) and e.op is BinOp.MUL:
        return product_factors(e.lhs) + product_factors(e.rhs)
    return [e]


MAX_POWER = 4  # integer powers up to this are products to the rules ((a - b)**4: 5 terms)


def integer_power(e: Expr) -> tuple[Expr, int] | None:
    """``(x, n)`` if ``e`` is ``x ** n`` with ``n`` an integer in ``1..MAX_POWER``: a product
    of ``n`` copies of ``x``, exactly (torch's ``pow`` by 2 is ``x * x``)."""
    if isinstance(e, Binary) and e.op is BinOp.POW and isinstance(e.rhs, Const) and \
            float(e.rhs.value).is_integer() and 1 <= e.rhs.value <= MAX_POWER:
        return e.lhs, int(e.rhs.value)
    return None


def build_product(factors: list[Expr]) -> Expr:
    """``f0 * f1 * ...`` (left-nested), ``1`` for no factors: the inverse of product_factors."""
    if not factors:
        return Const(1.0)
    out = factors[0]
    for f in factors[1:]:
        out = Binary(BinOp.MUL, out, f)
    return out


def selection(e: Expr) -> tuple[Expr, Expr, Expr] | None:
    """``(c, a, b)`` if ``e`` is the body ``where(c, a, b)`` builds:
    ``mask(c, a) + mask(eq(c, 0), b)`` (either order of the sum), else None."""
    if not (isinstance(e, Binary) and e.op is BinOp.ADD):
        return None
    for x, y in ((e.lhs, e.rhs), (e.rhs, e.lhs)):
        if isinstance(x, Binary) and x.op is BinOp.MASK and isinstance(y, Binary) \
                and y.op is BinOp.MASK and isinstance(y.lhs, Binary) and y.lhs.op is BinOp.EQ:
            c = x.lhs
            if {y.lhs.lhs, y.lhs.rhs} == {c, Const(0.0)}:
                return c, x.rhs, y.rhs
    return None


def affine_terms(e: sympy.Expr) -> tuple[dict[str, int], int] | None:
    """``({iterator: coefficient}, constant)`` if ``e`` is affine with integer coefficients
    (zero coefficients dropped), else None (floor, mod, products of iterators)."""
    coeffs: dict[str, int] = {}
    const = 0
    for term, c in sympy.expand(e).as_coefficients_dict().items():
        if not c.is_Integer:
            return None
        if term == 1:
            const += int(c)
        elif term.is_Symbol:
            coeffs[term.name] = coeffs.get(term.name, 0) + int(c)
        else:
            return None
    return {k: v for k, v in coeffs.items() if v}, const


def walk(e: Expr):
    """Yield every body node under ``e`` (pre-order), not descending into accessed scopes."""
    yield e
    for c in children(e):
        yield from walk(c)


def accesses(e: Expr) -> list[Access]:
    return [n for n in walk(e) if isinstance(n, Access)]


def free_iterators(e: Expr) -> frozenset[str]:
    """Iterators a body expression depends on (a scope binds its own)."""
    if isinstance(e, Access):
        out = frozenset()
        for i in e.indices:
            out |= index_iterators(i)
        return out
    if isinstance(e, Scope):
        return free_iterators(e.body) - {it.name for it in e.traversal + e.summation}
    out = frozenset()
    for c in children(e):
        out |= free_iterators(c)
    return out


def inputs(e: Expr) -> dict[str, Tensor]:
    """Input tensors read anywhere under ``e``, nested scopes included, by name."""
    found: dict[str, Tensor] = {}
    seen: set[int] = set()

    def visit(x: Expr):
        for a in accesses(x.body if isinstance(x, Scope) else x):
            if isinstance(a.source, Tensor):
                found.setdefault(a.source.name, a.source)
            elif id(a.source) not in seen:
                seen.add(id(a.source))
                visit(a.source)

    visit(e)
    return found


def rename_inputs(e: Expr, names: dict[str, str]) -> Expr:
    """``e`` with its input tensors renamed by ``names`` (others kept); scopes shared in
    ``e`` stay shared."""
    memo: dict[int, Expr] = {}

    def visit(x: Expr) -> Expr:
        if id(x) in memo:
            return memo[id(x)]
        if isinstance(x, Access):
            source = x.source
            if isinstance(source, Tensor):
                source = Tensor(names.get(source.name, source.name), source.shape, source.dtype)
            else:
                source = visit(source)
            out = Access(source, x.indices)
        elif isinstance(x, Scope):
            out = Scope(x.traversal, x.summation, visit(x.body), x.reduce, x.name, x.dtype)
        elif isinstance(x, Binary):
            out = Binary(x.op, visit(x.lhs), visit(x.rhs))
        elif isinstance(x, Unary):
            out = Unary(x.op, visit(x.x))
        else:
            out = x
        memo[id(x)] = out
        return out

    return visit(e)


def sub_scopes(root: Scope) -> list[Scope]:
    """All scopes reachable from ``root`` (itself last), dependencies before users."""
    order: list[Scope] = []
    seen: set[int] = set()

    def visit(s: Scope):
        if id(s) in seen:
            return
        seen.add(id(s))
        for a in accesses(s.body):
            if isinstance(a.source, Scope):
                visit(a.source)
        order.append(s)

    visit(root)
    return order
