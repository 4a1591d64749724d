"""Small helpers of the codegen tests: random inputs, and a kernel checked against ir.evaluate."""
from __future__ import annotations

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


SNAPSHOTS = __import__("pathlib").Path(__file__).parent / "snapshots"


def check_snapshot(name: str, source: str) -> None:
    """Generated ``source`` equals the stored snapshot ``name`` (OLLIE_UPDATE_SNAPSHOTS=1
    rewrites it; a missing snapshot is written and the test skipped for review)."""
    import os

    import pytest

    path = SNAPSHOTS / f"{name}.py.txt"
    update = os.environ.get("OLLIE_UPDATE_SNAPSHOTS") == "1"
    if update or not path.exists():
        path.write_text(source)
        if not update:
            pytest.skip(f"wrote a new snapshot {path.name}; review it and commit")
    assert source == path.read_text(), (
        f"generated source of {name!r} changed; if intended, regenerate with "
        f"OLLIE_UPDATE_SNAPSHOTS=1 and review the diff\n{source}")
