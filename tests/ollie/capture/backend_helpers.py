"""A small graph and a stand-in timing, shared by the backend's path tests."""
import torch

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
