"""What runs a Dynamo graph besides the eager-or-compiled choice: the second compile of a
rewrite, training graphs, Inductor's compile when Ollie fails, Dynamo's own control flow
passed through, the ``ollie`` log, explain's artifact names and a graph's budget."""
import logging
import os
import subprocess
import sys
import warnings

import pytest
import torch

import ollie
from ollie.capture import compilers, eager_or_compiled
from ollie.cost import measure
from ollie.decision import Decision, Outcome

from backend_helpers import args, compile_with, elementwise, timing


@pytest.mark.parametrize("saves_s, substitutions, compiles", [
    (0.1e-3, [], False),   # 0.1 ms saved of a ~2 ms graph: under the margin, no second compile
    (0.5e-3, [], True),    # 25 %: worth compiling to find out
    (0.1e-3, ["affine_into_matmul: add.Tensor folded into mm.default"], True),  # not bounded
])
def test_a_second_compile_runs_only_where_the_regions_gains_could_clear_the_margin(
        saves_s, substitutions, compiles):
    import time

    import ir
    from ollie.capture import graph_pass, second_compile
    from ollie.region import RegionReport

    region = RegionReport("r", [], ir.parse("T[i] = A[i]", tensors={"A": (4,)}),
                          decision=Decision(Outcome.ADOPTED, baseline_s=1e-3,
                                            challenger_s=1e-3 - saves_s),
                          kernel=lambda *xs: None)
    report = graph_pass.GraphReport("inference graph 1", regions=[region],
                                    substitutions=substitutions)

    def original(args):  # the compiled original: about 2 ms a call
        time.sleep(2e-3)

    options = ollie.Options(cache=False)
    assert second_compile.can_pay_off(original, [torch.ones(2)], report, "k", options) \
        == compiles
    assert ("not compiled" in (report.note or "")) != compiles


@pytest.mark.parametrize("rows, compiles", [(1, True), (4096, False)])
def test_a_merge_is_compiled_only_where_its_contractions_could_save_the_margin(rows, compiles):
    """Two products of one input merged: timed by the two calls against the one, which
    save a share of the graph that falls as its elementwise work grows (``rows`` of
    ``exp`` after the products)."""
    import time

    from ollie.capture import graph_pass, graph_rules, second_compile
    from ollie.capture.rewrite import copy_graph

    def graph(x, w1, w2, big):
        return x @ w1, x @ w2, big.exp()

    x, w1, w2, big = torch.randn(64, 64), torch.randn(64, 64), torch.randn(64, 64), \
        torch.randn(rows, 4096)
    gm = torch.fx.experimental.proxy_tensor.make_fx(graph)(x, w1, w2, big)
    new, applied = graph_rules.substitute(copy_graph(gm)[0], [x, w1, w2, big])
    assert applied and all(a.split(":")[0] in second_compile.MERGES for a in applied), applied
    report = graph_pass.GraphReport("inference graph 1", substitutions=applied)

    def original(args):  # the compiled original: the graph's time
        start = time.perf_counter()
        gm(*args)
        return time.perf_counter() - start

    graphs = second_compile.uncompiled(gm, new, lambda compiled: compiled)
    options = ollie.Options(cache=False, measure_cap_s=0.2)
    assert second_compile.can_pay_off(original, [x, w1, w2, big], report, "k", options,
                                      graphs) == compiles, report.note


def test_through_the_backend_a_merge_that_cannot_pay_off_is_not_compiled(monkeypatch):
    """Two Linears of one input merge, but the graph's time is in its elementwise work: the
    original is compiled, the rewritten graph is not."""
    import torch._inductor.compile_fx as compile_fx

    class TwoLinears(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(32, 32), torch.nn.Linear(32, 32)

        def forward(self, x, big):
            return self.a(x), self.b(x), big.exp().sin()

    compiles, real = [], compile_fx.compile_fx_inner
    monkeypatch.setattr(compile_fx, "compile_fx_inner",
                        lambda *a, **k: compiles.append(1) or real(*a, **k))
    torch.manual_seed(0)
    model, x, big = TwoLinears().eval(), torch.randn(2, 32), torch.randn(2048, 2048)
    backend = ollie.OllieBackend(ollie.Options(cache=False, measure_cap_s=0.1, freeze=False))
    with torch.no_grad():
        outs = torch.compile(model, backend=backend)(x, big)
        for got, want in zip(outs, model(x, big)):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    report = backend.reports[-1]
    assert any(s.startswith("shared_lhs") for s in report.substitutions), report.substitutions
    assert "not compiled" in (report.note or "") and len(compiles) == 1, (report.note, compiles)


def test_training_graphs_keep_the_compiled_artifact(monkeypatch):
    monkeypatch.setattr(measure, "compare", lambda *a, **k: pytest.fail("measured"))
    backend = ollie.OllieBackend(ollie.Options(measure_cap_s=0.05))
    a, b = args()
    a.requires_grad_()
    compile_with(backend)(a, b).sum().backward()
    assert torch.allclose(a.grad, (1 - torch.tanh(a.detach()) ** 2) * b)
    assert not eager_or_compiled.is_inference([a])


@pytest.mark.parametrize("compiled_s, eager_s, runs", [
    (1e-3, 2e-3, "runs Inductor's compile"), (2e-3, 1e-3, "runs eagerly")])
def test_when_ollie_fails_the_faster_of_inductor_s_compile_and_eager_runs(
        monkeypatch, compiled_s, eager_s, runs):
    real = compilers.with_inductor
    monkeypatch.setattr(measure, "compare", lambda *a, **k: timing(compiled_s, eager_s))

    def ollie_breaks(gm, example_inputs, inner, options=None):
        if inner is not None:
            raise RuntimeError("an Ollie bug")
        return real(gm, example_inputs, inner, options)

    monkeypatch.setattr(compilers, "with_inductor", ollie_breaks)
    backend = ollie.OllieBackend(ollie.Options(measure_cap_s=0.05))
    a, b = args()
    with pytest.warns(ollie.OllieWarning, match="Inductor's compile of the original.*an Ollie bug"):
        out = compile_with(backend)(a, b)
    assert torch.allclose(out, elementwise(a, b))
    assert any(runs in n for n in backend.notes), backend.notes


def test_when_inductor_fails_on_a_rewritten_backward_graph_the_original_runs(monkeypatch):
    """A backward graph compiles inside the user's backward call: Inductor's failure on the
    rewritten graph (seen: a KeyError in its kernel metadata) must not land there."""
    import sys
    from torch._inductor import compile_fx

    real = compile_fx.compile_fx_inner

    def fails_on_rewrites(gm, example_inputs, **kwargs):
        if sys._getframe(1).f_code.co_name == "_compile_rewritten":
            raise KeyError("slice_scatter_default_1")
        return real(gm, example_inputs, **kwargs)

    monkeypatch.setattr(compile_fx, "compile_fx_inner", fails_on_rewrites)

    def branches(x, w1, w2):  # x@w1 + x@w2 = x@(w1 + w2): rewritten in training too
        return torch.tanh(x @ w1 + x @ w2)

    backend = ollie.OllieBackend(ollie.Options(cache=False, measure_cap_s=0.05))
    x = torch.randn(32, 64, requires_grad=True)
    w1, w2 = (torch.randn(64, 48, requires_grad=True) for _ in range(2))
    with pytest.warns(ollie.OllieWarning, match="Inductor failed on the rewritten graph"):
        grads = torch.autograd.grad(torch.compile(branches, backend=backend)(x, w1, w2).sum(),
                                    [x, w1, w2])
    for got, expected in zip(grads, torch.autograd.grad(branches(x, w1, w2).sum(), [x, w1, w2])):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    failed = [r for r in backend.reports if r.note and "Inductor failed" in r.note]
    assert failed and not any(r.adopted for r in failed)


def test_dynamo_restarts_pass_through_the_backend(monkeypatch):
    """Dynamo raises its control exceptions through a backend to restart the analysis;
    catching them (as a compile failure) would leave the graph to eager."""
    real = compilers.with_inductor
    raised = []

    def restart_once(gm, example_inputs, inner, options=None):
        if not raised:
            raised.append(True)
            raise torch._dynamo.exc.TensorifyScalarRestartAnalysis()
        return real(gm, example_inputs, inner, options)

    monkeypatch.setattr(compilers, "with_inductor", restart_once)
    backend = ollie.OllieBackend(ollie.Options(measure_cap_s=0.05))
    a, b = args()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ollie.OllieWarning)
        out = compile_with(backend)(a, b)
    assert torch.allclose(out, elementwise(a, b))
    assert raised and backend.graphs == 2, backend.notes


def test_decisions_go_to_the_ollie_log(caplog):
    backend = ollie.OllieBackend(ollie.Options(measure_cap_s=0.05))
    a = torch.randn(64, 128)
    b, c = torch.randn(128, 128), torch.randn(128, 4)
    with caplog.at_level(logging.DEBUG, logger="ollie"):
        compile_with(backend, lambda a, b, c: (a @ b) @ c)(a, b, c)
    lines = [r.getMessage() for r in caplog.records if r.name == "ollie"]
    assert any(line.startswith("ollie: region ") for line in lines), lines
    assert any("graph 1:" in line and "regions rewritten" in line for line in lines), lines


def test_torch_logs_turns_the_ollie_log_on():
    script = ("import torch\n"
              "f = torch.compile(lambda a, b: (a @ b).relu(), backend='ollie',\n"
              "                  options={'measure_cap_s': 0.05})\n"
              "f(torch.randn(8, 8), torch.randn(8, 8))\n")
    env = {**os.environ, "TORCH_LOGS": "+ollie"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-1500:]
    assert "ollie: inference graph 1:" in result.stderr, result.stderr[-1500:]


def test_a_copy_of_an_optimized_function_is_optimized_afresh():
    import copy

    f = ollie.optimize(elementwise, budget_s=1.5, measure_cap_s=0.05)
    a, b = args()
    with torch.no_grad():
        f(a, b)
        for twin in (copy.copy(f), copy.deepcopy(f)):  # a model copied with it, say
            assert twin is not f and twin.options == f.options and twin.backend is not f.backend
            assert torch.allclose(twin(a, b), elementwise(a, b))


def test_explain_names_what_the_compiled_artifact_runs():
    from ollie.capture import graph_pass
    backend = ollie.OllieBackend()
    assert backend._compiled_artifact(1) == "Inductor's compile"  # nothing rewritten
    report = graph_pass.GraphReport("inference graph 1")
    report.adopted = True
    backend.reports.append(report)
    assert backend._compiled_artifact(1) == "Inductor's compile of Ollie's rewritten graph"
    report.runs_eagerly = True
    assert backend._compiled_artifact(1) == "Ollie's rewritten graph, uncompiled"
    assert backend._compiled_artifact(2) == "Inductor's compile"
    choice = Decision(Outcome.NOT_FASTER, baseline_s=1e-4, challenger_s=1e-3)
    assert "graph 1 runs Ollie's rewritten graph, uncompiled: 10.00×" in \
        eager_or_compiled.describe(choice, 1, backend._compiled_artifact(1))


def test_a_graphs_derivation_budget_pays_each_regions_rules_and_extraction(monkeypatch):
    # six regions of equal work under a 2 s budget: each costs its rules' share and the
    # extraction after them, so three fit; the first is derived even under a tiny budget
    from types import SimpleNamespace

    from ollie import options as options_mod, region as region_mod
    from ollie.capture import graph_pass, regions as regions_mod

    shares = []
    monkeypatch.setattr(regions_mod, "reduction_work", lambda r: r.work)
    monkeypatch.setattr(region_mod, "compile_region",
                        lambda region, values, options, show: shares.append(options.budget_s))
    chosen = [SimpleNamespace(work=1.0, members=[f"node{k}"]) for k in range(6)]
    for budget, derived in ((2.0, 3), (0.3, 1), (0.1, 0)):
        shares.clear()
        left = {}
        options = options_mod.Options(budget_s=budget)
        out = graph_pass.derive_within_budget(chosen, {}, options, None, left)
        assert len(out) == len(shares) == derived
        assert all(s >= graph_pass.MIN_REGION_S for s in shares)
        assert sum(s + graph_pass.EXTRACTION_S for s in shares) <= 1e-9 + max(
            budget, graph_pass.MIN_REGION_S + graph_pass.EXTRACTION_S)
        assert len(left) == 6 - derived
        assert all("budget was spent" in why for why in left.values())


@pytest.mark.parametrize("compiled_already, uncompiled_wins", [
    (True, False), (True, True), (False, None)])
def test_a_rewrite_of_library_calls_compiled_already_is_timed_uncompiled_too(
        monkeypatch, compiled_already, uncompiled_wins):
    """``aᵀ b`` (a permute, a product): not compiled yet, it runs as it is (Inductor's wrapper
    would only cost); compiled already, both are timed (Inductor's call of a small product
    can win), and the faster one runs."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from ollie.capture import graph_pass, size_branches
    from ollie.capture.graph_pass import GraphReport
    timed = []

    def compare(compiled, eager, *args, **kwargs):
        timed.append((compiled, eager))
        return uncompiled_wins
    monkeypatch.setattr(graph_pass, "compare", compare)
    monkeypatch.setattr("torch._inductor.compile_fx.compile_fx_inner",
                        lambda *a, **k: pytest.fail("compiled again"))
    a, b = torch.randn(4, 8), torch.randn(4, 8)
    graph = make_fx(lambda a, b: (a.T @ b,))(a, b)
    compiled = (lambda args: ["compiled"]) if compiled_already else None
    report = GraphReport("inference graph 1")
    chosen = size_branches.compiled_or_eager(graph, [a, b], {}, lambda f: f, [a, b], report,
                                             "key", ollie.Options(cache=False), compiled)
    assert len(timed) == compiled_already
    runs_eagerly = uncompiled_wins if compiled_already else True
    assert report.runs_eagerly == runs_eagerly
    if runs_eagerly:
        torch.testing.assert_close(chosen([a, b])[0], a.T @ b)
    else:
        assert chosen is compiled
