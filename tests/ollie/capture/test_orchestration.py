"""What Inductor writes to memory and what it computes again, chosen by Korch's program
(``ollie.capture.orchestration``)."""
import pytest
import torch

import ollie
from graph_helpers import count, graph_of, symbolic_graph_of
from ollie.capture import orchestration

WRITE = torch.ops.prims.inductor_force_stride_order.default


def row_and_column_sums(x):  # sin and cos: Inductor computes them again in each sum
    y = torch.sin(x) * torch.cos(2 * x)
    return y.sum(0), y.sum(1)


def by_name(gm, name):
    return next(n for n in gm.graph.nodes if n.name == name)


def test_a_value_two_reductions_read_is_a_choice_and_one_a_product_reads_is_not():
    def fn(x, w):
        y = torch.sin(x) * 2
        return y.sum(0), y.sum(1), (torch.cos(x) + 1) @ w
    gm, _ = graph_of(fn, torch.randn(512, 512), torch.randn(512, 8))
    loops = orchestration._Loops(gm.graph)
    assert {n.target for n in loops.choices} == {torch.ops.aten.mul.Tensor}
    assert {n.target for n in loops.required} == {torch.ops.aten.add.Tensor}  # mm reads it


def test_small_loops_are_not_choices():
    gm, _ = graph_of(row_and_column_sums, torch.randn(64, 64))
    assert not orchestration._Loops(gm.graph).choices
    assert orchestration.orchestrate_graph(gm.graph) == []


def test_inductor_writes_a_shared_exp_and_computes_a_shared_sin_again():
    def fn(x):
        e, s = torch.exp(x) + 1, torch.sin(x) + 1
        return e.sum(0), e.sum(1), s.sum(0), s.sum(1)
    gm, _ = graph_of(fn, torch.randn(512, 512))
    loops = orchestration._Loops(gm.graph)
    assert len(loops.choices) == 2
    (written,) = loops.inductor_writes()
    assert written.args[0].target == torch.ops.aten.exp.default


@pytest.mark.slow
def test_the_program_writes_a_costly_value_two_sums_read_and_the_values_stay():
    x = torch.randn(1024, 1024)
    gm, _ = graph_of(row_and_column_sums, x)
    lines = orchestration.orchestrate_graph(gm.graph)
    assert len(lines) == 1 and lines[0].startswith("orchestrate: mul_1 (mul) written once, "
                                                   "read by 2 kernels"), lines
    (written,) = gm.graph.find_nodes(op="call_function", target=WRITE)
    assert written.args[0].name == "mul_1" and len(written.users) == 2
    gm.recompile()
    for got, want in zip(gm(x), row_and_column_sums(x)):
        torch.testing.assert_close(got, want)


def test_a_written_value_of_symbolic_sizes_reads_its_strides_from_the_graph():
    x = torch.randn(6, 10)
    gm, _ = symbolic_graph_of(row_and_column_sums, x)
    y = by_name(gm, "mul_1")
    orchestration._write(gm.graph, y, min(y.users, key=list(gm.graph.nodes).index))
    (written,) = gm.graph.find_nodes(op="call_function", target=WRITE)
    assert all(isinstance(s, torch.fx.Node) for s in written.args[1][:1])  # the row stride
    gm.recompile()
    for shape in [(6, 10), (3, 7)]:
        x = torch.randn(shape)
        for got, want in zip(gm(x), row_and_column_sums(x)):
            torch.testing.assert_close(got, want)


def test_a_value_computed_again_is_copied_for_each_reader():
    x = torch.randn(8, 8)
    gm, _ = graph_of(row_and_column_sums, x)
    assert orchestration._copy_per_reader(gm.graph, by_name(gm, "mul_1")) == 2
    assert count(gm, torch.ops.aten.mul.Tensor) == 3
    assert all(len(n.users) == 1 for n in gm.graph.find_nodes(
        op="call_function", target=torch.ops.aten.mul.Tensor))
    gm.recompile()
    for got, want in zip(gm(x), row_and_column_sums(x)):
        torch.testing.assert_close(got, want)


@pytest.mark.slow
def test_the_backend_adopts_the_written_value_at_every_size_and_in_training():
    def fn(x, w):
        y = torch.sin(x * w) * torch.cos(x)
        return (y.sum(0) ** 2).sum() + (y.sum(1) ** 2).sum()
    compiled = ollie.optimize(fn)
    w = torch.randn(1024, requires_grad=True)
    for n in (1024, 1280):  # the second size compiles a graph of symbolic sizes
        x = torch.randn(n, 1024)
        got = compiled(x, w)
        got.backward()
        grad, w.grad = w.grad, None
        want = fn(x, w)
        want.backward()
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-3)
        torch.testing.assert_close(grad, w.grad, rtol=1e-4, atol=1e-3)
        w.grad = None
    text = str(compiled.explain())
    assert text.count("orchestrate: ") >= 2, text  # the forward graphs of both sizes


@pytest.mark.slow
def test_timing_candidates_leaves_the_guards_of_the_graph_being_compiled_alone(monkeypatch):
    def fn(x):  # (its candidates' sizes once became size symbols no guard could name)
        y = torch.sin(x) * torch.sin(x * 0.5)
        return y.sum((0, 1)), y.sum(2)
    timed = []
    time_kernel = orchestration._time_kernel
    monkeypatch.setattr(orchestration, "_time_kernel",
                        lambda *a: timed.append(a[0]) or time_kernel(*a))
    x = torch.randn(8, 256, 512)
    compiled = ollie.optimize(fn)
    for got, want in zip(compiled(x), fn(x)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-3)
    assert timed  # the candidates were compiled and timed inside the backend
    x = torch.randn(8, 256, 512)
    for got, want in zip(compiled(x), fn(x)):  # the guards hold: no recompile, no error
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-3)


def test_an_exported_program_carries_no_hint_of_inductors(monkeypatch):
    class RowAndColumnSums(torch.nn.Module):
        def forward(self, x):
            return torch.cat(row_and_column_sums(x))
    asked = []
    monkeypatch.setattr(orchestration, "orchestrate_graph", lambda g: asked.append(g) or [])
    x = torch.randn(1024, 1024)
    ep = ollie.export(RowAndColumnSums(), (x,), options={"cache": False})
    assert not asked
    assert not ep.graph.find_nodes(op="call_function", target=WRITE)
    torch.testing.assert_close(ep.module()(x), torch.cat(row_and_column_sums(x)))


def test_random_draws_and_writes_into_tensors_are_never_choices():
    def fn(x):
        y = torch.sin(x).add_(1)            # in place: a write, not a value to recompute
        d = torch.rand_like(x) * torch.cos(x)  # a random draw
        return y.sum(0), y.sum(1), d.sum(0), d.sum(1)
    gm, _ = graph_of(fn, torch.randn(512, 512))
    loops = orchestration._Loops(gm.graph)
    assert {n.target for n in gm.graph.nodes if loops.kind[n] == "call"} >= {
        torch.ops.aten.add_.Tensor, torch.ops.aten.rand_like.default}
    assert all(n.target is torch.ops.aten.mul.Tensor for n in loops.choices)
