"""The faster of Inductor's compile and eager library calls runs a graph: by the margin and
its noise, with Dynamo's frame and the module calls charged, stored in the cache, and how a
function run eagerly is called (skipped by Dynamo, called directly at sizes eager won)."""
import functools

import pytest
import torch

import ollie
from ollie.capture import compilers, eager_or_compiled
from ollie.cost import measure

from backend_helpers import args, compile_with, elementwise, timing


@pytest.mark.parametrize("compiled_s, eager_s, frame_s, runs", [
    (2e-3, 1e-3, 0.0, "runs eagerly (library calls)"),      # eager clearly faster
    (0.98e-3, 1e-3, 0.0, "runs Inductor's compile"),        # compiled faster
    (1e-3, 0.99e-3, 0.0, "runs Inductor's compile"),        # a tie is noise
    # eager lets Dynamo skip a whole function: compiled pays Dynamo's frame on every call
    (1e-4, 1.2e-4, 3e-5, "runs eagerly"),
])
def test_the_faster_of_eager_and_compiled_runs(monkeypatch, compiled_s, eager_s, frame_s, runs):
    monkeypatch.setattr(measure, "compare", lambda *a, **k: timing(compiled_s, eager_s))
    monkeypatch.setattr(eager_or_compiled, "dynamo_call_overhead", lambda *_: frame_s)
    backend = ollie.OllieBackend(ollie.Options(measure_cap_s=0.05))
    a, b = args()
    with torch.no_grad():
        assert torch.allclose(compile_with(backend)(a, b), elementwise(a, b))
    assert any(runs in n for n in backend.notes), backend.notes


@pytest.mark.parametrize("compiled_s, eager_s, calibrated", [
    (1e-3, 2e-3, False),    # compiled far ahead: no frame's cost could hand it to eager
    (2e-3, 1e-3, False),    # eager ahead even with no frame charged
    (1e-4, 1.2e-4, True),   # within a frame's cost of each other: calibrate
])
def test_the_frame_is_calibrated_only_where_it_could_change_the_choice(
        monkeypatch, compiled_s, eager_s, calibrated):
    monkeypatch.setattr(measure, "compare", lambda *a, **k: timing(compiled_s, eager_s))
    calls = []
    monkeypatch.setattr(eager_or_compiled, "dynamo_call_overhead",
                        lambda *_: calls.append(1) or 0.0)
    backend = ollie.OllieBackend(ollie.Options(measure_cap_s=0.05))
    a, b = args()
    with torch.no_grad():
        assert torch.allclose(compile_with(backend)(a, b), elementwise(a, b))
    assert bool(calls) == calibrated


@pytest.mark.parametrize("challenger_s, charged_s", [
    (0.9e-3, 1e-3),            # wins without the frame: nothing to calibrate
    (2e-3, 1e-3),              # loses even against the frame's bound: nothing either
    (1e-3, 1e-3 + 30e-6),      # within the bound: the calibrated frame is charged
])
def test_the_frame_is_charged_where_it_can_decide(monkeypatch, challenger_s, charged_s):
    monkeypatch.setattr(eager_or_compiled, "dynamo_call_overhead", lambda *_: 30e-6)
    xs = [torch.ones(4, 4)] * 3
    got = eager_or_compiled.frame_charge(timing(1e-3, challenger_s), 0.98, xs, True)
    assert 1e-3 + got == pytest.approx(charged_s)


def broken(a, b):
    x = torch.tanh(a) * b
    torch._dynamo.graph_break()
    return x + 1


def test_a_graph_piece_runs_eagerly_only_when_faster_by_the_margin(monkeypatch):
    monkeypatch.setattr(measure, "compare", lambda *a, **k: timing(1e-3, 0.99e-3))
    backend = ollie.OllieBackend(ollie.Options(measure_cap_s=0.05))
    a, b = args()
    with torch.no_grad():
        assert torch.allclose(compile_with(backend, broken)(a, b), broken(a, b))
    assert backend.notes and all("runs Inductor's compile" in n for n in backend.notes)


def test_a_stored_eager_choice_is_neither_measured_nor_compiled_again(monkeypatch):
    monkeypatch.setattr(measure, "compare", lambda *a, **k: timing(2e-3, 1e-3))
    with torch.no_grad():
        compile_with(ollie.OllieBackend(ollie.Options(measure_cap_s=0.05)))(*args())
    torch._dynamo.reset()

    def refuse(*a, **k):
        raise AssertionError("measured or compiled again")

    monkeypatch.setattr(measure, "compare", refuse)
    monkeypatch.setattr(compilers, "with_inductor", refuse)
    second = ollie.OllieBackend(ollie.Options(measure_cap_s=0.05))
    a, b = args()
    with torch.no_grad():
        assert torch.allclose(compile_with(second)(a, b), elementwise(a, b))
    assert any("stored in the disk cache" in n for n in second.notes), second.notes


def test_a_whole_function_eager_runs_faster_is_skipped_by_dynamo(monkeypatch):
    from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list

    monkeypatch.setattr(measure, "compare", lambda *a, **k: timing(2e-3, 1e-3))

    def small(a, b):
        return (a + b).sum(0)

    f = ollie.optimize(small, measure_cap_s=0.05)
    a, b = args()
    with torch.no_grad():
        assert torch.allclose(f(a, b), small(a, b))
        assert f.backend.skipped_functions == 1 and not _debug_get_cache_entry_list(
            small.__code__)
        monkeypatch.setattr(f, "_compiled", lambda *a: pytest.fail("went through Dynamo"))
        assert torch.allclose(f(a, b), small(a, b))  # called directly from now on
        assert f.runs_eagerly and f.func is small  # partial's C call, no Python frame between


def test_settled_calls_go_straight_to_torch_compile_until_dynamo_compiles_again(monkeypatch):
    monkeypatch.setattr(measure, "compare", lambda *a, **k: timing(1e-3, 2e-3))

    def broken_at_a_size(a, b):
        x = torch.tanh(a) * b
        if a.shape[0] > 40:
            torch._dynamo.graph_break()
        return x + 1

    f = ollie.optimize(broken_at_a_size, measure_cap_s=0.05, cache=False)
    a, b = args()
    with torch.no_grad():
        for _ in range(2):
            assert torch.allclose(f(a, b), broken_at_a_size(a, b))
        assert f.func is f._compiled and not f.breaks.seen  # nothing of Ollie's in the call
        big = torch.randn(48, 32), torch.randn(48, 32)
        # (Inductor's tanh may round an ulp apart from eager's: x + 1 near 0 shows it)
        close = functools.partial(torch.testing.assert_close, rtol=1e-5, atol=1e-6)
        close(f(*big), broken_at_a_size(*big))  # compiles during a direct call
        assert f.func == f._compiled_call and f.breaks.seen, f.breaks.seen
        for _ in range(2):
            close(f(*big), broken_at_a_size(*big))
        assert f.func is f._compiled


def test_sizes_where_eager_won_a_symbolic_graph_are_called_directly(monkeypatch):
    # compiled wins the first (static) graph, eager the symbolic one: Dynamo cannot skip the
    # function (larger sizes must compile again), so ollie.optimize checks the sizes itself
    verdicts = iter([timing(1e-3, 2e-3)] + [timing(2e-3, 1e-3)] * 10)
    monkeypatch.setattr(measure, "compare", lambda *a, **k: next(verdicts))

    def rows_sum(x, w):
        return torch.tanh(x * w).sum(0)

    f = ollie.optimize(rows_sum, measure_cap_s=0.05, cache=False)
    w = torch.randn(16)
    with torch.no_grad():
        for rows in (8, 12):
            x = torch.randn(rows, 16)
            assert torch.allclose(f(x, w), rows_sum(x, w))
        assert f.backend.graphs == 2 and len(f.backend.eager_sizes) == 1, f.backend.notes
        real = f._compiled
        monkeypatch.setattr(f, "_compiled", lambda *a: pytest.fail("went through Dynamo"))
        for x in (torch.randn(10, 16), torch.randn(24, 16)):  # up to twice the hint
            assert torch.allclose(f(x, w), rows_sum(x, w))
        monkeypatch.setattr(f, "_compiled", real)
        for x, w2 in ((torch.randn(100, 16), w), (torch.randn(10, 17), torch.randn(17))):
            assert torch.allclose(f(x, w2), rows_sum(x, w2))  # outside: Dynamo decides
    assert f.backend.graphs > 2


class LinearReLU(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(16, 16)

    def forward(self, x):
        return self.linear(x).relu()


def test_a_function_calling_others_runs_eagerly_without_its_callees_compiled(monkeypatch):
    # skipped by Dynamo, its callees would each be intercepted and compiled again
    monkeypatch.setattr(measure, "compare", lambda *a, **k: timing(2e-3, 1e-3))

    inner = LinearReLU()  # its forward is user code: Dynamo intercepts it

    def outer(x):
        return inner(x).sum(0)

    f = ollie.optimize(outer, measure_cap_s=0.05)
    x = torch.randn(8, 16)
    with torch.no_grad():
        assert torch.allclose(f(x), outer(x))
        assert f.backend.graphs == 1 and f.backend.skipped_functions == 1, f.backend.notes
        monkeypatch.setattr(f, "_compiled", lambda *a: pytest.fail("went through Dynamo"))
        for _ in range(2):
            assert torch.allclose(f(x), outer(x))  # called directly from now on
    assert f.backend.graphs == 1, f.backend.notes


@pytest.mark.parametrize("spread, runs", [(0.0, "runs eagerly"),
                                          (0.03, "runs Inductor's compile")])
def test_eager_needs_a_lead_beyond_the_noise_of_its_comparison(monkeypatch, spread, runs):
    lead = measure.Comparison(1e-3, 0.96e-3, 1e-3 / 0.96e-3, spread, 5)  # eager 4% faster
    monkeypatch.setattr(measure, "compare", lambda *a, **k: lead)
    monkeypatch.setattr(eager_or_compiled, "dynamo_call_overhead", lambda *_: 0.0)
    backend = ollie.OllieBackend(ollie.Options(measure_cap_s=0.05))
    a, b = args()
    with torch.no_grad():
        assert torch.allclose(compile_with(backend)(a, b), elementwise(a, b))
    assert any(runs in n for n in backend.notes), backend.notes


@pytest.mark.parametrize("per_module_s, runs", [(0.0, "runs eagerly"),
                                                 (1e-6, "calls time both")])
def test_eager_is_charged_the_module_calls_the_graph_leaves_out(monkeypatch, per_module_s, runs):
    # eager measured 10% faster; its three module calls cost 3 µs the captured graph leaves
    # out: it then leads only by Dynamo's frame, which the user's calls time (``CallRace``)
    monkeypatch.setattr(measure, "compare", lambda *a, **k: timing(1e-5, 0.9e-5))
    monkeypatch.setattr(eager_or_compiled, "dynamo_call_overhead", lambda *_: 0.0)
    monkeypatch.setattr(eager_or_compiled, "module_call_overhead", lambda: per_module_s)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    backend = ollie.OllieBackend(ollie.Options(measure_cap_s=0.05))
    backend.calls_skipped_directly = True  # as ollie.optimize's: eager runs the modules

    def two_linears(x):
        return model(x)

    seen = []
    real = eager_or_compiled.module_calls
    monkeypatch.setattr(eager_or_compiled, "module_calls",
                        lambda gm: seen.append(real(gm)) or seen[-1])
    x = torch.randn(8, 16)
    with torch.no_grad():
        assert torch.allclose(compile_with(backend, two_linears)(x), model(x))
    assert seen == [3] and any(runs in n for n in backend.notes), (seen, backend.notes)


def test_through_torch_compile_a_function_calling_modules_is_not_charged_a_frame(monkeypatch):
    # Dynamo cannot skip it (each module would be compiled alone), so eager runs under Dynamo's
    # frame too: the measured 10% lead of the compile decides, whatever the frame costs
    monkeypatch.setattr(measure, "compare", lambda *a, **k: timing(0.9e-5, 1e-5))
    monkeypatch.setattr(eager_or_compiled, "dynamo_call_overhead", lambda *_: 1e-3)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Tanh())
    backend = ollie.OllieBackend(ollie.Options(measure_cap_s=0.05))

    def linear_tanh(x):
        return model(x)

    x = torch.randn(8, 16)
    with torch.no_grad():
        assert torch.allclose(compile_with(backend, linear_tanh)(x), model(x))
    assert any("runs Inductor's compile" in n for n in backend.notes), backend.notes


def test_a_graph_before_a_break_runs_eagerly_without_skipping_its_function(monkeypatch):
    monkeypatch.setattr(measure, "compare", lambda *a, **k: timing(2e-3, 1e-3))

    def broken(a, b):
        x = torch.tanh(a) + b
        torch._dynamo.graph_break()
        return x * 2

    backend = ollie.OllieBackend(ollie.Options(measure_cap_s=0.05))
    a, b = args()
    with torch.no_grad():
        assert torch.allclose(compile_with(backend, broken)(a, b), (torch.tanh(a) + b) * 2)
    assert any("runs eagerly" in n and "skips" not in n for n in backend.notes), backend.notes


def _doubled(x):
    return x * 2


def calls_a_helper(a, b):
    return _doubled(torch.tanh(a)) * b


@pytest.mark.parametrize("through_optimize", [False, True])
def test_only_ollie_optimize_is_said_to_call_an_eager_function_directly(monkeypatch,
                                                                        through_optimize):
    """A function that calls a helper and runs faster eagerly is not skipped (Dynamo would
    compile the helper on its own); ``ollie.optimize`` calls it directly, torch.compile still
    runs Dynamo's frame, and explain's note says which."""
    monkeypatch.setattr(measure, "compare", lambda *a, **k: timing(2e-3, 1e-3))  # eager wins
    fn = eager_or_compiled.own_code(calls_a_helper, f"calls_a_helper_{through_optimize}")
    options = ollie.Options(measure_cap_s=0.05, cache=False)
    if through_optimize:
        compiled = ollie.optimize(fn, **options.__dict__)
        backend = compiled.backend
    else:
        backend = ollie.OllieBackend(options)
        compiled = compile_with(backend, fn)
    a, b = args()
    with torch.no_grad():
        assert torch.allclose(compiled(a, b), calls_a_helper(a, b))
    (note,) = [n for n in backend.notes if "runs eagerly from now on" in n]
    assert ("ollie.optimize calls it directly" in note) == through_optimize, note


def test_a_module_eager_runs_faster_is_called_without_dynamo_at_those_sizes(monkeypatch):
    monkeypatch.setattr(measure, "compare", lambda *a, **k: timing(2e-3, 1e-3))

    block = LinearReLU()  # its forward calls a module: Dynamo cannot skip it alone
    m = ollie.optimize(block, measure_cap_s=0.05, cache=False)
    x = torch.randn(8, 16)
    with torch.no_grad():
        assert torch.allclose(m(x), block(x))
        assert m.ollie_backend.skipped_functions == 1, m.ollie_backend.notes
        linear, calls = block.linear.forward, []
        block.linear.forward = lambda t: calls.append(1) or linear(t)  # Dynamo's graph has
        assert torch.allclose(m(x), block(x)) and calls == [1, 1]   # it inlined: not called
        assert m.ollie_backend.graphs == 1  # nor compiled again: Dynamo was never entered
        del block.linear.forward
        other = torch.randn(5, 16)
        assert torch.allclose(m(other), block(other))  # another size: Dynamo's guards decide
    assert m.ollie_backend.graphs == 2
    y = m(x)  # with grad: through Dynamo, compiled for training
    y.sum().backward()
    assert y.requires_grad and block.linear.weight.grad is not None
    assert m.ollie_backend.graphs == 3, m.ollie_backend.notes
