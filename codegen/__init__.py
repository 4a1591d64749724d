"""Lowering ``ir`` scopes to runnable code: ``codegen.lower(scope) -> Kernel``.

Each backend is a sibling module with a ``lower(scope) -> Kernel`` function, imported on
first use: ``torch`` records an FX graph of vectorised torch calls (CPU or GPU), which
``ollie.capture`` traces into ATen nodes of the graph it rewrites; ``triton`` generates
kernels and their launcher, imported as a module.
``codegen`` imports only ``ir``, torch and triton -- never ``derivations`` or ``ollie``.
"""
from __future__ import annotations

import importlib

from codegen.kernel import Kernel
from ir.check import check
from ir.nodes import Scope

BACKENDS = {"torch": "codegen.torch_backend", "triton": "codegen.triton_backend"}

__all__ = ["BACKENDS", "Kernel", "lower"]


def lower(scope: Scope, backend: str = "torch", fused: bool = False) -> Kernel:
    """Compile ``scope`` with ``backend``; call the result with input tensors.

    ``fused``: the code will be compiled by a compiler that fuses elementwise work into
    reductions (Inductor), so a contraction without data reuse is written as a product and a
    sum, which it turns into one loop, rather than a library call on copied operands.
    Raises ``ir.errors.IRError`` naming the statement if ``scope`` is not a valid expression.
    """
    if not isinstance(scope, Scope):
        raise TypeError(f"codegen.lower takes an ir.Scope, got {type(scope).__name__}")
    if backend not in BACKENDS:
        raise ValueError(f"unknown codegen backend {backend!r}; available: {sorted(BACKENDS)}")
    check(scope)
    module = importlib.import_module(BACKENDS[backend])
    return module.lower(scope, fused=True) if fused and backend == "torch" else \
        module.lower(scope)
