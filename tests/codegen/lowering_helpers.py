"""Small helpers of the codegen tests: random inputs, and a kernel checked against ir.evaluate."""
from __future__ import annotations

from collections import Counter

import numpy as np
import torch

import codegen
from ir import Scope, evaluate, inputs
from ir.nodes import COMPARISONS, Binary


def random_inputs(scope: Scope, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal(t.shape) for name, t in sorted(inputs(scope).items())}


def check_lowering(scope: Scope, seed: int = 0, rtol: float = 1e-9, atol: float = 1e-9):
    """Lower ``scope``, run it on fp64 inputs and compare with the reference interpreter."""
    env = random_inputs(scope, seed)
    kernel = codegen.lower(scope)
    got = kernel(*(torch.from_numpy(env[n]) for n in kernel.input_names))
    want = evaluate(scope, env)
    assert isinstance(got, torch.Tensor)
    assert tuple(got.shape) == want.shape, \
        f"shape {tuple(got.shape)} != {want.shape}\n{kernel.source}"
    comparison = not scope.summation and isinstance(scope.body, Binary) and \
        scope.body.op in COMPARISONS  # a torch.bool result, as torch's comparisons give
    assert got.dtype == (torch.bool if comparison else torch.float64) or not env, got.dtype
    np.testing.assert_allclose(got.numpy(), want, rtol=rtol, atol=atol, equal_nan=True,
                               err_msg=kernel.source)
    return kernel


def calls(kernel) -> Counter:
    """How many times the torch kernel's graph calls each function or method, by name
    (``conv2d``, ``getitem``, ``reshape``, ``g2bmm.default``)."""
    return Counter(getattr(n.target, "__name__", n.target) for n in kernel.graph.nodes
                   if n.op in ("call_function", "call_method"))


def constant_args(kernel) -> list:
    """The Python numbers the torch kernel's graph passes to its calls."""
    return [a for n in kernel.graph.nodes for a in n.args if isinstance(a, float)]


SNAPSHOTS = __import__("pathlib").Path(__file__).parent / "snapshots"


def check_snapshot(name: str, source: str) -> None:
    """Generated ``source`` equals the stored snapshot ``name``; OLLIE_UPDATE_SNAPSHOTS=1
    writes it (a missing snapshot fails: it is written only on request, then reviewed)."""
    import os

    path = SNAPSHOTS / f"{name}.py.txt"
    if os.environ.get("OLLIE_UPDATE_SNAPSHOTS") == "1":
        path.write_text(source)
    assert path.exists(), f"no snapshot {path.name}; write it with OLLIE_UPDATE_SNAPSHOTS=1"
    assert source == path.read_text(), (
        f"generated source of {name!r} changed; if intended, regenerate with "
        f"OLLIE_UPDATE_SNAPSHOTS=1 and review the diff\n{source}")
