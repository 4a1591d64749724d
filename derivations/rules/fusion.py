"""Expression splitting and fusion across scope boundaries; distributivity and factoring.

* ``split_terms``:  ``O[t] = sum[s] (P ± Q)``  →  ``O[t] = A[t] ± B[t]``, ``A = sum[s] P``,
  ``B = sum[s] Q`` (a summation iterator a term does not read multiplies it by its extent in
  both forms, so every term keeps all of ``s``).
* ``fuse_terms``: the converse: ``O[t] = A[e] ± B[e']`` with ``A = sum[s] P``, ``B =
  sum[s'] Q`` and equal summation ranges  →  ``O[t] = sum[s] (P[e] ± Q[e'][s' := s])``
  (reads inlined as in :mod:`derivations.rules.merging`, guards included). Among more terms
  (``A + p + B + q``: products and their biases) the first such pair becomes one term.
* ``hoist``: a computed factor that reads only some of the iterators becomes an
  intermediate tensor: ``sum[k] A[i,k] * (B[k,j] + C[k,j])`` = ``sum[k] A[i,k] * H[k,j]``,
  ``H[k,j] = B[k,j] + C[k,j]`` (computed once per ``(k,j)``, not once per ``(i,k,j)``).
* ``distribute`` / ``factor``: the body as a polynomial over its *atoms* (reads and any
  non-polynomial sub-term), in sympy's canonical expanded or factored form. No AC rules:
  the canonical form is computed, not searched for. ``factor`` exposes common factors as
  factors of the top product, where the egglog ``split`` moves sums inward past them:
  ``sum[i] (x[i]*w[j] + y[i]*w[j]) = w[j] * sum[i] (x[i] + y[i])``.
"""
from __future__ import annotations

import sympy

from ir.nodes import (
    Access, Binary, BinOp, Const, Reduce, Scope, Unary, free_iterators, integer_power, walk,
)
from derivations.index_rules import build_product, product_factors, renamed, scope_like
from derivations.rules.merging import inlined

__all__ = ["split_terms", "fuse_terms", "hoist", "distribute", "factor"]

_SIGN = {BinOp.ADD: 1, BinOp.SUB: -1}


def split_terms(scope: Scope) -> list[Scope]:
    body = scope.body
    if scope.reduce is not Reduce.SUM or not scope.summation or \
            not (isinstance(body, Binary) and body.op in _SIGN):
        return []
    parts = []
    for k, term in enumerate((body.lhs, body.rhs)):
        part = Scope(scope.traversal, scope.summation, term, Reduce.SUM,
                     name=f"{scope.name or 'S'}_term{k}", dtype=scope.dtype)
        parts.append(part[tuple(it.symbol for it in scope.traversal)])
    return [scope_like(scope, scope.traversal, (), Binary(body.op, *parts))]


def fuse_terms(scope: Scope) -> list[Scope]:
    if scope.summation or scope.reduce is not Reduce.SUM:
        return []
    terms = _signed_terms(scope.body, 1)
    for i in range(len(terms)):
        for j in range(i + 1, len(terms)):
            fused = _fused(scope, terms[i], terms[j])
            if fused is None:
                continue
            if len(terms) == 2:
                return [fused]
            # more terms (a sum of products and biases): the pair becomes one term
            part = scope_like(fused, fused.traversal, fused.summation, fused.body,
                              name=f"{scope.name or 'S'}_fused")
            rest = [t for k, t in enumerate(terms) if k not in (i, j)]
            read = part[tuple(it.symbol for it in scope.traversal)]
            return [scope_like(scope, scope.traversal, (), _chain([(1, read)] + rest))]
    return []


def _signed_terms(e, sign: int) -> list[tuple[int, object]]:
    """``e`` as the terms of a sum, each with its sign: ``a - (b + c)`` is +a, -b, -c."""
    if isinstance(e, Binary) and e.op in _SIGN:
        return _signed_terms(e.lhs, sign) + _signed_terms(e.rhs, sign * _SIGN[e.op])
    return [(sign, e)]


def _chain(terms: list[tuple[int, object]]):
    """The sum of signed terms, the first one added."""
    out = terms[0][1]
    for sign, term in terms[1:]:
        out = Binary(BinOp.ADD if sign > 0 else BinOp.SUB, out, term)
    return out


def _fused(scope: Scope, first, then) -> Scope | None:
    """``scope`` computing ``±A ± B`` as one sum, ``sum[s] (P ± Q)``, where ``A = sum[s] P``
    and ``B = sum[s'] Q`` have equal summation ranges and ``A`` is added; else None."""
    (sign_a, a), (sign_b, b) = first, then
    if sign_a < 0 or not all(isinstance(x, Access) and isinstance(x.source, Scope) and
                             x.source.summation and x.source.reduce is Reduce.SUM
                             for x in (a, b)):
        return None
    sa, sb = a.source.summation, b.source.summation
    key = lambda it: (it.lo, it.hi)  # noqa: E731
    if sorted(map(key, sa)) != sorted(map(key, sb)):
        return None
    taken = {it.name for it in scope.traversal}
    sums = []
    for it in sa:
        sums.append(renamed(it, it.lo, it.hi, taken | {s.name for s in sums}))
    pool = sorted(range(len(sa)), key=lambda k: key(sa[k]))
    order_b = sorted(range(len(sb)), key=lambda k: key(sb[k]))
    sums_b = [None] * len(sb)
    for ka, kb in zip(pool, order_b):
        sums_b[kb] = sums[ka]
    pa, pb = inlined(scope, a, sums), inlined(scope, b, sums_b)
    if pa is None or pb is None:
        return None
    op = BinOp.ADD if sign_b > 0 else BinOp.SUB
    return scope_like(scope, scope.traversal, tuple(sums), Binary(op, pa, pb))


def hoist(scope: Scope) -> list[Scope]:
    factors = product_factors(scope.body)
    order = scope.traversal + scope.summation
    out = []
    for n, f in enumerate(factors):
        if isinstance(f, (Access, Const)):
            continue
        used = free_iterators(f)
        if not used or len(used) == len(order):
            continue
        its = tuple(it for it in order if it.name in used)
        h = Scope(its, (), f, Reduce.SUM, name=f"{scope.name or 'S'}_factor", dtype=scope.dtype)
        rest = factors[:n] + [h[tuple(it.symbol for it in its)]] + factors[n + 1:]
        out.append(scope_like(scope, scope.traversal, scope.summation, build_product(rest)))
    return out


# -- the body as a polynomial over atoms --------------------------------------------------------
class _Atoms:
    def __init__(self):
        self.sym: dict[object, sympy.Symbol] = {}
        self.atom: dict[sympy.Symbol, object] = {}

    def to_poly(self, e) -> sympy.Expr:
        if isinstance(e, Const):
            return sympy.Integer(int(e.value)) if float(e.value).is_integer() \
                else sympy.Float(e.value)
        if isinstance(e, Binary) and e.op in (BinOp.ADD, BinOp.SUB, BinOp.MUL):
            x, y = self.to_poly(e.lhs), self.to_poly(e.rhs)
            return x + y if e.op is BinOp.ADD else x - y if e.op is BinOp.SUB else x * y
        if isinstance(e, Unary) and e.op.value == "neg":
            return -self.to_poly(e.x)
        power = integer_power(e)
        if power is not None:
            return self.to_poly(power[0]) ** power[1]  # x**2 is x*x: it distributes
        if e not in self.sym:
            s = sympy.Symbol(f"a{len(self.sym)}", commutative=True)
            self.sym[e], self.atom[s] = s, e
        return self.sym[e]

    def to_expr(self, p: sympy.Expr):
        if p.is_Symbol:
            return self.atom[p]
        if p.is_Number:
            return Const(float(p))
        if isinstance(p, sympy.Add):
            terms = sorted(p.args, key=sympy.default_sort_key)
            out = self.to_expr(terms[0])
            for t in terms[1:]:
                coeff, rest = t.as_coeff_Mul()
                if coeff.is_negative:
                    out = Binary(BinOp.SUB, out, self.to_expr(-t))
                else:
                    out = Binary(BinOp.ADD, out, self.to_expr(t))
            return out
        if isinstance(p, sympy.Mul):
            coeff, rest = p.as_coeff_Mul()
            factors = [self.to_expr(f) for f in sympy.Mul.make_args(rest)]
            out = factors[0]
            for f in factors[1:]:
                out = Binary(BinOp.MUL, out, f)
            return out if coeff == 1 else Binary(BinOp.MUL, Const(float(coeff)), out)
        if isinstance(p, sympy.Pow) and p.exp.is_Integer and int(p.exp) > 0:
            return _by_squaring(self.to_expr(p.base), int(p.exp))
        raise ValueError(f"not a polynomial over atoms: {p}")


def _by_squaring(x, n: int):
    """``x**n`` as products by repeated squaring, each square one shared term (computed
    once by the lowerings): ``x**4 = (x*x) * (x*x)``, 2 products instead of 3."""
    if n == 1:
        return x
    half = _by_squaring(x, n // 2)
    square = Binary(BinOp.MUL, half, half)
    return square if n % 2 == 0 else Binary(BinOp.MUL, square, x)


def _rewrite(scope: Scope, how) -> list[Scope]:
    atoms = _Atoms()
    poly = atoms.to_poly(scope.body)
    if not atoms.sym:
        return []
    new = how(poly)  # as a polynomial the body is canonical already: like terms combined
    if any(isinstance(x, sympy.Pow) and not (x.exp.is_Integer and x.exp > 0)
           for x in sympy.preorder_traversal(new)):
        return []
    if new.free_symbols != set(atoms.atom):  # terms cancelled: a dropped read would turn a
        return []                            # NaN (log x, x < 0; a NaN input) into a number
    body = atoms.to_expr(new)
    if body == scope.body or new == poly and _size(body) >= _size(scope.body):
        return []  # already canonical, up to the order of its terms: nothing gained
    return [scope_like(scope, scope.traversal, scope.summation, body)]


def _size(e) -> int:
    """Operations of ``e``, a repeated sub-term counted once (the lowerings compute it once)."""
    return len({n for n in walk(e) if isinstance(n, (Binary, Unary))})


def distribute(scope: Scope) -> list[Scope]:
    """``(a + b) * c`` → ``a*c + b*c`` (only when the body has a sum to expand)."""
    return _rewrite(scope, sympy.expand)


def factor(scope: Scope) -> list[Scope]:
    """``a*c + b*c`` → ``(a + b) * c`` (only when the body is a sum with a common factor)."""
    return _rewrite(scope, lambda p: sympy.factor_terms(p) if isinstance(p, sympy.Add) else p)
