"""Helpers of the Triton backend tests: where kernels run, and a kernel checked against
``ir.evaluate``.

``triton_device`` is a fixture parameter: ``"cpu"`` runs the generated kernels through
Triton's interpreter (``TRITON_INTERPRET=1``, set per test with ``monkeypatch``: Triton reads
it when ``@triton.jit`` runs, i.e. when ``codegen.lower`` compiles the source), ``"cuda"``
compiles them for the GPU and is marked ``gpu`` (skipped without CUDA).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import codegen
from ir import Scope, evaluate, inputs

DEVICES = [
    pytest.param("cpu", id="interpreter"),
    pytest.param("cuda", id="cuda", marks=[
        pytest.mark.gpu,
        pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]),
]
# fp32 results against the fp64 reference; on a GPU tl.dot runs in IEEE fp32 unless torch
# allows TF32 (it does not by default)
TOLERANCE = {torch.float32: (2e-4, 2e-5), torch.float16: (2e-2, 2e-2),
             torch.bfloat16: (5e-2, 5e-2)}


def use_device(monkeypatch, device: str) -> None:
    """Make ``codegen.lower`` produce kernels for ``device``."""
    if device == "cpu":
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    else:
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)


def random_inputs(scope: Scope, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(t.shape).astype(np.float32)
            for n, t in sorted(inputs(scope).items())}


def check_triton(scope: Scope, device: str = "cpu", dtype=torch.float32, seed: int = 0,
                 forms: tuple[str, ...] | None = None, tol=None):
    """Lower ``scope`` with the Triton backend, run it on ``device`` in ``dtype`` and compare
    with the reference interpreter (fp64 on the same, rounded, inputs)."""
    env = random_inputs(scope, seed)
    kernel = codegen.lower(scope, backend="triton")
    if forms is not None:
        assert kernel.forms == forms, f"forms {kernel.forms} != {forms}\n{kernel.source}"
    args = [torch.from_numpy(env[n]).to(device=device, dtype=dtype) for n in kernel.input_names]
    got = kernel(*args)
    want = evaluate(scope, {n: a.double().cpu().numpy()
                            for n, a in zip(kernel.input_names, args)})
    assert tuple(got.shape) == want.shape, f"shape {tuple(got.shape)} != {want.shape}"
    assert got.dtype == dtype and got.device.type == device
    rtol, atol = tol or TOLERANCE[dtype]
    np.testing.assert_allclose(got.double().cpu().numpy(), want, rtol=rtol, atol=atol,
                               err_msg=kernel.source)
    return kernel
