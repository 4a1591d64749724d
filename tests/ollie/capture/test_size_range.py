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


def symbolic_inputs(rows_hint=96):
    """A (rows, 64) and a (64, 8) fake tensor, the rows a size symbol hinted at ``rows_hint``."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, \
        StatelessSymbolicContext

    mode = FakeTensorMode(shape_env=ShapeEnv())
    x = mode.from_tensor(torch.randn(rows_hint, 64), symbolic_context=StatelessSymbolicContext(
        dynamic_sizes=[DimDynamic.DYNAMIC, DimDynamic.STATIC], constraint_sizes=[None, None]))
    return [x, mode.from_tensor(torch.randn(64, 8), static_shapes=True)]


def test_a_choice_is_measured_again_at_a_larger_size_within_a_memory_cap(monkeypatch):
    inputs = symbolic_inputs()
    symbol, where = size_range.lone_symbol(inputs)
    assert where == (0, 0) and size_range.hint(inputs, symbol) == 96
    assert size_range.larger_size(inputs, symbol) == 96 * size_range.SCALE
    monkeypatch.setattr(size_range, "SAMPLE_BYTES", 96 * 4 * 64 * 3 + 64 * 8 * 4)
    assert size_range.larger_size(inputs, symbol) == 96 * size_range.SCALE // 4  # halved twice
    monkeypatch.setattr(size_range, "SAMPLE_BYTES", 1)
    assert size_range.larger_size(inputs, symbol) is None
    static = [torch.randn(4, 4)]
    assert size_range.lone_symbol(static) is None


def test_a_call_picks_by_its_size():
    run = size_range.by_size(lambda args: "small", lambda args: "large", (1, 0), threshold=100)
    assert run([None, torch.empty(100, 2)]) == "small"
    assert run([None, torch.empty(101, 2)]) == "large"
    assert size_range.by_size(lambda a: 1, lambda a: 2, (0, None), 5)([6]) == 2  # an int size


def test_a_rewritten_graph_runs_compiled_or_uncompiled_by_size(monkeypatch):
    # measured faster compiled at the hint and uncompiled at the larger size
    from ollie.capture import backend as backend_mod, graph_pass

    def decided(original, rewritten, example_inputs, report, options, key, at=None):
        return key.endswith("-at-" + str(next(iter(at.values())))) if at else \
            not key.endswith(backend_mod.EAGERLY)
    monkeypatch.setattr(graph_pass, "compare", decided)
    # (the whole graph's own eager-or-compiled choice is not under test: compiled)
    monkeypatch.setattr(OllieBackend, "_faster_of_eager", lambda self, gm, compiled, *a: compiled)
    backend = OllieBackend(Options(cache=False, budget_s=1.0))
    f = torch.compile(chain, backend=backend)
    g = torch.Generator().manual_seed(0)
    b, c = torch.randn(256, 256, generator=g), torch.randn(256, 8, generator=g)
    for rows in (64, 96, 40, 900):  # static, then symbolic at 96: one branch on each side
        a = torch.randn(rows, 256, generator=g)
        assert torch.allclose(f(a, b, c), chain(a, b, c), rtol=1e-3, atol=1e-3), rows
    report = backend.reports[-1]
    assert report.adopted and not report.runs_eagerly
    assert report.by_size.startswith("uncompiled where") and "> 271" in report.by_size  # √(96·768)
    assert backend.graphs == 2  # a branch, not a recompile
