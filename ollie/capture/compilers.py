"""The two ways a Dynamo graph is compiled: Inductor's ``compile_fx``, or AOTAutograd alone.

Both hand Ollie's compiler (``OllieBackend._inner`` or ``_plain``) the functional core-ATen
graphs AOTAutograd makes, under the same decompositions (``decompositions``: the core ATen
ones, Inductor's own, and multiply-adds written out), which every Ollie trace of torch code into ATen uses too.
"""
from __future__ import annotations

import functools

import torch

from ollie.capture.cache_identity import CacheIdentity

# Random ops draw exactly as in eager mode (dropout under a fixed seed gives eager's mask).
INDUCTOR_CONFIG = {"fallback_random": True}


def with_inductor(gm, example_inputs, inner, options=None):
    """Inductor's compile of ``gm``; through ``inner`` (Ollie's) when given, under Ollie's
    cache identity, so that AOTAutograd's cache keeps Ollie's artifacts apart from
    torch.compile's and a warm start loads the one Ollie chose."""
    from torch._inductor.compile_fx import compile_fx

    if inner is None:  # Inductor alone: its caches work as for torch.compile
        return compile_fx(gm, example_inputs, config_patches=INDUCTOR_CONFIG)
    import torch._functorch.config as functorch_config

    patches = dict(INDUCTOR_CONFIG, post_grad_custom_post_pass=CacheIdentity(options))
    with functorch_config.patch(enable_autograd_cache=options.cache and
                                functorch_config.enable_autograd_cache):
        return compile_fx(gm, example_inputs, inner_compile=inner, config_patches=patches,
                          decompositions=decompositions())


def without_inductor(gm, example_inputs, compiler):
    from torch._dynamo.backends.common import aot_autograd

    return aot_autograd(
        fw_compiler=functools.partial(compiler, "forward"),
        bw_compiler=functools.partial(compiler, "backward"),
        inference_compiler=functools.partial(compiler, "inference"),
        decompositions=decompositions(), keep_inference_input_mutations=True,
    )(gm, example_inputs)


@functools.cache
def decompositions() -> dict:
    """The core ATen decompositions plus Inductor's own (what Inductor expects to compile),
    and ``ARITHMETIC``'s."""
    from torch._decomp import decomposition_table
    from torch._inductor import config
    from torch._inductor.decomposition import select_decomp_table

    with config.patch(INDUCTOR_CONFIG):
        table = dict(select_decomp_table())
    for op in ARITHMETIC:
        table[op] = _in_full_precision(decomposition_table[op])
    return table


# Pointwise ops that Inductor lowers whole but that are multiply-adds: written as mul, div and
# add, an affine map spelled ``torch.addcmul(shift, x @ w, scale)`` is the one Ollie's graph
# rules fold (Inductor fuses the pieces back into one kernel).
ARITHMETIC = (torch.ops.aten.addcmul.default, torch.ops.aten.addcdiv.default)


def _in_full_precision(decompose):
    """``decompose`` where every tensor is float32 or float64; elsewhere the op stays whole,
    as eager rounds it once (``NotImplemented`` tells the tracer to keep it)."""
    full = (torch.float32, torch.float64)

    def decomposed(*args, **kwargs):
        if any(isinstance(a, torch.Tensor) and a.dtype not in full for a in args):
            return NotImplemented
        return decompose(*args, **kwargs)
    return decomposed
