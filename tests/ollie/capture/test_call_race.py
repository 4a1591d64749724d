"""Where eager PyTorch and the compiled artifact of a whole function differ by about Dynamo's
frame, the user's own calls time both (``eager_or_compiled.CallRace``): each call runs one
side only, and ``ollie.optimize`` follows the faster, stored for the next process."""
import time

import pytest
import torch

import ollie
from ollie.capture import eager_or_compiled
from ollie.capture.backend import OllieBackend
from ollie.cost import measure

from backend_helpers import timing


@pytest.mark.parametrize("eager_s, compiled_s, eager_wins", [
    (1.0, 2.0, True), (2.0, 1.0, False),
    (0.99, 1.0, False),  # a lead within the noise floor: the compile stays
])
def test_a_race_runs_each_call_once_in_blocks_and_picks_the_faster(eager_s, compiled_s,
                                                                   eager_wins):
    now, ran, told = [0.0], [], []

    def side(name, seconds):
        def call():
            ran.append(name)
            now[0] += seconds
            return name
        return call

    race = eager_or_compiled.CallRace(told.append, clock=lambda: now[0])
    block, blocks = race.BLOCK, race.BLOCKS
    outs = [race.run(side("eager", eager_s), side("compiled", compiled_s))
            for _ in range(2 * block * blocks)]
    assert outs == ran == (["compiled"] * block + ["eager"] * block) * blocks
    assert told == [race.decision] and race.decision.adopted == eager_wins
    assert (race.decision.baseline_s, race.decision.challenger_s) == \
        pytest.approx((compiled_s, eager_s))


def slow_compile(monkeypatch, calls):
    """Ollie's compile a millisecond slower a call than it is; eager within a frame of it
    as the backend measures them (so the user's calls decide)."""
    monkeypatch.setattr(measure, "compare", lambda *a, **k: timing(1e-4, 1.1e-4))
    frozen_or = OllieBackend._frozen_or

    def slowed(self, *args):
        compiled = frozen_or(self, *args)

        def run(*inputs):
            calls.append(1)
            time.sleep(1e-3)
            return compiled(*inputs)
        return run
    monkeypatch.setattr(OllieBackend, "_frozen_or", slowed)


def test_a_module_follows_its_race_and_the_next_process_reads_it(monkeypatch, tmp_path):
    calls = []
    slow_compile(monkeypatch, calls)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Linear(32, 8)).eval()
    m = ollie.optimize(model, measure_cap_s=0.05, cache_dir=str(tmp_path))
    x = torch.randn(4, 16)
    race = eager_or_compiled.CallRace
    with torch.no_grad():
        for _ in range(1 + 2 * race.BLOCK * race.BLOCKS):  # the compiling call, the race
            assert torch.allclose(m(x), model(x), atol=1e-6)
        assert len(calls) == 1 + race.BLOCK * race.BLOCKS  # each call ran one side only
        assert m.ollie_eager_won((x,), {}), m.ollie_backend.notes
        m(x)
    assert len(calls) == 1 + race.BLOCK * race.BLOCKS  # eager from now on
    assert any("runs eagerly" in n and "timed at the user's calls" in n
               for n in m.ollie_backend.notes), m.ollie_backend.notes

    torch._dynamo.reset()
    monkeypatch.setattr(measure, "compare", lambda *a, **k: pytest.fail("measured again"))
    again = ollie.optimize(model, measure_cap_s=0.05, cache_dir=str(tmp_path))
    with torch.no_grad():
        assert torch.allclose(again(x), model(x), atol=1e-6)
        assert again.ollie_eager_won((x,), {}), again.ollie_backend.notes


def test_a_function_follows_its_race(monkeypatch):
    calls = []
    slow_compile(monkeypatch, calls)

    def affine_tanh(x, w):
        return torch.tanh(x @ w + 1)

    f = ollie.optimize(eager_or_compiled.own_code(affine_tanh, "race_affine_tanh"),
                       measure_cap_s=0.05, cache=False)
    x, w = torch.randn(4, 16), torch.randn(16, 8)
    race = eager_or_compiled.CallRace
    with torch.no_grad():
        for k in range(1 + 2 * race.BLOCK * race.BLOCKS):
            assert torch.allclose(f(x, w), affine_tanh(x, w), atol=1e-6)
            assert f.racing == (k < 2 * race.BLOCK * race.BLOCKS)
    assert f.runs_eagerly and len(calls) == 1 + race.BLOCK * race.BLOCKS, f.backend.notes


class Residual(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(16, 16)

    def forward(self, x):
        return x + self.linear(x)


@pytest.mark.parametrize("make", [
    lambda: torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Linear(32, 8)), Residual])
def test_at_symbolic_sizes_an_eager_win_covers_sizes_near_the_raced_one(monkeypatch, make):
    """Dynamo compiles the second size's graph with symbolic sizes: its race covers the
    sizes up to twice the raced one (the module then called directly), not those beyond."""
    calls = []
    slow_compile(monkeypatch, calls)
    torch.manual_seed(0)
    model = make().eval()
    m = ollie.optimize(model, measure_cap_s=0.05, cache=False)
    race = eager_or_compiled.CallRace
    per_size = 1 + race.BLOCK * race.BLOCKS  # the compiling call, the race's compiled calls
    with torch.no_grad():
        for rows in (4, 6):
            x = torch.randn(rows, 16)
            for _ in range(1 + 2 * race.BLOCK * race.BLOCKS):
                assert torch.allclose(m(x), model(x), atol=1e-6)
        assert len(calls) == 2 * per_size and m.ollie_backend.eager_sizes, \
            m.ollie_backend.notes
        for rows in (3, 9, 12):  # eager, without Dynamo
            x = torch.randn(rows, 16)
            assert torch.allclose(m(x), model(x), atol=1e-6)
        assert len(calls) == 2 * per_size
        x = torch.randn(13, 16)  # beyond: the compile
        assert torch.allclose(m(x), model(x), atol=1e-6)
        assert len(calls) == 2 * per_size + 1


def test_a_function_at_symbolic_sizes_runs_eagerly_only_near_its_race(monkeypatch):
    calls = []
    slow_compile(monkeypatch, calls)

    def gate(x, w):
        return torch.sigmoid(x @ w) * x

    f = ollie.optimize(eager_or_compiled.own_code(gate, "race_symbolic_gate"),
                       measure_cap_s=0.05, cache=False)
    w = torch.randn(16, 16)
    race = eager_or_compiled.CallRace
    x = torch.randn(6, 16)
    torch._dynamo.mark_dynamic(x, 0)
    with torch.no_grad():
        for _ in range(1 + 2 * race.BLOCK * race.BLOCKS):
            assert torch.allclose(f(x, w), gate(x, w), atol=1e-6)
        ran = len(calls)
        assert ran == 1 + race.BLOCK * race.BLOCKS
        f(torch.randn(10, 16), w)
        assert len(calls) == ran and not f.runs_eagerly, f.backend.notes
        f(torch.randn(13, 16), w)  # beyond twice the raced size: the compile
        assert len(calls) == ran + 1


@pytest.mark.parametrize("fast_path", [True, False])
def test_eager_is_timed_at_the_calls_where_it_runs_a_kernel_the_graph_does_not_show(
        monkeypatch, fast_path):
    """nn.MultiheadAttention's eager inference runs one fused kernel; its captured graph, run
    eagerly, runs its ops one by one: a compile 3× faster than that graph is still raced."""
    monkeypatch.setattr(measure, "compare", lambda *a, **k: timing(1e-4, 3e-4))

    class Attention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.attention = torch.nn.MultiheadAttention(32, 4, batch_first=True) \
                if fast_path else torch.nn.Linear(32, 32)

        def forward(self, x):
            return self.attention(x, x, x, need_weights=False)[0] if fast_path \
                else self.attention(x)

    torch.manual_seed(0)
    model = Attention().eval()
    m = ollie.optimize(model, measure_cap_s=0.05, cache=False)
    x = torch.randn(2, 8, 32)
    with torch.no_grad():
        assert torch.allclose(m(x), model(x), atol=1e-5)
    race = eager_or_compiled.CallRace
    raced = any(f"the first {2 * race.BLOCK * race.BLOCKS} calls time both" in n
                for n in m.ollie_backend.notes)
    assert raced == fast_path, m.ollie_backend.notes


def test_a_sequential_compiled_after_another_is_called_directly_where_eager_won(monkeypatch):
    """Every nn.Sequential is compiled through one wrapper frame of Dynamo's, which remembers
    the sizes it saw: the second module's first graph has symbolic sizes, some guarded to
    constants (its channels), and its eager win still covers its calls."""
    monkeypatch.setattr(measure, "compare", lambda *a, **k: timing(2e-4, 1e-4))
    torch.manual_seed(0)
    first = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU()).eval()
    second = torch.nn.Sequential(torch.nn.Conv1d(8, 16, 3), torch.nn.ReLU()).eval()
    optimized = [ollie.optimize(m, measure_cap_s=0.05, cache=False) for m in (first, second)]
    with torch.no_grad():
        for rows in (4, 6):
            optimized[0](torch.randn(rows, 32))
        x = torch.randn(1, 8, 20)
        assert torch.allclose(optimized[1](x), second(x), atol=1e-6)
        assert optimized[1].ollie_eager_won((x,), {}), optimized[1].ollie_backend.notes


def test_a_race_waits_through_other_calls_only_so_long():
    now, given_up = [0.0], []
    race = eager_or_compiled.CallRace(lambda d: None, clock=lambda: now[0],
                                      given_up=lambda: given_up.append(1))
    assert not any(race.passed_by() for _ in range(race.PATIENCE - 1))
    race.run(lambda: None, lambda: None)  # a call it times: the wait starts again
    assert not any(race.passed_by() for _ in range(race.PATIENCE - 1)) and not given_up
    assert race.passed_by() and given_up == [1]  # the PATIENCE-th call in a row


@pytest.mark.parametrize("as_module", [False, True])
def test_a_race_is_given_up_when_every_call_brings_a_new_length(monkeypatch, as_module):
    """A decoder's length grows at every call: the race started at one length never gets
    its second call, and the calls settle on the compile."""
    calls = []
    slow_compile(monkeypatch, calls)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Linear(32, 8)).eval()

    def head(x):
        return model(x)

    f = ollie.optimize(model if as_module else
                       eager_or_compiled.own_code(head, f"race_decoder_{as_module}"),
                       measure_cap_s=0.05, cache=False)
    backend = f.ollie_backend if as_module else f.backend
    races = (lambda: bool(f.ollie_races)) if as_module else (lambda: f.racing)
    patience = eager_or_compiled.CallRace.PATIENCE
    with torch.no_grad():
        for length in range(4, 7 + patience):
            x = torch.randn(length, 16)
            assert torch.allclose(f(x), model(x), atol=1e-6)
    assert not races() and any("was given up" in n for n in backend.notes), backend.notes
    if not as_module:
        assert f.func is f._compiled  # torch.compile's own call path from now on
