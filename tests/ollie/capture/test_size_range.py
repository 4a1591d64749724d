"""Choices over a size range: a chain whose best order flips inside a symbolic size's range
runs its rewrite on one side of the crossing and the original graph on the other (a branch on
the size), or, where the original was kept, is guarded to its side and compiled again on the
other."""
import re
from types import SimpleNamespace

import pytest

import sympy
import torch
from torch.utils._sympy.value_ranges import ValueRanges

from ollie import OllieBackend, Options
from ollie.capture import size_range
from ollie.decision import Decision, Outcome

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


def _chain_at_growing_and_shrinking_rows(name: str) -> OllieBackend:
    from ollie.capture.eager_or_compiled import own_code

    backend = OllieBackend(Options(cache=False, budget_s=1.0))
    f = torch.compile(own_code(chain, name), backend=backend)
    g = torch.Generator().manual_seed(0)
    b, c = torch.randn(512, 512, generator=g), torch.randn(512, 64, generator=g)
    for rows in (512, 384, 32, 1024, 16, 256):
        a = torch.randn(rows, 512, generator=g)
        assert torch.allclose(f(a, b, c), chain(a, b, c), rtol=1e-3, atol=1e-2), rows
    return backend


def test_a_chain_rewritten_above_its_crossing_branches_to_the_original_below_it():
    backend = _chain_at_growing_and_shrinking_rows("chain_rows")
    if not backend.reports[0].adopted:  # a 3x lead lost to a disturbed timing: once more
        backend = _chain_at_growing_and_shrinking_rows("chain_rows_again")
    decisions = [(r.title, r.adopted, [x.decision.text for x in r.regions]) for r in backend.reports]
    # static 512, then one symbolic graph: a (b c) from 64 rows, (a b) c below, no recompile
    assert backend.graphs == 2, (backend.notes, decisions)
    report = backend.reports[1]
    region = report.regions[0]
    assert region.kernel is not None and region.size_branch and \
        region.size_range.endswith(">= 64")
    # below 64 rows the original does fewer multiply-adds; measured, its lead may last longer.
    # Both graphs are library calls only: the original runs as it is there, uncompiled; the
    # rewrite, compiled already to be timed against the original, is timed uncompiled too
    below = re.search(r"the original graph, uncompiled, where s\d+ < (\d+)", report.by_size)
    assert below and 64 <= int(below.group(1)) <= 128, report.by_size
    assert report.eager_timing is not None


def test_below_a_branch_running_the_original_as_it_is_dynamos_graph_runs_itself():
    """Outside AOTAutograd's and Ollie's wrappers: the Dynamo graph's own forward."""
    from ollie.capture import size_branches

    through_artifact = []

    def backend(gm, example_inputs):
        def compiled(*args):
            through_artifact.append(True)
            return gm.forward(*args)
        rows = next(x.shape[0] for x in (n.meta["example_value"] for n in
                                         gm.graph.find_nodes(op="placeholder"))
                    if isinstance(x, torch.Tensor) and x.shape[1] == 32).node.expr
        return size_branches.eager_outside(gm, compiled, example_inputs, (rows, 64, None))
    f = torch.compile(chain, backend=backend, dynamic=True)
    b, c = torch.randn(32, 32), torch.randn(32, 4)
    for rows, compiled in ((96, True), (63, False), (64, True)):
        a = torch.randn(rows, 32)
        through_artifact.clear()
        torch.testing.assert_close(f(a, b, c), chain(a, b, c))
        assert through_artifact == [True] * compiled, rows


def test_below_a_branch_that_runs_eagerly_optimize_calls_the_function_itself(monkeypatch):
    from ollie.capture import graph_pass, size_branches
    import ollie

    measured = graph_pass.compare
    monkeypatch.setattr(graph_pass, "compare", lambda *a, **k: True if size_branches.OUTSIDE
                        in a[5] else measured(*a, **k))  # the original runs eagerly below
    monkeypatch.setattr(size_branches, "measured_up_to", lambda *a: a[4] - 1)  # no further
    f = ollie.optimize(chain, cache=False, budget_s=1.0)
    g = torch.Generator().manual_seed(0)
    b, c = torch.randn(512, 512, generator=g), torch.randn(512, 64, generator=g)
    with torch.no_grad():
        for rows in (512, 384):
            a = torch.randn(rows, 512, generator=g)
            assert torch.allclose(f(a, b, c), chain(a, b, c), rtol=1e-3, atol=1e-2), rows
        (sizes,) = f.backend.eager_sizes
        assert sizes.holds((torch.randn(63, 512), b, c), {}, False) and \
            not sizes.holds((torch.randn(64, 512), b, c), {}, False)
        monkeypatch.setattr(f, "_compiled", lambda *a: pytest.fail("went through Dynamo"))
        a = torch.randn(16, 512, generator=g)
        assert torch.allclose(f(a, b, c), chain(a, b, c), rtol=1e-3, atol=1e-2)
    assert "ollie.optimize calls the function itself" in f.backend.reports[-1].by_size


@pytest.mark.parametrize("leads_us, up_to", [
    ((20, -20), 96),   # the lines through the leads at 64 and 128 rows cross at 96
    ((-5, -40), 63),   # the chosen form already wins at 64 rows, where it does fewer madds
    ((30, 10), 128),   # still ahead at twice: no further than measured
])
def test_optimize_calls_the_original_directly_up_to_where_dynamos_frame_stops_paying(
        monkeypatch, leads_us, up_to):
    """Below the branch the original runs as it is and ollie.optimize calls the function
    itself, without Dynamo's frame; that lead lasts past the multiply-add crossing (64 rows
    here) by the frame's cost, to where the two sides' times cross."""
    from ollie.capture import size_branches
    from ollie.cost import measure

    rows = []
    leads = dict(zip((64, 128), leads_us))

    def compare(chosen, eager, budget_s):  # chosen's time, less the frame, minus eager's
        chosen()
        lead = leads[rows[-1]] * 1e-6
        return measure.Comparison(1e-3 - 30e-6 + lead, 1e-3, 1.0, 0.0, 5)
    monkeypatch.setattr(size_branches.measure, "compare", compare)
    inputs = symbolic_inputs()
    symbol, _ = size_range.lone_symbol(inputs)
    got = size_branches.measured_up_to(lambda args: rows.append(args[0].shape[0]),
                                       lambda args: None, inputs, symbol, 64, "k",
                                       Options(cache=False), frame=30e-6)
    assert rows == [64, 128] and got == up_to


def test_a_chain_kept_below_its_crossing_is_guarded_there():
    backend = OllieBackend(Options(cache=False, budget_s=1.0))
    f = torch.compile(chain, backend=backend)
    g = torch.Generator().manual_seed(0)
    b, c = torch.randn(512, 512, generator=g), torch.randn(512, 64, generator=g)
    for rows in (384, 32, 512, 16, 1024):
        a = torch.randn(rows, 512, generator=g)
        assert torch.allclose(f(a, b, c), chain(a, b, c), rtol=1e-3, atol=1e-2), rows
    # static 384, symbolic at 32 keeping (a b) c up to 64 rows, symbolic again from 512
    assert backend.graphs == 3, backend.notes
    small, large = (r.regions[0] for r in backend.reports[1:3])
    assert small.kernel is None and not small.size_branch and small.size_range.endswith("<= 64")
    assert large.kernel is not None


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
    # measured faster compiled at the hint and uncompiled at the larger size (a tanh after
    # the products: a graph Inductor has something to fuse in)
    from ollie.capture import graph_pass, size_branches

    def decided(original, rewritten, example_inputs, report, options, key, at=None, **_):
        return key.endswith("-at-" + str(next(iter(at.values())))) if at else \
            not key.endswith(size_branches.EAGERLY)
    monkeypatch.setattr(graph_pass, "compare", decided)
    # (the whole graph's own eager-or-compiled choice is not under test: compiled)
    monkeypatch.setattr(OllieBackend, "_faster_of_eager", lambda self, gm, compiled, *a: compiled)
    def tanh_chain(a, b, c):
        return torch.tanh((a @ b) @ c)
    backend = OllieBackend(Options(cache=False, budget_s=1.0))
    f = torch.compile(tanh_chain, backend=backend)
    g = torch.Generator().manual_seed(0)
    b, c = torch.randn(256, 256, generator=g), torch.randn(256, 8, generator=g)
    for rows in (64, 96, 40, 900):  # static, then symbolic at 96: one branch on each side
        a = torch.randn(rows, 256, generator=g)
        assert torch.allclose(f(a, b, c), tanh_chain(a, b, c), rtol=1e-3, atol=1e-3), rows
    report = backend.reports[-1]
    assert report.adopted and not report.runs_eagerly
    # the crossing at the geometric mean of the two measured sizes, √(96·768)
    assert report.by_size.startswith("uncompiled where") and "> 271" in report.by_size
    assert backend.graphs == 2  # a branch, not a recompile


def test_a_graph_run_eagerly_at_its_hint_runs_compiled_above_where_compiled_won(monkeypatch):
    """Eager won at the symbolic graph's hint and lost at a larger size: each call picks by
    its size, and no larger call compiles again (a guard near the hint would)."""
    from ollie.capture import eager_or_compiled as eoc
    from ollie.capture.symbolic import has_symbolic_sizes

    measured = []

    def eager_only_at_the_hint(gm, compiled, example_inputs, *args, at=None, **kwargs):
        measured.append(at)
        if at or not has_symbolic_sizes(example_inputs):  # compiled at the static size too
            return Decision(Outcome.NOT_FASTER, baseline_s=1.0, challenger_s=2.0)
        return Decision(Outcome.ADOPTED, baseline_s=2.0, challenger_s=1.0)
    monkeypatch.setattr(eoc, "choose", eager_only_at_the_hint)

    def layer(x, w):
        return torch.tanh(x @ w)
    backend = OllieBackend(Options(cache=False, budget_s=0.5))
    f = torch.compile(eoc.own_code(layer, "layer_by_size"), backend=backend)
    w = torch.randn(64, 64)
    with torch.no_grad():
        for rows in (16, 24, 400, 3000, 20):
            x = torch.randn(rows, 64)
            torch.testing.assert_close(f(x, w), layer(x, w))
    assert backend.graphs == 2, backend.notes  # static 16, then one symbolic graph
    (larger,) = [at for at in measured if at]
    (size,) = larger.values()
    assert size > 24 and any("where s" in n and "above (measured again at" in n
                                 for n in backend.notes), backend.notes


def test_a_graph_stored_eager_at_both_sizes_runs_eagerly_without_compiling(monkeypatch,
                                                                           tmp_path):
    """A warm start reads the choices a first process stored, at the hint and at the larger
    size: eager at both, so the symbolic graph runs eagerly without Inductor compiling it."""
    from ollie.capture import compilers, eager_or_compiled as eoc
    from ollie.capture.symbolic import has_symbolic_sizes

    def eager_when_symbolic(gm, compiled, example_inputs, budget_s, store, key, *a, **kw):
        eager = has_symbolic_sizes(example_inputs)  # runs eagerly (adopted), as measured
        choice = Decision(Outcome.ADOPTED if eager else Outcome.NOT_FASTER, baseline_s=1.0,
                          challenger_s=0.5 if eager else 2.0)
        store.put(key, choice.entry())
        return choice
    monkeypatch.setattr(eoc, "choose", eager_when_symbolic)
    compiles = []
    compile_with_inductor = compilers.with_inductor

    def counted(gm, example_inputs, *args, **kwargs):
        compiles.append(has_symbolic_sizes(example_inputs))
        return compile_with_inductor(gm, example_inputs, *args, **kwargs)
    monkeypatch.setattr(compilers, "with_inductor", counted)

    def layer(x, w):
        return torch.tanh(x @ w)
    w = torch.randn(64, 64)
    for run in ("first", "warm"):
        backend = OllieBackend(Options(cache_dir=str(tmp_path), budget_s=0.5))
        f = torch.compile(eoc.own_code(layer, f"layer_{run}"), backend=backend)
        compiles.clear()
        with torch.no_grad():
            for rows in (16, 24):
                x = torch.randn(rows, 64)
                torch.testing.assert_close(f(x, w), layer(x, w))
        assert backend.graphs == 2, backend.notes
    assert compiles == [False], backend.notes  # the static graph only
    assert any("runs eagerly" in n for n in backend.notes), backend.notes
