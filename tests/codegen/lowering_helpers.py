"""Small helpers of the codegen tests: random inputs, and a kernel checked against ir.evaluate."""
from __future__ import annotations

import numpy as np
import torch

import codegen
from ir import Scope, evaluate, inputs


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
    assert got.dtype == torch.float64 or not env
    np.testing.assert_allclose(got.numpy(), want, rtol=rtol, atol=atol, equal_nan=True,
                               err_msg=kernel.source)
    return kernel
