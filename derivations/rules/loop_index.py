"""One function of the loop index (for :mod:`joining`).

An unrolled loop (``torch.stack([f(x[i]) for i in range(n)])``, which Dynamo hands over as
``n`` selects, ``n`` copies of ``f`` and a ``cat``) leaves pieces one slot wide that differ
only in constants: piece ``i`` reads ``x[i, ...]``. On its slot the cat coordinate ``c``
*is* ``i``, so a constant that varies across the pieces as ``a*i + b`` may be written
``a*c + b`` in each piece without changing it; once every varying constant is, the pieces are
one function and join::

    O[c, t] = P0[c, t] + P1[c - 1, t] + ...     Pi over c in 0:1 = f(x[i, t])
            = J[c, t],  J over 0:n = f(x[c, t])

The constants may sit in the scopes a piece reads (``M_i[r, j] = sum[k] x[i, k] * w[k, j]``,
each row's own ``mm``): such a scope gets the loop index as a new dim, batched over the
loop (``M[l, r, j] = sum[k] x[l, k] * w[k, j]``), and every piece reads it at its slot.
"""
from __future__ import annotations

from collections import defaultdict

import sympy

from ir.canonical import fingerprint
from ir.nodes import Access, Expr, Iter, Scope
from derivations.index_rules import fresh_name, scope_like
from derivations.rules.iterator_split import map_accesses
from derivations.rules.pieces import PLACEHOLDER, Piece

__all__ = ["loop_indexed"]


def loop_indexed(pieces: list[Piece]) -> list[Piece]:
    """``pieces`` where those of one template (equal but for index constants, in the scopes
    they read too) that sit one slot wide along a coordinate ``d`` have each varying
    constant written as ``a*x_d + b`` (``x_d`` the piece's own iterator of ``d``, equal to
    its slot there): see the module doc."""
    templates: dict[tuple, list[int]] = defaultdict(list)
    for n, p in enumerate(pieces):
        templates[(p.names, _template(p.scope)[0])].append(n)
    out = list(pieces)
    for (_, key), members in templates.items():
        if len(members) < 2:
            continue
        group = [pieces[n] for n in members]
        consts = [_template(p.scope)[1] for p in group]
        for d in range(group[0].scope.rank):
            slots = [p.box[d][0] for p in group]
            if any(p.box[d][1] - p.box[d][0] != 1 for p in group) or len(set(slots)) < 2:
                continue
            fits = [_affine_fit(slots, [c[k] for c in consts]) for k in range(len(consts[0]))]
            if any(f is None for f in fits) or all(f[0] == 0 for f in fits):
                continue
            loop = (key, min(slots), max(slots) + 1)
            for n, p in zip(members, group):
                out[n] = Piece(p.term, p.names, _with_loop_index(p.scope, d, fits, loop), p.box)
            break
    return out


def _template(s: Scope) -> tuple[str, tuple[int, ...]]:
    """(key of ``s`` with every index's constant term blanked -- in the scopes it reads too,
    as deep as they go -- and its own ranges, the constants in a fixed order)."""
    consts: list[int] = []
    memo: dict[int, Scope] = {}

    def blank_index(rest, c):
        consts.append(c)
        return rest

    def blank_source(src: Scope) -> Scope:
        if id(src) not in memo:
            memo[id(src)] = scope_like(src, src.traversal, src.summation,
                                       _recast(src.body, blank_index, blank_source))
        return memo[id(src)]

    body = _recast(s.body, blank_index, blank_source)
    its = lambda group: tuple(Iter(it.name, *PLACEHOLDER) for it in group)  # noqa: E731
    return fingerprint(scope_like(s, its(s.traversal), its(s.summation), body)), tuple(consts)


def _recast(e: Expr, index, source) -> Expr:
    """``e`` with every read's indices ``rest + c`` replaced by ``index(rest, c)`` and every
    scope it reads by ``source(scope)``, reads in ``accesses`` order (a scope's own reads
    when ``source`` first recasts it)."""
    def read(a: Access) -> Access:
        src = source(a.source) if isinstance(a.source, Scope) else a.source
        return Access(src, tuple(index(*_split_constant(i)) for i in a.indices))

    return map_accesses(e, read)


def _split_constant(i) -> tuple[sympy.Expr, int]:
    i = sympy.sympify(i)
    c, rest = i.as_coeff_Add()
    return (rest, int(c)) if c.is_Integer else (i, 0)


def _affine_fit(xs: list[int], ys: list[int]) -> tuple[int, int] | None:
    """Integers ``(a, b)`` with ``y = a*x + b`` for every pair, or None."""
    if len(set(ys)) == 1:
        return 0, ys[0]
    (x0, y0), (x1, y1) = (xs[0], ys[0]), next((x, y) for x, y in zip(xs, ys) if x != xs[0])
    if (y1 - y0) % (x1 - x0):
        return None
    a = (y1 - y0) // (x1 - x0)
    b = y0 - a * x0
    return (a, b) if all(y == a * x + b for x, y in zip(xs, ys)) else None


def _with_loop_index(s: Scope, d: int, fits: list[tuple[int, int]], loop: tuple) -> Scope:
    """``s`` with its ``k``-th index constant replaced by ``a*x + b`` (``fits[k]``), ``x`` the
    loop index: ``x_d`` in ``s`` itself. A scope it reads whose constants vary gets the loop
    index as a new first dim (``M_k[r, j]`` -> ``M[x, r, j]``, ``M[l, r, j]`` computing
    piece ``l``'s ``M_l``): the pieces then read one scope, the loop batched into it.
    ``loop``: (template key, first and last slot + 1) of the pieces, naming that dim."""
    k = iter(range(len(fits)))
    memo: dict[int, tuple[Scope, bool]] = {}

    def rebuild(e: Expr, x) -> tuple[Expr, bool]:
        varied = False

        def index(rest, c):
            nonlocal varied
            slope, offset = fits[next(k)]
            varied |= slope != 0
            return rest + slope * x + offset

        def source(src: Scope) -> Scope:
            if id(src) not in memo:
                it = Iter(fresh_name("l", "loop", _template(src)[0], *loop), loop[1], loop[2])
                body, inner = rebuild(src.body, it.symbol)
                batched = scope_like(src, (it,) + src.traversal, src.summation, body)
                memo[id(src)] = (batched, inner)
            return memo[id(src)][0] if memo[id(src)][1] else src

        def read(a: Access) -> Access:
            nonlocal varied
            src = source(a.source) if isinstance(a.source, Scope) else a.source
            idx = tuple(index(*_split_constant(i)) for i in a.indices)
            if src is not a.source:  # the batched scope, read at this piece's loop index
                varied, idx = True, (x,) + idx
            return Access(src, idx)

        return map_accesses(e, read), varied

    body, _ = rebuild(s.body, s.traversal[d].symbol)
    return scope_like(s, s.traversal, s.summation, body)
