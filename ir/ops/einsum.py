"""einsum: any equation torch accepts, as one scope.

``einsum("bij,bjk->bik", A, B)`` is ``out[b, i, k] = sum[j] A[b, i, j] * B[b, j, k]``: every
subscript letter is one iterator (named by the letter), letters missing from the output are
summation iterators. Supported like torch: implicit output (ellipsis dims first, then the
letters used exactly once, in ASCII order), ``...`` broadcasting (its dims are ``e0, e1..``),
a letter repeated in one operand (a diagonal: the same iterator twice in one access),
size-1 dims broadcast against a larger size (read at index 0), and the sublist form
``einsum(A, [0, 1], B, [1, 2], [0, 2])``.
"""
from __future__ import annotations

from ir.nodes import Scope

from ir.ops._util import OpError, broadcast_shapes, dtype_of, fmt_shape, iters, operand, read, scope

__all__ = ["einsum"]

_ELL = "..."


def _sublist_to_equation(args) -> tuple[str, list]:
    def subscript(n) -> str:
        if n is Ellipsis:
            return _ELL
        if isinstance(n, int) and 0 <= n < 26:
            return chr(ord("A") + n)
        if isinstance(n, int) and 26 <= n < 52:
            return chr(ord("a") + n - 26)
        raise OpError("einsum", f"subscript {n!r} in a sublist is not within [0, 52)")

    ops, subs = list(args[0::2]), list(args[1::2])
    out = None
    if len(args) % 2:  # a trailing output sublist
        out, ops = args[-1], ops[:-1]
    eq = ",".join("".join(subscript(s) for s in sl) for sl in subs)
    if out is not None:
        eq += "->" + "".join(subscript(s) for s in out)
    return eq, ops


def _parse_term(term: str, where: str) -> list[str]:
    """Subscript labels of one term, ``...`` kept as one label."""
    if term.count(_ELL) > 1 or term.replace(_ELL, "").count(".") > 0:
        raise OpError("einsum", f"{where} {term!r}: '.' is only allowed as one ellipsis '...'")
    labels: list[str] = []
    rest = term
    while rest:
        if rest.startswith(_ELL):
            labels.append(_ELL)
            rest = rest[3:]
            continue
        ch, rest = rest[0], rest[1:]
        if not (ch.isascii() and ch.isalpha()):
            raise OpError("einsum", f"{where} {term!r}: invalid subscript {ch!r}, subscripts "
                                    "must be letters in [a-zA-Z]")
        labels.append(ch)
    return labels


def einsum(equation, *operands) -> Scope:
    """torch.einsum(equation, *operands) (operands may also be one list)."""
    if not isinstance(equation, str):  # sublist form: einsum(A, [0, 1], B, [1], [0])
        equation, operands = _sublist_to_equation((equation,) + operands)
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    xs = [operand("einsum", x, f"operand {k}") for k, x in enumerate(operands)]
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    if "-" in lhs or ">" in lhs or "->" in rhs:
        raise OpError("einsum", f"malformed equation {equation!r}: '->' may appear once")
    terms = [_parse_term(t, f"operand {k} subscripts") for k, t in enumerate(lhs.split(","))]
    if not xs:
        raise OpError("einsum", "must provide at least one operand")
    if len(terms) != len(xs):
        raise OpError("einsum", f"the equation {equation!r} has {len(terms)} operand terms "
                                f"but {len(xs)} operands were given")

    # -- sizes of letters and of the ellipsis dims ----------------------------------------
    ell_shapes: list[tuple[int, ...]] = []
    sizes: dict[str, list[tuple[int, int]]] = {}  # letter -> [(operand, size)]
    for k, (labels, x) in enumerate(zip(terms, xs)):
        letters = [l for l in labels if l != _ELL]
        ell_rank = x.rank - len(letters)
        if (_ELL in labels and ell_rank < 0) or (_ELL not in labels and ell_rank != 0):
            raise OpError("einsum", f"operand {k} has {x.rank} dims {fmt_shape(x.shape)} but "
                                    f"its subscripts {''.join(labels)!r} name {len(letters)}"
                                    + (" plus an ellipsis" if _ELL in labels else ""))
        dims = _dims_of(labels, ell_rank)
        if _ELL in labels:
            ell_shapes.append(tuple(x.shape[d] for d, l in zip(range(x.rank), dims)
                                    if l.startswith(_ELL)))
        seen: dict[str, int] = {}
        for d, l in enumerate(dims):
            if l.startswith(_ELL):
                continue
            if l in seen and seen[l] != x.shape[d]:
                raise OpError("einsum", f"subscript {l} is repeated for operand {k} but the "
                                        f"sizes don't match, {seen[l]} != {x.shape[d]}")
            seen[l] = x.shape[d]
        for l, n in seen.items():
            sizes.setdefault(l, []).append((k, n))
    size_of: dict[str, int] = {}
    for l, found in sizes.items():
        big = {n for _, n in found if n != 1}
        if len(big) > 1:
            listed = ", ".join(f"{n} in operand {k}" for k, n in found)
            raise OpError("einsum", f"subscript {l} has sizes that cannot be broadcast "
                                    f"together: {listed}")
        size_of[l] = big.pop() if big else 1
    ell_shape = broadcast_shapes("einsum", *ell_shapes) if ell_shapes else ()
    ell_names = [f"e{d}" for d in range(len(ell_shape))]
    size_of.update(zip(ell_names, ell_shape))

    # -- output subscripts ----------------------------------------------------------------
    if arrow:
        out_labels = _parse_term(rhs, "output subscripts")
        for l in out_labels:
            if l != _ELL and l not in sizes:
                raise OpError("einsum", f"output subscript {l} does not appear in the "
                                        "equation for any input operand")
            if l != _ELL and out_labels.count(l) > 1:
                raise OpError("einsum", f"output subscript {l} appears more than once in the "
                                        "output")
        out_names = []
        for l in out_labels:
            out_names.extend(ell_names if l == _ELL else [l])
    else:
        count = {l: sum(t.count(l) for t in terms) for l in sizes}
        out_names = ell_names + sorted(l for l, c in count.items() if c == 1)
    sum_names = [l for l in sorted(sizes) + ell_names if l not in out_names]

    out = iters(out_names, [size_of[n] for n in out_names])
    summation = iters(sum_names, [size_of[n] for n in sum_names])
    sym = {it.name: it.symbol for it in out + summation}
    body = None
    for labels, x in zip(terms, xs):
        ell_rank = x.rank - len([l for l in labels if l != _ELL])
        dims = _dims_of(labels, ell_rank, len(ell_shape))
        idx = [0 if n == 1 and size_of[l] != 1 else sym[l] for l, n in zip(dims, x.shape)]
        term = read(x, *idx)
        body = term if body is None else body * term
    return scope("einsum", out, summation, body, dtype=dtype_of(*xs))


def _dims_of(labels: list[str], ell_rank: int, full_ell_rank: int | None = None) -> list[str]:
    """The label of each dim of an operand; ellipsis dims are named ``e<d>`` right-aligned
    against the broadcast ellipsis rank (``...<d>`` placeholders while it is unknown)."""
    out: list[str] = []
    for l in labels:
        if l != _ELL:
            out.append(l)
        elif full_ell_rank is None:
            out.extend(f"{_ELL}{d}" for d in range(ell_rank))
        else:
            out.extend(f"e{full_ell_rank - ell_rank + d}" for d in range(ell_rank))
    return out
