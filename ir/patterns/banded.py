"""G2BMM / GBMM: products along a band, ``i + d*(j - w)``, matched by iterator roles.

    g2bmm: out[b.., i, j] = sum[c] q[b.., i, c] * k[b.., i + d*(j - w) + o, c]    j in 0:2w+1
    gbmm:  out[b.., i, c] = sum[j] a[b.., i, j] * v[b.., i + d*(j - w) + o, c]

In the iterator table the band iterator ``j`` (extent ``2w+1``) enters exactly one dim of
the right operand, with coefficient ``d``, beside the row iterator ``i`` with coefficient 1;
``j`` is a traversal iterator in G2BMM and a summation iterator (read whole by the left
operand) in GBMM. Every other dim of both operands is read whole: by batch iterators (in
both), ``i`` (left), and the feature iterator ``c``. The constant ``o`` shifts the band (0 for
the Longformer band); rows outside the right operand read 0.
"""
from __future__ import annotations

from dataclasses import dataclass

from ir.nodes import Access, Reduce, Scope
from ir.patterns.table import IteratorTable, iterator_table, product_terms


@dataclass(frozen=True)
class BandedMatch:
    kind: str                  # "g2bmm" or "gbmm"
    lhs: Access                # g2bmm: q[batch, i, c]; gbmm: a[batch, i, j]
    rhs: Access                # k / v[batch, i + d*(j - w) + offset, c]
    batch: tuple[str, ...]     # in output order
    row: str                   # i
    band: str                  # j
    feature: str               # c: summed in g2bmm, kept in gbmm
    w: int
    d: int
    offset: int
    lhs_dims: tuple[int, ...]  # lhs source dims of batch..., i, then c (g2bmm) or j (gbmm)
    rhs_dims: tuple[int, ...]  # rhs source dims of batch..., the band row, c
    out_perm: tuple[int, ...]  # result axes (batch.., i, j) or (batch.., i, c) in traversal order


def match_g2bmm(scope: Scope) -> BandedMatch | None:
    """``scope`` as a G2BMM (the band iterator is a traversal iterator), or None."""
    return _match(scope, "g2bmm")


def match_gbmm(scope: Scope) -> BandedMatch | None:
    """``scope`` as a GBMM (the band iterator is summed), or None."""
    return _match(scope, "gbmm")


def _match(scope: Scope, kind: str) -> BandedMatch | None:
    if scope.reduce is not Reduce.SUM or len(scope.summation) != 1:
        return None
    reads, scale, other = product_terms(scope.body)
    if len(reads) != 2 or other or scale != 1.0:
        return None
    t = iterator_table(scope)
    return _try(t, 0, 1, kind) or _try(t, 1, 0, kind)


def _try(t: IteratorTable, left: int, right: int, kind: str) -> BandedMatch | None:
    lhs = [t.whole(left, d) for d in range(t.accesses[left].source.rank)]
    rhs = [t.whole(right, d) for d in range(t.accesses[right].source.rank)]
    if None in lhs or len(set(lhs)) != len(lhs) or rhs.count(None) != 1:
        return None
    row_dim = rhs.index(None)
    a = t.affine[right][row_dim]
    if a is None or len(a.terms) != 2 or len(set(rhs) - {None}) != len(rhs) - 1:
        return None
    (p, cp), (q, cq) = a.terms
    # i: the row iterator, coefficient 1, a traversal iterator of the left operand
    for (i, ci), (j, d) in (((p, cp), (q, cq)), ((q, cq), (p, cp))):
        if ci == 1 and d >= 1 and i in lhs and i in t.traversal and i not in rhs \
                and j not in rhs:
            break
    else:
        return None
    (summed,) = t.summation
    if kind == "g2bmm":
        c = summed
        if j not in t.traversal or j in lhs or c not in lhs or c not in rhs:
            return None
        result_last = j
    else:
        c = next((n for n in rhs if n is not None and n not in lhs), None)
        if j != summed or j not in lhs or c is None or c not in t.traversal:
            return None
        result_last = c
    batch = tuple(n for n in t.traversal if n in lhs and n in rhs)
    if len(lhs) != len(batch) + 2 or len(rhs) != len(batch) + 2:
        return None
    result = batch + (i, result_last)
    extent = t.extent(j)
    if sorted(result) != sorted(t.traversal) or extent % 2 == 0:
        return None
    w = (extent - 1) // 2
    return BandedMatch(
        kind, t.accesses[left], t.accesses[right], batch, i, j, c, w, d, a.const + d * w,
        tuple(lhs.index(n) for n in batch + (i, c if kind == "g2bmm" else j)),
        tuple(rhs.index(n) for n in batch) + (row_dim, rhs.index(c)),
        tuple(result.index(n) for n in t.traversal))
