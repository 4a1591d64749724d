"""Inference weights frozen into Inductor's compile (``ollie.capture.frozen``): kept only
where it measured faster, and never stale: a call whose weights changed (another tensor, an
in-place update) runs the unfrozen compile."""
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn

import ollie
from ollie.capture import frozen as frozen_mod
from ollie.capture.frozen import FrozenWeights
from ollie.cost.measure import Comparison
from ollie.decision import Decision, Outcome


class ConvBN(nn.Module):
    """A batch norm after a convolution and a product of weights: freezing folds both into
    new tensors, which an update of the weights leaves stale."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.u, self.v = nn.Parameter(torch.randn(8, 2)), nn.Parameter(torch.randn(2, 4))

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x))).mean((2, 3)) @ (self.u @ self.v)


def _timed_as(frozen_s: float, unfrozen_s: float):
    """``measure`` as ``frozen_or`` sees it, timing the frozen compile at ``frozen_s``."""
    def compare(unfrozen, frozen, budget_s=0.5):
        unfrozen(), frozen()  # each side runs, as a real comparison's warm-up does
        return Comparison(unfrozen_s, frozen_s, unfrozen_s / frozen_s, 0.0, 3)
    return SimpleNamespace(compare=compare)


def _randomized(model: nn.Module, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    for p in model.parameters():
        p.data.normal_()
    model.bn.running_mean.normal_()
    model.bn.running_var.uniform_(0.5, 2.0)
    return model.eval()


def test_frozen_weights_follow_every_change_of_a_weight(monkeypatch):
    from ollie.capture import eager_or_compiled
    monkeypatch.setattr(frozen_mod, "measure", _timed_as(1e-3, 2e-3))
    monkeypatch.setattr(eager_or_compiled, "choose",  # compiled, not eager, at this size
                        lambda *a, **k: Decision(Outcome.NOT_FASTER))
    model, x = _randomized(ConvBN(), 0), torch.randn(2, 3, 8, 8)
    backend = ollie.OllieBackend(ollie.Options(cache=False))
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
        assert backend.frozen_graphs == {1: False}, backend.notes  # (no rewrite adopted)
        assert any("freezes its 7 weights" in n for n in backend.notes), backend.notes
        model.load_state_dict(_randomized(ConvBN(), 1).state_dict())  # in place: versions move
        torch.testing.assert_close(compiled(x), model(x))
        model.bn.running_var.mul_(3.0)  # a buffer updated in place
        torch.testing.assert_close(compiled(x), model(x))
        model.u.mul_(2.0)  # a factor of the folded product
        torch.testing.assert_close(compiled(x), model(x))
        model.v = nn.Parameter(torch.randn(2, 4))  # another tensor
        torch.testing.assert_close(compiled(x), model(x))


def test_the_frozen_compile_runs_only_while_its_weights_are_unchanged():
    w, b, x = torch.randn(3), torch.randn(3), torch.randn(3)
    calls = []
    artifact = FrozenWeights(lambda *a: calls.append(("frozen", len(a))),
                             lambda *a: calls.append(("unfrozen", len(a))), {0: w, 2: b}, 3)
    artifact(w, x, b)
    artifact(w.clone(), x, b)  # equal values, another tensor
    b.add_(1.0)
    artifact(w, x, b)
    assert calls == [("frozen", 1), ("unfrozen", 3), ("unfrozen", 3)]


@pytest.mark.parametrize("grad", [False, True])
def test_freezing_is_kept_only_where_faster_and_never_under_grad(monkeypatch, grad):
    monkeypatch.setattr(frozen_mod, "compiled_where_not_slower",  # compiled, not timed first
                        lambda *a: None)
    monkeypatch.setattr(frozen_mod, "measure", _timed_as(2e-3, 1e-3))  # frozen: slower
    model, x = _randomized(ConvBN(), 0), torch.randn(2, 3, 8, 8)
    backend = ollie.OllieBackend(ollie.Options(cache=False))
    compiled = torch.compile(model, backend=backend)
    with torch.set_grad_enabled(grad):
        torch.testing.assert_close(compiled(x), model(x))
    assert not backend.frozen_graphs and not any("freezes" in n for n in backend.notes)


def test_on_the_cpu_a_graph_without_a_convolution_is_not_frozen(monkeypatch):
    monkeypatch.setattr(frozen_mod, "compile_frozen", lambda *a: pytest.fail("frozen"))
    model = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.Linear(16, 4)).eval()
    backend, x = ollie.OllieBackend(ollie.Options(cache=False, measure_cap_s=0.05)), \
        torch.randn(4, 8)
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(model, backend=backend)(x), model(x))
    assert not backend.frozen_graphs and not any("weights" in n for n in backend.notes)
    assert frozen_mod._convolves_on_cpu(*_dynamo_graph(ConvBN().eval(), torch.randn(1, 3, 4, 4)))


def _dynamo_graph(model, x):
    """(Dynamo's graph of ``model``, its weights as ``frozen.weights`` finds them)."""
    graphs = []
    torch.compile(model, backend=lambda gm, _: graphs.append(gm) or gm.forward)(x)
    return graphs[0], frozen_mod.weights(graphs[0])


def test_freezing_that_slows_the_graph_uncompiled_is_not_compiled(monkeypatch, tmp_path):
    """The frozen compile is a second compile: where the freezing passes, run uncompiled, make
    the graph slower, it is not tried, and a warm start does not try it either."""
    from ollie.capture import eager_or_compiled
    monkeypatch.setattr(frozen_mod, "measure", _timed_as(2e-3, 1e-3))  # frozen: slower
    monkeypatch.setattr(eager_or_compiled, "choose",
                        lambda *a, **k: Decision(Outcome.NOT_FASTER))
    model, x = _randomized(ConvBN(), 0), torch.randn(2, 3, 8, 8)
    notes = []
    for start in ("cold", "warm"):
        torch._dynamo.reset()
        backend = ollie.OllieBackend(ollie.Options(cache_dir=str(tmp_path)))
        with torch.no_grad():
            torch.testing.assert_close(torch.compile(model, backend=backend)(x), model(x))
        assert not backend.frozen_graphs, (start, backend.notes)
        notes.append([n for n in backend.notes if "weights" in n])
    assert notes == [["graph 1 keeps its weights out of Inductor's compile: frozen in, it ran "
                      "0.50× as fast uncompiled, so its compile was not tried"], []], notes


def test_a_graph_that_updates_its_buffers_is_not_frozen_and_updates_them_once(monkeypatch):
    import copy
    monkeypatch.setattr(frozen_mod, "measure", _timed_as(1e-3, 2e-3))  # frozen would win
    model, x = _randomized(ConvBN(), 0).train(), torch.randn(2, 3, 8, 8)
    reference = copy.deepcopy(model)
    backend = ollie.OllieBackend(ollie.Options(cache=False))
    with torch.no_grad():  # a training batch norm without grad: its statistics move per call
        torch.testing.assert_close(torch.compile(model, backend=backend)(x), reference(x))
    assert not backend.frozen_graphs, backend.notes
    torch.testing.assert_close(model.bn.running_mean, reference.bn.running_mean)
    assert model.bn.num_batches_tracked.item() == reference.bn.num_batches_tracked.item() == 1


def test_a_graph_with_symbolic_sizes_is_not_frozen(monkeypatch):
    """Freezing packs weights for fixed sizes only: a symbolic graph is not even tried."""
    def no_frozen_compile(*args):
        raise AssertionError("a frozen compile of a graph with symbolic sizes")
    monkeypatch.setattr(frozen_mod, "compile_frozen", no_frozen_compile)
    model = _randomized(ConvBN(), 0)
    backend = ollie.OllieBackend(ollie.Options(cache=False))
    compiled = torch.compile(model, backend=backend, dynamic=True)
    with torch.no_grad():
        for batch in (2, 3):
            x = torch.randn(batch, 3, 8, 8)
            torch.testing.assert_close(compiled(x), model(x))
    assert not backend.frozen_graphs
    assert any("symbolic, and freezing" in n for n in backend.notes), backend.notes


class ConvBranches(nn.Module):
    """Two convolutions of one input, summed: Ollie's rewrite makes them one."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(4, 4, 3, padding=1), nn.Conv2d(4, 4, 1)

    def forward(self, x):
        return torch.relu(self.a(x) + self.b(x))


def test_freezing_compiles_ollie_s_rewrite_where_it_was_adopted(monkeypatch):
    from ollie.capture import eager_or_compiled, graph_pass
    monkeypatch.setattr(frozen_mod, "measure", _timed_as(1e-3, 2e-3))
    monkeypatch.setattr(eager_or_compiled, "choose",
                        lambda *a, **k: Decision(Outcome.NOT_FASTER))

    def rewrite_wins(original, rewritten, example_inputs, report, *args, **kwargs):
        report.timing = (2.0, 1.0)
        return True
    monkeypatch.setattr(graph_pass, "compare", rewrite_wins)
    convolutions = []
    compile_frozen = frozen_mod.compile_frozen

    def spy(source, *args):
        convolutions.append(sum(n.target == torch.ops.aten.convolution.default
                                for n in source.graph.nodes))
        return compile_frozen(source, *args)
    monkeypatch.setattr(frozen_mod, "compile_frozen", spy)
    torch.manual_seed(0)
    model, x = ConvBranches().eval(), torch.randn(1, 4, 6, 6)
    backend = ollie.OllieBackend(ollie.Options(cache=False))
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
        assert convolutions == [1] and backend.frozen_graphs == {1: True}, backend.notes
        assert "graph 1 runs Inductor's compile of Ollie's rewritten graph with frozen " \
            "weights" in backend.notes, backend.notes
        model.b.weight.mul_(2.0)  # the summed weight it froze is stale: the unfrozen compile
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)


def test_a_constant_that_a_rewrite_spliced_in_is_frozen_with_the_weights():
    """Ollie's rewrite holds a folded constant as an attribute of the graph, read by
    ``get_attr``: the frozen compile keeps it."""
    import torch.fx as fx
    graph = fx.Graph()
    x, w = graph.placeholder("x"), graph.placeholder("w")
    constant = graph.call_function(torch.ops.aten.lift_fresh.default,
                                   (graph.get_attr("_ollie_constant0"),))
    product = graph.call_function(torch.ops.aten.mm.default, (x, w))
    graph.output((graph.call_function(torch.ops.aten.add.Tensor, (product, constant)),))
    holder = nn.Module()
    holder.register_buffer("_ollie_constant0", torch.randn(4), persistent=False)
    gm = fx.GraphModule(holder, graph)
    xs, weight = torch.randn(3, 5), torch.randn(5, 4)
    compiled = frozen_mod.compile_frozen(gm, [xs, weight], {1: weight}, {})
    torch.testing.assert_close(compiled(xs)[0], xs @ weight + holder._ollie_constant0)
