"""Sums of products of labelled arrays: matching the matmul family, or an einsum spec.

Backend-neutral: factors are given by their labels (the iterator of each axis), the output
by the labels it keeps. A two-factor product with one contracted iterator, at most one free
iterator per side and shared leading batch iterators is a matrix product -- ``mm``, ``bmm``,
``matmul`` (several batch dims), ``mv`` or ``dot`` -- after at most a transpose or permute of
each operand. Anything else is an einsum.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MatmulPlan:
    op: str                      # "mm" | "bmm" | "matmul" | "mv" | "dot"
    order: tuple[int, int]       # which factor is the left operand, which the right
    perms: tuple[tuple[int, ...] | None, tuple[int, ...] | None]  # axis order per operand


def plan_matmul(factors: list[tuple[str, ...]], out: tuple[str, ...]) -> MatmulPlan | None:
    """A matrix-product plan computing ``sum over the rest of f0 * f1`` with axes ``out``."""
    if len(factors) != 2:
        return None
    for left, right in ((0, 1), (1, 0)):
        plan = _try(factors[left], factors[right], out)
        if plan is not None:
            op, perms = plan
            return MatmulPlan(op, (left, right), perms)
    return None


def _try(a: tuple[str, ...], b: tuple[str, ...], out: tuple[str, ...]):
    if len(set(a)) != len(a) or len(set(b)) != len(b):
        return None
    k = [n for n in a if n in b and n not in out]
    lone = [n for n in a + b if n not in out and not (n in a and n in b)]
    if len(k) != 1 or lone:
        return None
    batch = [n for n in out if n in a and n in b]
    m = [n for n in out if n in a and n not in b]
    n_ = [n for n in out if n in b and n not in a]
    if len(m) > 1 or len(n_) > 1 or list(out) != batch + m + n_:
        return None
    if batch and not (m and n_):
        return None  # a batched matrix-vector product: leave it to einsum
    left, right = batch + m + k, batch + k + n_
    perms = (_perm(a, left), _perm(b, right))
    if batch:
        op = "bmm" if len(batch) == 1 else "matmul"
    else:
        op = {(1, 1): "mm", (1, 0): "mv", (0, 0): "dot"}.get((len(m), len(n_)))
        if op is None:
            return None  # vector-matrix: the swapped order finds it as mv
    return op, perms


def _perm(have: tuple[str, ...], want: list[str]) -> tuple[int, ...] | None:
    perm = tuple(have.index(n) for n in want)
    return None if perm == tuple(range(len(perm))) else perm


def einsum_letters(labels: tuple[str, ...]) -> dict[str, str]:
    """A letter per label: the label itself when it is one free ASCII letter."""
    letters: dict[str, str] = {}
    for n in labels:
        if len(n) == 1 and n.isascii() and n.isalpha() and n not in letters.values():
            letters[n] = n
    pool = (c for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
            if c not in letters.values())
    for n in labels:
        if n not in letters:
            letters[n] = next(pool, None)
            assert letters[n] is not None, f"more than 52 iterators in one einsum: {labels}"
    return letters


def einsum_spec(factors: list[tuple[str, ...]], out: tuple[str, ...]) -> str:
    """``"ik,kj->ij"`` for factors ``(i, k), (k, j)`` and output ``(i, j)``."""
    names = tuple(dict.fromkeys(n for f in factors for n in f)) + out
    letters = einsum_letters(tuple(dict.fromkeys(names)))
    return ",".join("".join(letters[n] for n in f) for f in factors) + "->" + \
        "".join(letters[n] for n in out)
