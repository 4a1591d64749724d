"""Choices over a size range: a chain whose best order flips inside a symbolic size's range is
guarded to its side of the crossing, and compiled again on the other side."""
from types import SimpleNamespace

import sympy
import torch
from torch.utils._sympy.value_ranges import ValueRanges

from ollie import OllieBackend, Options
from ollie.capture import size_range

s = sympy.Symbol("s0", positive=True, integer=True)


def env(hint, low=2, high=sympy.oo):
    return SimpleNamespace(backed_var_to_val={s: hint}, var_to_range={s: ValueRanges(low, high)})


# (a @ b) @ c against a @ (b @ c) for a: (s, 512), b: (512, 512), c: (512, 64)
LEFT, RIGHT = s * 512 * 512 + s * 512 * 64, 512 * 512 * 64 + s * 512 * 64


def test_the_crossing_of_two_chain_orders_bounds_each_side():
    assert size_range.bounds(RIGHT, LEFT, env(384)) == (s, 64, None)  # exactly 64: a tie
    assert size_range.bounds(LEFT, RIGHT, env(32)) == (s, None, 64)


def test_no_guard_where_the_choice_holds_over_the_range_or_the_count_disagrees():
    assert size_range.bounds(RIGHT, LEFT, env(384, low=100)) is None  # never crosses
    assert size_range.bounds(LEFT, RIGHT, env(384)) is None  # measured faster, counted more
    assert size_range.bounds(s * 10, s * 10, env(384)) is None
    t = sympy.Symbol("s1", positive=True, integer=True)
    assert size_range.bounds(s * t, s * 100, env(384)) is None  # two symbols: not guarded


def chain(a, b, c):
    return (a @ b) @ c


def test_the_chain_is_compiled_once_per_side_of_its_crossing():
    backend = OllieBackend(Options(cache=False, budget_s=1.0))
    f = torch.compile(chain, backend=backend)
    g = torch.Generator().manual_seed(0)
    b, c = torch.randn(512, 512, generator=g), torch.randn(512, 64, generator=g)
    for rows in (512, 384, 32, 1024, 16, 256):
        a = torch.randn(rows, 512, generator=g)
        assert torch.allclose(f(a, b, c), chain(a, b, c), rtol=1e-3, atol=1e-2), rows
    # static 512, then symbolic on each side of 64 rows: 1024, 16 and 256 compile nothing
    assert backend.graphs == 3
    large, small = (r.regions[0] for r in backend.reports[1:3])
    assert large.kernel is not None and large.size_range.endswith(">= 64")
    assert small.kernel is None and small.size_range.endswith("<= 64")
