"""Rewrites of graphs with symbolic sizes: a lowered program is emitted for every size only
when its trace fixes no size and it matches the original at a second size."""
import pytest
import torch

from graph_helpers import symbolic_graph_of
from ollie.capture import graph_rules, rewrite, symbolic


class Kernel:
    """A lowered program as the codegen hands it over: a callable with input names."""

    def __init__(self, fn):
        self.fn, self.input_names = fn, ["a", "b"]

    def __call__(self, *xs):
        return self.fn(*xs)


def symbolic_rows(m=256, k=64):
    """Concrete operands, and the graph's view of them: the rows of ``a`` symbolic."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, \
        StatelessSymbolicContext

    a, b = torch.randn(m, k), torch.randn(k, 8)
    mode = FakeTensorMode(shape_env=ShapeEnv())
    graph_a = mode.from_tensor(a, symbolic_context=StatelessSymbolicContext(
        dynamic_sizes=[DimDynamic.DYNAMIC, DimDynamic.STATIC], constraint_sizes=[None, None]))
    return [a, b], [graph_a, mode.from_tensor(b, static_shapes=True)]


def trace(fn):
    reals, metas = symbolic_rows()
    fakes, env = symbolic.fake_inputs(reals, metas)
    like = fn(*reals)
    return rewrite.trace_kernel(Kernel(fn), reals, like, {}, fakes), env


def test_sizes_that_are_one_symbol_in_the_graph_are_one_symbol_in_the_trace():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, \
        StatelessSymbolicContext

    def graph_values(rows_a, rows_b):  # (duck sizing: equal sizes, one symbol)
        mode = FakeTensorMode(shape_env=ShapeEnv())
        context = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DUCK, DimDynamic.STATIC],
                                           constraint_sizes=[None, None])
        reals = [torch.randn(rows_a, 4), torch.randn(rows_b, 4)]
        return reals, [mode.from_tensor(r, symbolic_context=context) for r in reals]
    for rows_b, related in ((6, True), (7, False)):
        reals, metas = graph_values(6, rows_b)
        fakes, env = symbolic.fake_inputs(reals, metas)
        assert (fakes[0].shape[0].node.expr == fakes[1].shape[0].node.expr) == related
        if related:  # adding them needs the two lengths equal: the graph knows they are
            rewrite.trace_kernel(Kernel(torch.add), reals[:1] * 2, reals[0], {},
                                 [fakes[0], fakes[1]])
            symbolic.refuse_specialised(env)


def test_a_size_generic_program_traces_symbolically():
    traced, env = trace(lambda a, b: torch.mm(a, b).relu())
    symbolic.refuse_specialised(env)  # nothing fixed
    out = [n for n in traced.graph.nodes if n.op == "output"][0].args[0]
    assert isinstance(out.meta["val"].shape[0], torch.SymInt)
    a, b = torch.randn(37, 64), torch.randn(64, 8)  # and it runs at any row count
    assert torch.allclose(traced(a, b), (a @ b).relu())


def test_a_program_with_a_literal_size_is_refused():
    traced, env = trace(lambda a, b: torch.mm(a, b).reshape(256 * 8))
    with pytest.raises(symbolic.SizeSpecific, match="specific to these sizes"):
        symbolic.refuse_specialised(env)


def test_only_the_graphs_symbolic_dims_are_symbolic_in_the_trace():
    reals, metas = symbolic_rows()
    fakes, _ = symbolic.fake_inputs(reals, metas)
    assert isinstance(fakes[0].shape[0], torch.SymInt)
    assert [type(d) for d in fakes[0].shape[1:]] == [int]
    assert all(type(d) is int for d in fakes[1].shape)
    assert symbolic.has_symbolic_sizes(metas) and not symbolic.has_symbolic_sizes(reals)


def test_a_chain_over_views_by_the_inputs_own_sizes_is_reordered_for_every_size():
    """Views by the input's own (symbolic) sizes sit inside the region; the lowered program
    reshapes to the numbers it was derived at (2 · 192 rows), which are read back from the
    length, so one compiled graph reorders the chain at every size."""
    import ollie

    def chain(x, w1, w2):
        b, n, d = x.shape
        return ((x.reshape(b * n, d) @ w1) @ w2).reshape(b, n, -1)

    # (a budget a loaded box cannot cut short before the reordered chain is found)
    backend = ollie.OllieBackend(ollie.Options(measure_cap_s=0.05, budget_s=8))
    compiled = torch.compile(chain, backend=backend)
    torch.manual_seed(0)
    w1, w2 = torch.randn(256, 256), torch.randn(256, 2)
    for n in (128, 192, 160, 100):
        x = torch.randn(2, n, 256)
        torch.testing.assert_close(compiled(x, w1, w2), chain(x, w1, w2), rtol=1e-4, atol=1e-3)
    dynamic = backend.reports[-1]
    assert not dynamic.note and dynamic.adopted, [r.decision.text for r in dynamic.regions]
    assert backend.graphs == 2


def test_a_program_gathering_by_index_tables_is_specific_to_its_sizes():
    """Index tables are built for the sizes a program was derived at: with symbolic sizes
    its region is kept (a reason in explain), never a failure of the whole graph."""
    from types import SimpleNamespace

    from ollie.capture import graph_pass, symbolic

    kernel = SimpleNamespace(index_arrays={"pos": [0, 2, 1]})
    region = SimpleNamespace(root=SimpleNamespace(meta={"val": torch.empty(3)}))
    with pytest.raises(symbolic.SizeSpecific, match="index tables"):
        graph_pass._trace(region, kernel, [], {}, dynamic=True)


def test_products_of_the_column_groups_of_a_batch_of_any_length_merge_into_one():
    # grouped_mm cuts along a dim of fixed size; the batch's length stays a symbol
    w0, w1 = torch.randn(32, 8), torch.randn(32, 8)

    def fn(x):
        a, b = x.view(-1, 64).split(32, 1)
        return torch.cat([a @ w0, b @ w1], 1).relu()
    gm, fakes = symbolic_graph_of(fn, torch.randn(5 * 64))
    new, applied = graph_rules.substitute(gm, fakes)
    assert applied == ["grouped_mm: 2 × mm.default → 1"], applied
    for rows in (5, 7):
        x = torch.randn(rows * 64)
        torch.testing.assert_close(new(x), fn(x))


def test_the_second_size_is_about_half_the_hint_where_the_guards_admit_it():
    """One more than the hint would hide a size written as a literal (a mean's ``1/n`` is
    off by a rounding error there); half of it shows it, unless the graph rules it out."""
    import sympy
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    def first_sizes(guard):
        env = ShapeEnv()
        size = env.create_symintnode(env.create_symbol(100, symbolic.ConstantSource("n")),
                                     hint=100)
        if guard:
            env.evaluate_expr(sympy.Gt(size.node.expr, 60))
        return [next(iter(s.values())) for s in symbolic.other_sizes([size], env)]
    assert first_sizes(guard=False)[:2] == [51, 52]
    assert first_sizes(guard=True) == [101, 102, 104]


def test_a_mean_over_a_varying_size_is_a_sum_and_a_division_by_the_size():
    from ollie.capture import regions
    w = torch.randn(4, 3)
    for mean in (lambda x: (x @ w).mean(0), lambda x: (x @ w).mean()):  # (3 columns: fixed)
        gm, _ = symbolic_graph_of(mean, torch.randn(6, 4))
        split = symbolic.split_means(gm)
        targets = [n.target for n in split.graph.nodes if n.op == "call_function"]
        assert torch.ops.aten.sum.dim_IntList in targets and not any(
            t in targets for t in (torch.ops.aten.mean.dim, torch.ops.aten.mean.default))
        for rows in (6, 9):
            x = torch.randn(rows, 4)
            torch.testing.assert_close(split(x), mean(x))
        [region] = regions.translate(split).regions  # the division stays out, the sum derives
        assert region.root.target is torch.ops.aten.sum.dim_IntList


def test_a_mean_of_a_product_is_rewritten_for_every_size():
    import ollie

    def mean_of_dots(x, y):
        return (x @ y.T).mean()
    backend = ollie.OllieBackend(ollie.Options(cache=False, measure_cap_s=0.05))
    compiled = torch.compile(mean_of_dots, backend=backend, dynamic=True)
    torch.manual_seed(0)
    for rows in (512, 200, 333):
        x, y = torch.randn(rows, 256) + 0.1, torch.randn(rows, 256)
        torch.testing.assert_close(compiled(x, y), mean_of_dots(x.double(), y.double()).float(),
                                   rtol=1e-4, atol=1e-6)
    [report] = backend.reports
    assert [r.decision.outcome.value for r in report.regions] == ["adopted"], \
        [r.decision.text for r in report.regions]


def test_a_number_that_is_a_varying_sizes_hint_is_read_from_that_size():
    """A lowered program writes sizes as numbers: a sum over a broadcast bias is the bias
    times the length. Where a number is the hint of one varying size and of no fixed one,
    the program reads the size; a dim argument (not a size) stays as it is."""
    reals, metas = symbolic_rows(m=6, k=4)  # a: 6 (varying) × 4, b: 4 × 8
    fakes, _ = symbolic.fake_inputs(reals, metas)

    def program(a, b):
        return (a @ b).sum(0) + b.sum(0) * 6 + b.sum(0) * 4
    traced = rewrite.trace_kernel(Kernel(program), reals, program(*reals), {})
    read = symbolic.sizes_as_symbols(traced, fakes, program(*reals))
    a, b = torch.randn(9, 4), torch.randn(4, 8)
    torch.testing.assert_close(read(a, b), (a @ b).sum(0) + b.sum(0) * 9 + b.sum(0) * 4)
    fixed = torch.randn(6, 8)  # an output of 6 rows: the 6 could be either size, none is read
    assert symbolic.sizes_as_symbols(traced, fakes, fixed) is None


def test_a_number_that_is_a_varying_size_times_fixed_ones_is_read_as_that_product():
    reals, metas = symbolic_rows(m=6, k=4)  # a: 6 (varying) × 4, b: 4 × 8

    def program(a, b):  # a flattened length (6 · 8) and a row stride (8)
        return torch.as_strided((a @ b).reshape(48), (6, 8), (8, 1))
    traced = rewrite.trace_kernel(Kernel(program), reals, program(*reals), {})
    read = symbolic.sizes_as_symbols(traced, symbolic.fake_inputs(reals, metas)[0], metas[0])
    a, b = torch.randn(9, 4), torch.randn(4, 8)
    torch.testing.assert_close(read(a, b), a @ b)


def test_a_number_that_is_a_product_of_two_varying_sizes_is_read_as_that_product():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, \
        StatelessSymbolicContext

    reals = [torch.randn(3, 5, 4), torch.randn(4, 8)]  # a batch of 3 rows of length 5
    mode = FakeTensorMode(shape_env=ShapeEnv())
    metas = [mode.from_tensor(reals[0], symbolic_context=StatelessSymbolicContext(
        dynamic_sizes=[DimDynamic.DYNAMIC] * 2 + [DimDynamic.STATIC], constraint_sizes=[None] * 3)),
        mode.from_tensor(reals[1], static_shapes=True)]

    def program(a, b):  # the rows flattened (3 · 5), then the batch's stride (5 · 8)
        return torch.as_strided(a.reshape(15, 4) @ b, (3, 5, 8), (40, 8, 1))
    traced = rewrite.trace_kernel(Kernel(program), reals, program(*reals), {})
    read = symbolic.sizes_as_symbols(traced, symbolic.fake_inputs(reals, metas)[0], metas[0])
    a, b = torch.randn(2, 7, 4), torch.randn(4, 8)
    torch.testing.assert_close(read(a, b), a @ b)


def test_a_linear_layer_averaged_over_a_sequence_of_any_length_is_rewritten():
    import ollie

    linear = torch.nn.Linear(256, 256).eval()
    backend = ollie.OllieBackend(ollie.Options(cache=False, measure_cap_s=0.05))
    compiled = torch.compile(lambda x: linear(x).mean(1), backend=backend, dynamic=True)
    torch.manual_seed(0)
    with torch.no_grad():
        for length in (96, 40, 71):
            x = torch.randn(2, length, 256)
            torch.testing.assert_close(compiled(x), linear(x).mean(1), rtol=1e-4, atol=1e-5)
    [report] = backend.reports  # sum(x) W + length · b: the length read from x
    assert [r.decision.outcome.value for r in report.regions] == ["adopted"], \
        [r.decision.text for r in report.regions]


def test_a_pointwise_convolution_then_a_linear_layer_over_any_length_is_rewritten():
    import ollie

    conv, linear = torch.nn.Conv1d(64, 128, 1).eval(), torch.nn.Linear(128, 32).eval()
    backend = ollie.OllieBackend(ollie.Options(cache=False, measure_cap_s=0.05))
    compiled = torch.compile(lambda x: linear(conv(x).transpose(1, 2)), backend=backend)
    torch.manual_seed(0)
    with torch.no_grad():
        for length in (128, 96, 50, 131):  # the second length makes the length symbolic
            x = torch.randn(4, 64, length)
            torch.testing.assert_close(compiled(x), linear(conv(x).transpose(1, 2)),
                                       rtol=1e-4, atol=1e-5)
    static, dynamic = backend.reports  # one weight W_lin W_conv; strides read the length
    assert [r.decision.outcome.value for r in dynamic.regions] == ["adopted"], \
        [r.decision.text for r in dynamic.regions]


def test_a_pointwise_convolution_then_a_linear_layer_at_any_batch_and_length_is_rewritten():
    """Compiled with ``dynamic=True``, batch and length are both symbolic from the first call:
    the program's flattened rows are their product."""
    import ollie

    conv, linear = torch.nn.Conv1d(64, 128, 1).eval(), torch.nn.Linear(128, 32).eval()
    backend = ollie.OllieBackend(ollie.Options(cache=False, measure_cap_s=0.05))
    compiled = torch.compile(lambda x: linear(conv(x).transpose(1, 2)), backend=backend,
                             dynamic=True)
    torch.manual_seed(0)
    with torch.no_grad():
        for batch, length in ((4, 96), (3, 80), (5, 131)):
            x = torch.randn(batch, 64, length)
            torch.testing.assert_close(compiled(x), linear(conv(x).transpose(1, 2)),
                                       rtol=1e-4, atol=1e-5)
    [report] = backend.reports
    assert [r.decision.outcome.value for r in report.regions] == ["adopted"], \
        [r.decision.text for r in report.regions]


def test_a_hint_equal_to_a_fixed_size_is_moved_for_the_derivation_and_others_stay():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, \
        StatelessSymbolicContext

    mode = FakeTensorMode(shape_env=ShapeEnv())
    dynamic = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC, DimDynamic.STATIC],
                                       constraint_sizes=[None, None])
    length_as_features = mode.from_tensor(torch.randn(256, 256), symbolic_context=dynamic)
    other = mode.from_tensor(torch.randn(96, 256), symbolic_context=dynamic)
    moved = symbolic.derivation_sizes([length_as_features], mode.shape_env)
    [(symbol, value)] = moved.items()
    assert value != 256 and abs(value - 256) <= 8
    assert symbolic.derivation_sizes([other], mode.shape_env) == {}


def test_a_length_equal_to_the_features_is_rewritten_for_every_length():
    """The second length (256) makes the length symbolic with a hint equal to the features:
    derived at a nearby length, every number of the program tells which size it is."""
    import ollie

    linear = torch.nn.Linear(256, 256).eval()
    backend = ollie.OllieBackend(ollie.Options(cache=False, measure_cap_s=0.05))
    compiled = torch.compile(lambda x: linear(x).mean(1), backend=backend)
    torch.manual_seed(0)
    with torch.no_grad():
        for length in (128, 256, 96):
            x = torch.randn(4, length, 256)
            torch.testing.assert_close(compiled(x), linear(x).mean(1), rtol=1e-4, atol=1e-5)
    static, dynamic = backend.reports
    assert [r.decision.outcome.value for r in dynamic.regions] == ["adopted"], \
        [r.decision.text for r in dynamic.regions]
