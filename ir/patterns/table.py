"""The iterator table of one scope: for every iterator, every place it indexes a source.

Index expressions are first rewritten as *source positions over 0-based iterators*: an
iterator ``h in lo:hi`` becomes ``h0 + lo`` with ``h0`` in ``0:hi-lo``, and the source's lower
bound is subtracted, so ``x[h+r-1]`` over ``h in 0:6, r in 0:3`` reads position ``h+r-1`` of a
tensor and ``S[i+2]`` over ``i in -2:4`` reads position ``i`` of a scope whose range starts at
0. Matchers compare positions, never names or sizes of particular operators.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from ir.nodes import Access, Binary, BinOp, Const, Expr, Scope, affine_terms, walk

TRAVERSAL, SUMMATION = "traversal", "summation"


@dataclass(frozen=True)
class Affine:
    """``sum(coeff * iterator) + const``: a source position, iterators 0-based."""

    terms: tuple[tuple[str, int], ...]  # (iterator, coefficient), in the scope's iterator order
    const: int

    def coeff(self, name: str) -> int:
        return dict(self.terms).get(name, 0)

    @property
    def iterators(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.terms)

    @property
    def single(self) -> str | None:
        """The iterator when the position is ``it + const`` (one iterator, coefficient 1)."""
        return self.terms[0][0] if len(self.terms) == 1 and self.terms[0][1] == 1 else None


@dataclass(frozen=True)
class Use:
    """Iterator enters dim ``dim`` of access ``access`` with stride ``coeff``."""

    access: int  # position in ``IteratorTable.accesses``
    dim: int
    coeff: int | None  # None: through floor-div or mod (not an affine stride)


@dataclass(frozen=True)
class Row:
    name: str
    kind: str  # TRAVERSAL or SUMMATION
    extent: int
    uses: tuple[Use, ...]

    @property
    def accesses(self) -> frozenset[int]:
        return frozenset(u.access for u in self.uses)

    def uses_in(self, access: int) -> tuple[Use, ...]:
        return tuple(u for u in self.uses if u.access == access)


@dataclass(frozen=True)
class IteratorTable:
    scope: Scope
    accesses: tuple[Access, ...]                   # every access of the body, in body order
    positions: tuple[tuple[sympy.Expr, ...], ...]  # per access and dim: the 0-based position
    affine: tuple[tuple[Affine | None, ...], ...]  # the same, parsed; None if not affine
    rows: tuple[Row, ...]                          # traversal iterators, then summation

    def row(self, name: str) -> Row:
        return next(r for r in self.rows if r.name == name)

    @property
    def traversal(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.rows if r.kind == TRAVERSAL)

    @property
    def summation(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.rows if r.kind == SUMMATION)

    def extent(self, name: str) -> int:
        return self.row(name).extent

    def whole(self, access: int, dim: int) -> str | None:
        """The iterator reading dim ``dim`` of ``access`` whole: position ``it``, extent = size."""
        a = self.affine[access][dim]
        it = a.single if a is not None and a.const == 0 else None
        size = self.accesses[access].source.shape[dim]
        return it if it is not None and self.extent(it) == size else None

    def window(self, access: int, dim: int) -> str | None:
        """The iterator of a slice read ``it + c`` that stays inside the dim, else None."""
        a = self.affine[access][dim]
        it = a.single if a is not None else None
        size = self.accesses[access].source.shape[dim]
        return it if it is not None and 0 <= a.const and a.const + self.extent(it) <= size \
            else None

    def __str__(self) -> str:
        def where(u: Use) -> str:
            a = self.accesses[u.access]
            stride = "floor/mod" if u.coeff is None else f"*{u.coeff}"
            return f"{getattr(a.source, 'name', None) or '?'}#{u.access}[{u.dim}]{stride}"
        lines = [f"{'iterator':10} {'kind':9} {'extent':>6}  uses"]
        for r in self.rows:
            lines.append(f"{r.name:10} {r.kind:9} {r.extent:6}  "
                         + (", ".join(map(where, r.uses)) or "-"))
        return "\n".join(lines)


def parse_affine(e: sympy.Expr, order: dict[str, int] | None = None) -> Affine | None:
    """``e`` as an ``Affine`` with integer coefficients, or None (floor, mod, products)."""
    parsed = affine_terms(e)
    if parsed is None:
        return None
    terms, const = parsed
    order = order or {}
    kept = sorted(((n, c) for n, c in terms.items() if c), key=lambda t: (order.get(t[0], 0), t[0]))
    return Affine(tuple(kept), const)


def split_floor(e: sympy.Expr) -> tuple[Affine, tuple[tuple[int, Affine, int], ...]] | None:
    """``e = affine + sum(coeff * floor(numerator / den))``: ``(affine, ((coeff, numerator,
    den), ...))`` with affine numerators, or None. Grouped conv channels read so."""
    rest, floors = sympy.Integer(0), []
    for term in sympy.Add.make_args(sympy.expand(e)):
        coeff, core = term.as_coeff_Mul()
        if isinstance(core, sympy.floor) and coeff.is_Integer:
            num, den = core.args[0].as_numer_denom()
            inner = parse_affine(num)
            if inner is None or not den.is_Integer:
                return None
            floors.append((int(coeff), inner, int(den)))
        else:
            rest += term
    affine = parse_affine(rest)
    return None if affine is None else (affine, tuple(floors))


def product_terms(body: Expr) -> tuple[list[Access], float, list[Expr]]:
    """The product tree at the top of ``body``: (access factors, constant scale, the rest)."""
    found: list[Access] = []
    scale, other = 1.0, []

    def visit(e: Expr):
        nonlocal scale
        if isinstance(e, Binary) and e.op is BinOp.MUL:
            visit(e.lhs), visit(e.rhs)
        elif isinstance(e, Access):
            found.append(e)
        elif isinstance(e, Const):
            scale *= e.value
        else:
            other.append(e)
    visit(body)
    return found, scale, other


def positions(access: Access, scope: Scope) -> tuple[sympy.Expr, ...]:
    """The 0-based source positions ``access`` reads, over 0-based iterators of ``scope``."""
    shift = {it.symbol: it.symbol + it.lo for it in scope.traversal + scope.summation if it.lo}
    return tuple(sympy.expand(sympy.sympify(i).subs(shift) - lo if shift else i - lo)
                 for i, (lo, _) in zip(access.indices, access.source.bounds()))


_CACHE: dict[int, tuple[Scope, IteratorTable]] = {}
CACHE_SIZE = 4096


def iterator_table(scope: Scope) -> IteratorTable:
    """The iterator table of ``scope``, cached per scope *object*: a match hands back the
    scope's own accesses (a structurally equal scope elsewhere has other source objects)."""
    hit = _CACHE.get(id(scope))
    if hit is not None and hit[0] is scope:
        return hit[1]
    table = _build(scope)
    if len(_CACHE) >= CACHE_SIZE:
        del _CACHE[next(iter(_CACHE))]  # the oldest entry
    _CACHE[id(scope)] = (scope, table)  # holding the scope keeps its id from being reused
    return table


def _build(scope: Scope) -> IteratorTable:
    order = {it.name: k for k, it in enumerate(scope.traversal + scope.summation)}
    accesses = tuple(n for n in walk(scope.body) if isinstance(n, Access))
    pos = tuple(positions(a, scope) for a in accesses)
    affine = tuple(tuple(parse_affine(p, order) for p in ps) for ps in pos)
    uses: dict[str, list[Use]] = {n: [] for n in order}
    for k, (ps, afs) in enumerate(zip(pos, affine)):
        for d, (p, af) in enumerate(zip(ps, afs)):
            if af is not None:
                for n, c in af.terms:
                    uses[n].append(Use(k, d, c))
            else:
                for n in sorted(s.name for s in p.free_symbols):
                    uses[n].append(Use(k, d, None))
    rows = tuple(Row(it.name, TRAVERSAL if k < len(scope.traversal) else SUMMATION, it.extent,
                     tuple(uses[it.name]))
                 for k, it in enumerate(scope.traversal + scope.summation))
    return IteratorTable(scope, accesses, pos, affine, rows)
