"""The two ways a Dynamo graph is compiled: Inductor's ``compile_fx``, or AOTAutograd alone.

Both hand Ollie's compiler (``OllieBackend._inner`` or ``_plain``) the functional core-ATen
graphs AOTAutograd makes, under the same decompositions (``decompositions``: the core ATen
ones plus Inductor's own), which every Ollie trace of torch code into ATen uses too.
"""
from __future__ import annotations

import functools

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
        return compile_fx(gm, example_inputs, inner_compile=inner, config_patches=patches)


def without_inductor(gm, example_inputs, compiler):
    from torch._dynamo.backends.common import aot_autograd

    return aot_autograd(
        fw_compiler=functools.partial(compiler, "forward"),
        bw_compiler=functools.partial(compiler, "backward"),
        inference_compiler=functools.partial(compiler, "inference"),
        decompositions=decompositions(), keep_inference_input_mutations=True,
    )(gm, example_inputs)


def decompositions() -> dict:
    """The core ATen decompositions plus Inductor's own (what Inductor expects to compile)."""
    from torch._inductor import config
    from torch._inductor.decomposition import select_decomp_table

    with config.patch(INDUCTOR_CONFIG):
        return select_decomp_table()
