"""Choices that hold over a size range: a compiled graph is kept to the sizes where its choice
is the right one.

A rewrite is an identity at every size, but which form is faster can flip inside the range of
a symbolic size: ``(a @ b) @ c`` against ``a @ (b @ c)`` when ``a``'s rows cross
``k m n / (k m + m n - k n)``. Ollie chooses a region's form at the hints, by measurement.
Here the chosen form and its alternative (the original nodes, or the best derived program
when the original was kept) are traced with symbolic sizes and their multiply-adds counted
with torch's flop formulas, as polynomials in the graph's size symbols. Where the count agrees
with the measurement at the hints and the polynomials cross inside the symbol's range, the
chosen form holds on the hints' side of the crossing (``s >= k`` or ``s <= k``). Where every
crossing hands a region back to its original nodes on one side of one symbol, that side runs
the original graph, picked per call by the size (``one_branch``, then
``ollie.capture.size_branches``). Otherwise the graph is guarded to the hints' side: Dynamo
keeps those guards with the compiled graph and compiles again on the other side, where Ollie
chooses again, by measurement. A choice that holds over the whole range adds neither, so a
graph without a crossing is compiled once, as torch.compile compiles it.

Only one-symbol crossings of inference graphs are guarded: a backward graph is compiled after
Dynamo has installed its guards.

Whether a rewritten graph runs faster compiled or as it is (library calls) can flip too, with
no count to tell where (Inductor's column sum of a tall matrix falls behind ``torch.sum`` as
the rows grow). With one size symbol it is measured again at ``larger_size``; where the
winner differs, ``by_size`` picks per call, by the symbol's value against the geometric mean
of the two sizes: a branch, so that no size compiles again.
"""
from __future__ import annotations

import math

import sympy
import torch
import torch.fx as fx

from ollie.capture import contractions

FAR = 1 << 31  # where an unbounded size range is taken to end
SCALE = 8      # a size-dependent choice is measured again at the hint times this ...
SAMPLE_BYTES = 1 << 28  # ... or less, so that the sample inputs stay under this


def flops(nodes, renaming: dict | None = None) -> sympy.Expr:
    """Flops of the contractions among ``nodes``, a polynomial in the size symbols;
    ``renaming`` maps a traced graph's symbols to the graph's."""
    total = sum((count for _, count in contractions.counted(nodes)), sympy.Integer(0))
    return total.xreplace(renaming) if renaming else total


def renaming(traced: fx.GraphModule, metas: list) -> dict:
    """The traced graph's size symbols as the graph's size expressions, read off the inputs."""
    mapping = {}
    for placeholder, meta in zip(traced.graph.find_nodes(op="placeholder"), metas):
        for mine, theirs in zip(placeholder.meta["val"].shape, meta.shape):
            if isinstance(mine, torch.SymInt) and isinstance(mine.node.expr, sympy.Symbol):
                mapping[mine.node.expr] = theirs.node.expr if isinstance(theirs, torch.SymInt) \
                    else sympy.Integer(theirs)
    return mapping


def bounds(chosen: sympy.Expr, other: sympy.Expr, shape_env) -> tuple | None:
    """``(symbol, low, high)``: the range around the symbol's hint where ``chosen`` does no
    more multiply-adds than ``other`` (``low``/``high`` None where that side is open), or None
    when no guard is due (the counts do not cross, involve several symbols, or disagree with
    the measurement at the hints)."""
    diff = sympy.expand(chosen - other)
    if len(diff.free_symbols) != 1:
        return None
    (s,) = diff.free_symbols
    hint = shape_env.backed_var_to_val.get(s)
    if hint is None or diff.subs(s, hint) > 0:
        return None  # the count prefers the alternative here: the measurement decides alone
    lower, upper = _range(s, shape_env)
    roots = [round(complex(r).real, 6) for r in sympy.Poly(diff, s).nroots()
             if abs(complex(r).imag) < 1e-9]
    below = [r for r in roots if lower < r < hint]
    above = [r for r in roots if hint < r < upper]
    low = math.ceil(max(below)) if below else None  # a size at a crossing is a tie: kept
    high = math.floor(min(above)) if above else None
    if low is None and high is None:
        return None
    return s, low, high


def guard(symbol: sympy.Symbol, low: int | None, high: int | None, sizes: list) -> bool:
    """Install ``low <= symbol <= high`` as guards of the graph being compiled, through a
    SymInt of ``sizes`` that is the symbol itself; whether one was found."""
    for size in sizes:
        if isinstance(size, torch.SymInt) and size.node.expr == symbol:
            if low is not None:
                _record(size >= low)
            if high is not None:
                _record(size <= high)
            return True
    return False


def _record(condition: torch.SymBool) -> None:
    """Evaluating a size condition records it as a guard of the graph being compiled."""
    if not bool(condition):  # the hint always lies inside the range it is guarded to
        raise AssertionError(f"ollie: a size guard excludes its own hint: {condition}")


def guard_near_hints(example_inputs, factor: int) -> dict[sympy.Symbol, int]:
    """Guard every size symbol of ``example_inputs`` to at most ``factor`` times its hint;
    those bounds (``near_hints``; empty when the sizes are static)."""
    held, guarded = near_hints(example_inputs, factor), set()
    for x in example_inputs:
        for size in x.shape if isinstance(x, torch.Tensor) else [x]:
            if isinstance(size, torch.SymInt) and size.node.expr in held and \
                    size.node.expr not in guarded:
                guarded.add(size.node.expr)
                _record(size <= held[size.node.expr])
    return held


def near_hints(example_inputs, factor: int) -> dict[sympy.Symbol, int]:
    """Each size symbol of ``example_inputs`` (a dim's whole size) -> ``factor`` times its
    hint."""
    held = {}
    for x in example_inputs:
        for size in x.shape if isinstance(x, torch.Tensor) else [x]:
            if isinstance(size, torch.SymInt) and isinstance(size.node.expr, sympy.Symbol):
                symbol = size.node.expr
                held.setdefault(symbol,
                                factor * int(size.node.shape_env.backed_var_to_val[symbol]))
    return held


def one_branch(crossings: list) -> tuple | None:
    """``(symbol, low, high)``: where the rewritten graph runs, when every crossing (bounds,
    whether the other form is the original nodes) hands over to the original nodes on the
    same side of the same symbol (the tightest bound); None otherwise."""
    if not crossings or not all(against for _, against in crossings):
        return None
    bounds = [b for b, _ in crossings]
    if len({s for s, _, _ in bounds}) != 1:
        return None
    lows = [low for _, low, high in bounds if low is not None and high is None]
    highs = [high for _, low, high in bounds if high is not None and low is None]
    if len(lows) == len(bounds):
        return bounds[0][0], max(lows), None
    if len(highs) == len(bounds):
        return bounds[0][0], None, min(highs)
    return None


def outside(example_inputs, symbol: sympy.Symbol, low: int | None, high: int | None
            ) -> int | None:
    """A size outside ``low <= symbol <= high`` to measure the other side at: half the way
    down from ``low``, or twice ``high`` (None when none is valid or small enough)."""
    if low is not None:
        return (low - 1) // 2 + 1 if low > 2 else None
    value = 2 * high + 1
    return value if value <= (larger_size(example_inputs, symbol) or 0) else None


def describe(symbol, low: int | None, high: int | None) -> str:
    return " and ".join(([f"{symbol} >= {low}"] if low is not None else []) +
                        ([f"{symbol} <= {high}"] if high is not None else []))


def _range(s: sympy.Symbol, shape_env) -> tuple[float, float]:
    r = shape_env.var_to_range.get(s)
    if r is None:
        return 0, FAR
    upper = r.upper if r.upper.is_finite else FAR
    return float(r.lower), float(min(upper, FAR))


def lone_symbol(example_inputs) -> tuple[sympy.Symbol, tuple[int, int | None]] | None:
    """The graph's one size symbol and where a call carries it (input index, and dim, or
    None for a size passed as an int), or None when no size or several sizes vary."""
    symbols, where = set(), None
    for i, x in enumerate(example_inputs):
        sizes = list(x.shape) if isinstance(x, torch.Tensor) else [x]
        for d, size in enumerate(sizes):
            if isinstance(size, torch.SymInt):
                symbols |= size.node.expr.free_symbols
                if where is None and isinstance(size.node.expr, sympy.Symbol):
                    where = size.node.expr, (i, d if isinstance(x, torch.Tensor) else None)
    if len(symbols) != 1 or where is None:
        return None
    return where


def carrier(example_inputs, symbol: sympy.Symbol) -> tuple[int, int | None] | None:
    """Where a call carries ``symbol`` itself (input index, and dim, or None for an int)."""
    for i, x in enumerate(example_inputs):
        for d, size in enumerate(list(x.shape) if isinstance(x, torch.Tensor) else [x]):
            if isinstance(size, torch.SymInt) and size.node.expr == symbol:
                return i, d if isinstance(x, torch.Tensor) else None
    return None


def sizes(example_inputs) -> list:
    """Every size of ``example_inputs`` (a tensor's dims, an int itself)."""
    return [d for x in example_inputs
            for d in (x.shape if isinstance(x, torch.Tensor) else [x])]


def larger_size(example_inputs, symbol: sympy.Symbol) -> int | None:
    """Up to ``SCALE`` times the symbol's hint, as large as keeps the sample inputs under
    ``SAMPLE_BYTES`` (None when no size above the hint does)."""
    from ollie.capture.samples import concrete

    def sample_bytes(value: int) -> int:
        return sum(math.prod(concrete(d, {symbol: value}) for d in x.shape) * x.element_size()
                   for x in example_inputs if isinstance(x, torch.Tensor))
    at_hint = hint(example_inputs, symbol)
    value = at_hint * SCALE
    while value > at_hint and sample_bytes(value) > SAMPLE_BYTES:
        value //= 2
    return value if value > at_hint else None


def hint(example_inputs, symbol: sympy.Symbol) -> int:
    """The size the graph was compiled at for ``symbol``."""
    for x in example_inputs:
        for size in (x.shape if isinstance(x, torch.Tensor) else [x]):
            if isinstance(size, torch.SymInt):
                return int(size.node.shape_env.backed_var_to_val[symbol])
    raise ValueError(f"no size of the inputs carries {symbol}")


def crossover(example_inputs, symbol: sympy.Symbol, larger: int) -> int:
    """Where a choice measured at the hint and at ``larger`` switches when they differ: the
    geometric mean of the two sizes (times grow about as products of sizes do)."""
    return math.isqrt(hint(example_inputs, symbol) * larger)


def by_size(small, large, where: tuple[int, int | None], threshold: int, boxed: bool = True):
    """A callable running ``small`` where the size at ``where`` is at most ``threshold``,
    else ``large``: boxed (one list of arguments, AOTAutograd's convention), or not
    (Dynamo's)."""
    index, dim = where

    def pick(args):
        size = args[index] if dim is None else args[index].shape[dim]
        return small if size <= threshold else large
    if not boxed:
        return lambda *args: pick(args)(*args)

    def run(args):
        return pick(args)(args)
    run._boxed_call = True
    return run
