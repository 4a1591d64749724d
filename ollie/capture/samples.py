"""Real sample inputs shaped like a graph's (fake) example inputs.

Ollie measures and checks ATen graphs, never user code, so it needs data of the graph's
shapes, strides and dtypes. A symbolic size (Dynamo's SymInt, once a size has varied) is
sampled at its hint, the size of the call that compiled the graph, without adding a guard, or
inside ``sizes_at`` at the value given there.
"""
from __future__ import annotations

import contextlib
import contextvars

import sympy
import torch
from torch.fx.experimental.symbolic_shapes import optimization_hint

SEED = 0  # of every draw of sample inputs
_SIZES: contextvars.ContextVar[dict] = contextvars.ContextVar("ollie_sizes", default={})


@contextlib.contextmanager
def sizes_at(values: dict):
    """Within, the size symbols in ``values`` take those values, not their hints, wherever a
    size is made concrete (``concrete``, ``sample_like``)."""
    token = _SIZES.set(values)
    try:
        yield
    finally:
        _SIZES.reset(token)


def concrete(value, at: dict | None = None):
    """An int for a SymInt (its hint, or its value where the size symbols in ``at``, or in
    the ``sizes_at`` around the call, take those values), a float for a SymFloat; anything
    else as it is."""
    if _SIZES.get():
        at = {**_SIZES.get(), **(at or {})}
    if isinstance(value, torch.SymInt):
        expr = value.node.expr
        if at and expr.free_symbols & at.keys():
            hints = value.node.shape_env.backed_var_to_val
            values = {symbol: sympy.Integer(v) for symbol, v in at.items()}
            return int(expr.xreplace(values).xreplace(hints))
        return optimization_hint(value, fallback=8)  # an unbacked size has no hint
    if isinstance(value, torch.SymFloat):
        return float(value.node.hint) if value.node.hint is not None else 1.0
    return value


def sample_like(example_inputs, at: dict | None = None) -> list:
    """Real inputs shaped like the example inputs (at the sizes ``at`` gives some size
    symbols): normal floats, random bools, zero integers (0 is valid wherever an index is).
    Drawn from a generator of Ollie's own, seeded alike every time: Ollie's choices on a graph
    do not depend on where the program's random state happens to be."""
    out, generators = [], {}
    for x in example_inputs:
        if not isinstance(x, torch.Tensor):
            out.append(concrete(x, at))
            continue
        t = torch.empty_strided(tuple(concrete(d, at) for d in x.shape),
                                tuple(concrete(d, at) for d in x.stride()),
                                dtype=x.dtype, device=x.device)
        if x.device not in generators:
            generators[x.device] = torch.Generator(device=x.device).manual_seed(SEED)
        if x.dtype.is_floating_point or x.dtype.is_complex:
            t.normal_(generator=generators[x.device])
        elif x.dtype == torch.bool:
            t.copy_(torch.rand(t.shape, device=x.device, generator=generators[x.device]) < 0.5)
        else:
            t.zero_()
        out.append(t)
    return out


@contextlib.contextmanager
def real_computation():
    """AOTAutograd calls its compilers with a fake mode active and Inductor with the Python
    dispatcher on (a big mm then runs ~10× slower); Ollie's samples and timings need neither."""
    from torch._dispatch.python import no_python_dispatcher
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily(), no_python_dispatcher():
        yield


def unsupported(example_inputs) -> str | None:
    """Why no sample data can stand in for these inputs (None: it can)."""
    for x in example_inputs:
        if isinstance(x, torch.Tensor):
            if x.device.type == "meta":
                return "meta tensors have no data to compute on"
            if x.layout != torch.strided:
                return f"{x.layout} tensors are not supported"
    return None
