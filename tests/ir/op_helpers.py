"""Helpers for the operator-library tests: build an op on ir.Tensors, evaluate it with the
reference interpreter and compare with torch on the same fp64 inputs."""
from __future__ import annotations

import numpy as np
import torch

import ir
from ir.nodes import Iter, Scope, Tensor

TOL = dict(rtol=1e-10, atol=1e-10)


def shifted(t: Tensor, lo: int = 3) -> Scope:
    """``t`` as a scope whose traversal ranges start at ``lo``: same values, shifted bounds.
    Passing it as an operand checks that ops read operands relative to their bounds."""
    its = tuple(Iter(f"z{d}", lo, lo + n) for d, n in enumerate(t.shape))
    return Scope(its, (), t[tuple(it.symbol - lo for it in its)], name="shifted")


def random_inputs(shapes, positive=False, seed=0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    if positive:
        return [rng.uniform(0.5, 2.0, s) for s in shapes]
    return [rng.standard_normal(s) for s in shapes]


def check_against_torch(ir_fn, torch_fn, *shapes, positive=False, wrap=False, name=None,
                        seed=0, **kw) -> Scope:
    """``ir_fn(*operands, **kw)`` evaluated == ``torch_fn(*tensors, **kw)`` in fp64.

    One random input per shape (``positive`` draws from [0.5, 2) for log/sqrt/div); with
    ``wrap`` every operand is a ``shifted`` scope. Also checks the result is a scope with
    torch's shape, traversal ranges starting at 0, passes ``ir.check``, and (if given) has
    the name hint ``name``.
    """
    arrays = random_inputs(shapes, positive, seed)
    tensors = [Tensor(f"x{k}", tuple(s), "float64") for k, s in enumerate(shapes)]
    operands = [shifted(t) if wrap else t for t in tensors]
    result = ir_fn(*operands, **kw)
    expected = torch_fn(*(torch.from_numpy(a) for a in arrays), **kw)
    assert isinstance(result, Scope), f"expected an ir.Scope, got {type(result).__name__}"
    assert all(it.lo == 0 for it in result.traversal), result.traversal
    assert result.shape == tuple(expected.shape), (result.shape, tuple(expected.shape))
    if name is not None:
        assert result.name == name, (result.name, name)
    ir.check(result)
    env = {t.name: a for t, a in zip(tensors, arrays)}
    got = ir.evaluate(result, env)
    np.testing.assert_allclose(got, expected.numpy(), **TOL)
    return result


def operands(*shapes) -> list[Tensor]:
    """Tensors named x0, x1, ... for error tests."""
    return [Tensor(f"x{k}", tuple(s)) for k, s in enumerate(shapes)]
