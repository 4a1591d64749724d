"""How to read one tensor access ``X[e_1, ..., e_d]`` as a whole array: a backend-neutral plan.

Inside a scope every iterator has a range, so an access denotes an array over the iterators
its indices use (its *labels*). Reading it is one of, cheapest first:

- ``ZeroRead``: every index tuple lands outside ``X`` (reads outside are 0).
- ``SliceRead``: each index is ``iterator + c`` or a constant, no iterator used twice. The
  array is a *window* of ``X`` (slice, then zero-pad what lies outside), with constant dims
  selected away. Labels are in ``X``'s dim order. A dim indexed ``c - iterator`` (all
  coefficients negative, as in a transposed conv's flipped kernel) is flipped first.
- ``StridedRead``: affine indices with non-negative integer coefficients (``h + r - 1``,
  ``2*i``, ``X[i, i]``): a strided view of the window, ``stride[label] = sum_d coef * s_d``
  with ``s_d`` the window's runtime strides. Conv windows, strides and diagonals are views.
- ``FlatRead``: floor-div / mod indices that stay in bounds and whose row-major flat offset
  is still affine (reshapes that merge or split dims): a strided view of ``X.contiguous()``
  with constant strides.
- ``SplitRead``: where no flat view fits, indices that take an iterator ``n`` apart by
  digits, ``n // d`` and ``n % d`` (a reshape that merges dims after a permute: attention's
  heads joined, a Conv1d's output read as rows): one of the reads above over ``n = d·hi +
  lo``, whose two axes then merge into ``n``'s. No index arrays: one read for every size.
- ``GatherRead``: anything else: index arrays (clamped positions) and a validity mask, both
  depending only on shapes, computed here once with numpy.

Labels of strided, flat and gather reads follow the scope's *grid order* (traversal
iterators, then summation iterators).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import sympy

from ir.interpreter import Interpreter
from ir.nodes import Access, affine_terms, index_iterators

# Numeric affinity checks of floor/mod index groups evaluate the group's whole grid; beyond
# this many points the read is a gather instead.
FLAT_CHECK_LIMIT = 1 << 22


@dataclass(frozen=True)
class Window:
    """Source positions ``start:stop`` of one dim of a source of extent ``size``.

    The window may reach outside ``0:size``; that part is zero padding.
    """

    start: int
    stop: int
    size: int

    @property
    def slice(self) -> tuple[int, int]:
        """The in-bounds part ``lo:hi`` to slice before padding."""
        return max(self.start, 0), min(self.stop, self.size)

    @property
    def pad(self) -> tuple[int, int]:
        """Zeros to add before and after the in-bounds part."""
        return max(-self.start, 0), max(self.stop - self.size, 0)


@dataclass(frozen=True)
class ZeroRead:
    labels: tuple[str, ...] = ()


@dataclass(frozen=True)
class SliceRead:
    windows: tuple[Window, ...]
    select: tuple[int | None, ...]  # per dim: a position in the window to select, or None
    labels: tuple[str, ...]          # the kept dims' iterators, in source dim order
    flips: tuple[int, ...] = ()      # source dims to reverse first (read backwards)


@dataclass(frozen=True)
class StridedRead:
    windows: tuple[Window, ...]
    labels: tuple[str, ...]             # grid order
    sizes: tuple[int, ...]              # extent of each label
    coeffs: tuple[tuple[int, ...], ...]  # per label: the coefficient of each window dim's stride
    flips: tuple[int, ...] = ()


@dataclass(frozen=True)
class FlatRead:
    labels: tuple[str, ...]
    sizes: tuple[int, ...]
    strides: tuple[int, ...]  # in elements of the contiguous source
    offset: int


@dataclass(frozen=True)
class GatherRead:
    labels: tuple[str, ...]
    positions: tuple[np.ndarray, ...]  # per dim: int64, rank len(labels), size 1 where unused
    mask: np.ndarray | None           # bool, True where every index is in bounds; None: always


@dataclass(frozen=True)
class SplitRead:
    inner: "SliceRead | StridedRead | FlatRead"  # over the digits of the split iterators
    # (iterator, (its high digit, extent), (its low digit, extent)): a digit no index reads
    # is not among the inner read's labels
    merges: tuple[tuple[str, tuple[str, int], tuple[str, int]], ...]


ReadPlan = ZeroRead | SliceRead | StridedRead | FlatRead | SplitRead | GatherRead


def plan_read(access: Access, ranges: dict[str, tuple[int, int]],
              grid: tuple[str, ...]) -> ReadPlan:
    """The cheapest plan to read ``access`` with iterators over ``ranges`` (name -> lo, hi)."""
    bounds = access.source.bounds()
    assert len(bounds) == len(access.indices), f"rank mismatch in {access}"
    used = set().union(*(index_iterators(i) for i in access.indices)) if bounds else set()
    labels = tuple(n for n in grid if n in used)
    if any(ranges[n][1] <= ranges[n][0] for n in labels):
        return ZeroRead()  # an empty range: nothing is read (callers treat empty grids first)
    terms = [affine_terms(i) for i in access.indices]
    if all(t is not None for t in terms):
        # in positions (index - lo); a dim read backwards (all coefficients < 0) is flipped
        sizes = [hi - lo for lo, hi in bounds]
        terms = [(coeffs, const - lo) for (coeffs, const), (lo, _) in zip(terms, bounds)]
        flips = tuple(d for d, (coeffs, _) in enumerate(terms)
                      if coeffs and all(c < 0 for c in coeffs.values()))
        for d in flips:
            coeffs, const = terms[d]
            terms[d] = ({n: -c for n, c in coeffs.items()}, sizes[d] - 1 - const)
        windows = []
        for (coeffs, const), size in zip(terms, sizes):
            spans = [_span(c, *ranges[n]) for n, c in coeffs.items()]
            first = const + sum(s[0] for s in spans)
            last = const + sum(s[1] for s in spans)
            if last < 0 or first >= size:
                return ZeroRead()
            windows.append(Window(first, last + 1, size))
        if all(c >= 0 for coeffs, _ in terms for c in coeffs.values()):
            return _window_read(terms, tuple(windows), flips, ranges, labels)
    numeric = _numeric_read(access, ranges, labels)
    if isinstance(numeric, GatherRead):  # no flat view: by digits, or with index arrays
        return _split_read(access, ranges, grid) or numeric
    return numeric


def _split_read(access: Access, ranges, grid) -> SplitRead | ZeroRead | None:
    """The read over the digits ``n // d``, ``n % d`` of the iterators its indices take apart
    (each from 0, a multiple of ``d`` long), where that makes every index affine; else None."""
    parts: dict[sympy.Expr, tuple[sympy.Symbol, int]] = {}
    for index in access.indices:
        for part in index.atoms(sympy.floor, sympy.Mod):
            digit = _digit(part)
            if digit is None:
                return None
            parts[part] = digit
    divisors = {n.name: {d for m, d in parts.values() if m == n} for n, _ in parts.values()}
    if not divisors or any(len(ds) > 1 for ds in divisors.values()):
        return None
    taken = set(ranges) | set(grid)
    new_ranges, new_grid, merges, names = dict(ranges), [], [], {}
    for label in grid:
        if label not in divisors:
            new_grid.append(label)
            continue
        (d,), (lo, hi) = divisors[label], ranges[label]
        if lo != 0 or hi % d:
            return None
        high, low = _fresh(f"{label}_hi", taken), _fresh(f"{label}_lo", taken)
        new_ranges.update({high: (0, hi // d), low: (0, d)})
        new_grid += [high, low]
        merges.append((label, (high, hi // d), (low, d)))
        names[label] = (high, low)
    if len(merges) != len(divisors):
        return None
    swap = {part: sympy.Symbol(names[n.name][isinstance(part, sympy.Mod)], integer=True)
            for part, (n, _) in parts.items()}
    indices = tuple(i.xreplace(swap) for i in access.indices)
    if any(s.name in divisors for i in indices for s in i.free_symbols):
        return None  # an iterator also read whole
    inner = plan_read(Access(access.source, indices), new_ranges, tuple(new_grid))
    if isinstance(inner, (GatherRead, SplitRead)):
        return None
    return inner if isinstance(inner, ZeroRead) else SplitRead(inner, tuple(merges))


def _digit(part) -> tuple[sympy.Symbol, int] | None:
    """``(n, d)`` for ``floor(n / d)`` or ``Mod(n, d)``: an iterator and a divisor > 1."""
    if isinstance(part, sympy.Mod):
        n, d = part.args
    else:
        coeff, n = part.args[0].as_coeff_Mul()
        if not (coeff.is_Rational and coeff.p == 1):
            return None
        d = coeff.q
    return (n, int(d)) if n.is_Symbol and sympy.sympify(d).is_Integer and int(d) > 1 else None


def _fresh(name: str, taken: set) -> str:
    while name in taken:
        name += "_"
    taken.add(name)
    return name


def _span(coeff: int, lo: int, hi: int) -> tuple[int, int]:
    """Least and greatest value of ``coeff * it`` for ``it`` in ``lo:hi`` (non-empty)."""
    a, b = coeff * lo, coeff * (hi - 1)
    return min(a, b), max(a, b)


def _window_read(terms, windows, flips, ranges, labels) -> SliceRead | StridedRead:
    simple = all(len(c) == 0 or list(c.values()) == [1] for c, _ in terms)
    named = [n for c, _ in terms for n in c]
    if simple and len(named) == len(set(named)):
        select = tuple(None if c else 0 for c, _ in terms)
        return SliceRead(windows, select, tuple(named), flips)
    sizes = tuple(ranges[n][1] - ranges[n][0] for n in labels)
    coeffs = tuple(tuple(c.get(n, 0) for c, _ in terms) for n in labels)
    return StridedRead(windows, labels, sizes, coeffs, flips)


def _numeric_read(access: Access, ranges, labels) -> FlatRead | GatherRead | ZeroRead:
    interp = Interpreter({})
    interp.ranges = dict(ranges)
    positions, oks = [], []
    for index, (lo, hi) in zip(access.indices, access.source.bounds()):
        arr = interp.index(index).aligned(labels).astype(np.int64) - lo
        positions.append(arr)
        oks.append((arr >= 0) & (arr < hi - lo))
    if any(not ok.any() for ok in oks):
        return ZeroRead()
    if all(ok.all() for ok in oks):
        flat = _flat_view(access, positions, labels, ranges)
        if flat is not None:
            return flat
    mask = None
    for ok in oks:
        if not ok.all():
            mask = ok if mask is None else mask & ok
    clamped = tuple(np.clip(p, 0, max(n - 1, 0)) for p, n in zip(positions, access.source.shape))
    return GatherRead(labels, clamped, mask)


def _flat_view(access, positions, labels, ranges) -> FlatRead | None:
    """A ``FlatRead`` if the row-major flat offset is affine (non-negative) in the labels."""
    shape = access.source.shape
    row_major = [math.prod(shape[d + 1:]) for d in range(len(shape))]
    # Dims sharing iterators form groups; each group's flat offset is checked on its grid.
    groups: list[tuple[set[int], set[int]]] = []  # (dims, label axes)
    for d, p in enumerate(positions):
        axes = {a for a in range(len(labels)) if p.shape[a] > 1}
        joined = [g for g in groups if g[1] & axes]
        dims, ax = {d}, set(axes)
        for g in joined:
            groups.remove(g)
            dims |= g[0]
            ax |= g[1]
        groups.append((dims, ax))
    sizes = tuple(ranges[n][1] - ranges[n][0] for n in labels)
    strides = [0] * len(labels)
    offset = 0
    for dims, axes in groups:
        if math.prod(sizes[a] for a in axes) > FLAT_CHECK_LIMIT:
            return None
        flat = sum(positions[d] * row_major[d] for d in dims)
        base = int(flat.reshape(-1)[0])
        fit = np.full(flat.shape, base, dtype=np.int64)
        for a in axes:
            step = int(np.take(flat, 1, axis=a).reshape(-1)[0]) - base
            if step < 0:
                return None
            strides[a] = step
            fit = fit + step * np.arange(flat.shape[a]).reshape(
                [-1 if b == a else 1 for b in range(flat.ndim)])
        if not np.array_equal(np.broadcast_to(flat, fit.shape), fit):
            return None
        offset += base
    return FlatRead(labels, sizes, tuple(strides), offset)
