"""Matmul / BatchMatmul: a sum over a product of two plain reads, matched by iterator roles.

In the iterator table of ``C[b, i, j] = sum[k] A[b, i, k] * B[b, k, j]`` every iterator has
one of four roles: *batch* (traversal, in both operands), *m* (traversal, left operand only),
*n* (traversal, right only) and *k* (summation, in both). Each role may hold several
iterators (they flatten into one matrix dim: a broadcast batch dim of one operand is simply
part of m or n); dims may come in any order (the match records the permutations that repair
the layout). Reads must be plain: every dim indexed by one iterator, ``it + c`` staying inside
the dim (a slice), or by a constant (a selected dim). Constant factors become ``scale``.
"""
from __future__ import annotations

from dataclasses import dataclass

from ir.nodes import Access, Reduce, Scope
from ir.patterns.table import IteratorTable, iterator_table, product_terms


@dataclass(frozen=True)
class MatmulMatch:
    kind: str                     # "matmul" (no batch iterators) or "batch_matmul"
    lhs: Access                   # indexed by batch, m and k iterators
    rhs: Access                   # indexed by batch, k and n iterators
    batch: tuple[str, ...]        # each role's iterators: traversal ones in output order,
    m: tuple[str, ...]
    n: tuple[str, ...]
    k: tuple[str, ...]            # summation ones in the scope's order
    lhs_dims: tuple[int, ...]     # the lhs source dim of each of batch + m + k
    rhs_dims: tuple[int, ...]     # the rhs source dim of each of batch + k + n
    out_perm: tuple[int, ...]     # result axes (batch + m + n) taken in traversal order
    scale: float = 1.0            # constant factors of the product


def plain_axes(t: IteratorTable, access: int) -> tuple[str | None, ...] | None:
    """Per dim of a plain read: its iterator (a slice ``it + c`` inside the dim) or None (a
    constant inside the dim); None if any dim is read otherwise or an iterator repeats."""
    axes = []
    shape = t.accesses[access].source.shape
    for d, a in enumerate(t.affine[access]):
        if a is not None and not a.terms and 0 <= a.const < shape[d]:
            axes.append(None)
        elif t.window(access, d) is not None:
            axes.append(a.single)
        else:
            return None
    named = [n for n in axes if n is not None]
    return tuple(axes) if len(set(named)) == len(named) else None


def match_matmul(scope: Scope) -> MatmulMatch | None:
    """``scope`` as ``(lhs @ rhs) * scale`` with layout permutations, or None."""
    if scope.reduce is not Reduce.SUM or not scope.summation:
        return None
    reads, scale, other = product_terms(scope.body)
    if len(reads) != 2 or other:
        return None
    t = iterator_table(scope)
    axes = [plain_axes(t, 0), plain_axes(t, 1)]
    if None in axes:
        return None
    found = [(m, _copies(t, m, axes[left], axes[1 - left])) for left in (0, 1)
             if (m := _assign(t, axes, left, 1 - left, scale))]
    if not found:
        return None
    identity = tuple(range(len(scope.traversal)))
    # Prefer fewer copies into and out of the product, then no output permutation, then the
    # matrix on the left of a matrix-vector product.
    return min(found, key=lambda f: (f[1], f[0].out_perm != identity,
                                     not f[0].m and bool(f[0].n)))[0]


def _copies(t: IteratorTable, m: MatmulMatch, lhs_axes, rhs_axes) -> int:
    """How many of the operands and the result must be copied to lay them out for the
    product, each stored densely in its axes' order: an operand is a view when its groups
    (batch, rows, columns) come in its storage order, or with the last two swapped (a
    transposed matrix); the result when it comes in the traversal order. Dims of size one
    are left out: they move for free (batch 1 of a 1x1 convolution read as a product)."""
    def kept(names) -> list[str]:
        return [n for n in names if n is not None and t.extent(n) != 1]

    def is_view(stored, groups) -> bool:
        groups = [g for g in (kept(g) for g in groups) if g]
        orders = [groups] + ([groups[:-2] + groups[:-3:-1]] if len(groups) >= 2 else [])
        return any([n for g in order for n in g] == kept(stored) for order in orders)

    lhs_view = is_view(lhs_axes, [m.batch, m.m, m.k])
    rhs_view = is_view(rhs_axes, [m.batch, m.k, m.n])
    result_view = kept(m.batch + m.m + m.n) == kept(t.traversal)
    return (not lhs_view) + (not rhs_view) + (not result_view)


def _assign(t: IteratorTable, axes, left: int, right: int, scale: float) -> MatmulMatch | None:
    a = {n for n in axes[left] if n}
    b = {n for n in axes[right] if n}
    if any(n not in a | b for n in t.traversal) or any(n not in a & b for n in t.summation):
        return None  # an output axis no operand has, or a sum inside one operand
    batch = tuple(n for n in t.traversal if n in a and n in b)
    m = tuple(n for n in t.traversal if n in a and n not in b)
    n_ = tuple(n for n in t.traversal if n in b and n not in a)
    k = t.summation
    if batch and not (m and n_):
        return None  # a batch of dot or matrix-vector products: a plain contraction
    result = batch + m + n_
    return MatmulMatch(
        "batch_matmul" if batch else "matmul", t.accesses[left], t.accesses[right],
        batch, m, n_, k,
        tuple(axes[left].index(x) for x in batch + m + k),
        tuple(axes[right].index(x) for x in batch + k + n_),
        tuple(result.index(x) for x in t.traversal), scale)
