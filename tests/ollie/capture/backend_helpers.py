"""A small graph and a stand-in timing, shared by the backend's path tests."""
import time

import torch

from ollie.capture import eager_or_compiled
from ollie.cost import measure


def elementwise(a, b):
    return torch.tanh(a) * b + 1


def args():
    torch.manual_seed(0)
    return torch.randn(32, 32), torch.randn(32, 32)


def timing(compiled_s, eager_s):
    """A comparison whose baseline (compiled) and challenger (eager) took these times."""
    return measure.Comparison(compiled_s, eager_s, compiled_s / eager_s,
                              0.0, 5)


def compile_with(backend, fn=elementwise):
    return torch.compile(fn, backend=backend)


def compiled_wins_races(monkeypatch):
    """Races of eager against the compile at the user's calls (``CallRace``) run as they do,
    with eager 2 ms slower a call: the compile wins them. Returns the calls a race takes."""
    run = eager_or_compiled.CallRace.run

    def eager_slowed(self, eager, compiled):
        return run(self, lambda: time.sleep(2e-3) or eager(), compiled)
    monkeypatch.setattr(eager_or_compiled.CallRace, "run", eager_slowed)
    race = eager_or_compiled.CallRace
    return 2 * race.BLOCK * race.BLOCKS
