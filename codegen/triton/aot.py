"""Ahead-of-time compilation of a scope's generated kernels for a GPU target -- no GPU needed.

``compile_kernels(scope, arch=90, dtype="fp32")`` runs Triton's real compiler (typing, layout,
``tl.dot`` shape rules, PTX and cubin through the bundled ``ptxas``) on every kernel the
Triton backend generates for ``scope``, with each kernel's first GPU launch candidate. The
interpreter checks what kernels compute; this checks that they compile as GPU code.
"""
from __future__ import annotations

import os

import triton
import triton.language as tl

from codegen.triton.runtime import load
from codegen.triton.tuning import candidates
from ir.check import check
from ir.nodes import Scope

DTYPES = {"fp32": tl.float32, "fp16": tl.float16, "bf16": tl.bfloat16, "fp64": tl.float64}


def compile_kernels(scope: Scope, arch: int = 90, dtype: str = "fp32") -> dict:
    """``{kernel name: triton CompiledKernel}`` for an NVIDIA GPU of compute capability
    ``arch`` (90: H100/H200) with ``dtype`` inputs."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from codegen.triton_backend import Planner

    check(scope)
    saved = os.environ.pop("TRITON_INTERPRET", None)  # @triton.jit must build JITFunctions
    try:
        planner = Planner(scope)
        out = {}
        for plan in planner.plans.values():
            if plan is None:
                continue
            fn = load(planner.source, plan.text.name, interpreted=False)
            cfg = candidates(plan.kind, plan.problem)[0]
            consts = {"ACC": tl.float64 if dtype == "fp64" else tl.float32}
            if plan.dot:
                consts["DOT_DTYPE"] = DTYPES[dtype]
                consts["DOT_PRECISION"] = "ieee"
            consts.update({k: int(v) for k, v in plan.fixed.items()})
            consts.update({k: cfg[k] for k in plan.tuned})
            signature = {p: f"*{dtype}" for p in plan.text.pointers.values()}
            signature.update({k: "constexpr" for k in consts})
            out[plan.text.name] = triton.compile(
                ASTSource(fn, signature, consts), target=GPUTarget("cuda", arch, 32),
                options={"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"],
                         "enable_fp_fusion": True})
        return out
    finally:
        if saved is not None:
            os.environ["TRITON_INTERPRET"] = saved
