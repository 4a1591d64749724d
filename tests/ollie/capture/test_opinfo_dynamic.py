"""PyTorch's own OpInfo samples, under gradients, one closure per sample: Dynamo recompiles
the shared code object with sizes made symbolic, and no graph may fall back to eager."""
import warnings

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db

import ollie

OPS = ("mm", "addmm", "baddbmm", "nn.functional.conv2d")
SAMPLES = 4


def samples(name):
    (info,) = [o for o in op_db if o.name == name and o.variant_test_name == ""]
    return info, list(info.sample_inputs("cpu", torch.float32, requires_grad=True))[:SAMPLES]


def closure(op, kwargs):
    def f(*xs):
        return op(*xs, **kwargs)
    return f


def inductor_failures(info, cases) -> set[int]:
    """The samples torch.compile itself (Inductor, default settings) cannot compile."""
    torch._dynamo.reset()
    failed = set()
    for k, sample in enumerate(cases):
        try:
            torch.compile(closure(info.op, sample.kwargs))(sample.input, *sample.args)
        except Exception:
            failed.add(k)
    torch._dynamo.reset()
    return failed


@pytest.mark.parametrize("name", OPS)
def test_opinfo_samples_under_gradients_never_fall_back_to_eager(name):
    """No graph runs eagerly unless Inductor alone cannot compile it either (torch.compile
    then raises where Ollie runs the graph eagerly, with a warning)."""
    info, cases = samples(name)
    backend = ollie.OllieBackend(ollie.Options(measure_cap_s=0.02, budget_s=0.5))
    eager = set()
    for k, sample in enumerate(cases):
        args = [sample.input, *sample.args]
        compiled = torch.compile(closure(info.op, sample.kwargs), backend=backend)
        notes = len(backend.notes)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ollie.OllieWarning)
            out = compiled(*args)
        if any("eagerly" in n for n in backend.notes[notes:]):
            eager.add(k)
        expected = info.op(*args, **sample.kwargs)
        torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
        leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
        for g, w in zip(torch.autograd.grad(out.sum(), leaves),
                        torch.autograd.grad(expected.sum(), leaves)):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
    assert eager <= inductor_failures(info, cases), backend.notes
