"""New elementwise math of the operator library (pow, rsqrt, ...) against torch, on inputs
with negatives, zeros, ±1, NaN and ±inf: the IR must give torch's value at every one."""
import numpy as np
import pytest
import torch

import ir
from ir import Tensor, ops, parse, to_latex, to_text

SPECIAL = np.array([-np.inf, -8.0, -2.5, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 2.0, 3.0, np.inf,
                    np.nan])


def grid(values=SPECIAL):
    """Every pair of ``values``: (rows, columns) arrays for binary ops."""
    a, b = np.meshgrid(values, values, indexing="ij")
    return a.copy(), b.copy()


def evaluate(scope, **arrays):
    return ir.evaluate(scope, {k: np.asarray(v, dtype=np.float64) for k, v in arrays.items()})


def same(got, want):
    """Equal values, NaN where torch has NaN, and the sign of zeros and infinities."""
    want = want.numpy() if isinstance(want, torch.Tensor) else np.asarray(want)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0, equal_nan=True)
    finite = ~np.isnan(want)
    assert (np.signbit(got[finite]) == np.signbit(want[finite])).all() or \
        np.array_equal(got[finite], want[finite]), (got, want)


def test_pow_of_two_tensors_is_torch_pow_everywhere():
    a, b = grid()
    x, y = Tensor("x", a.shape, "float64"), Tensor("y", b.shape, "float64")
    e = ops.pow(x, y)
    ir.check(e)
    got = evaluate(e, x=a, y=b)
    np.testing.assert_allclose(got, torch.pow(torch.from_numpy(a), torch.from_numpy(b)),
                               equal_nan=True)
    assert np.isnan(evaluate(ops.pow(Tensor("x", (1,)), 0.5), x=[-8.0]))[0]


@pytest.mark.parametrize("exponent", [0.5, -0.5, 2.0, 3.0, -1.0, -2.0, 0.0, 1 / 3, 7.0,
                                      np.inf, -np.inf, np.nan])
def test_pow_with_a_number_exponent_is_torch_pow(exponent):
    x = Tensor("x", SPECIAL.shape, "float64")
    got = evaluate(ops.pow(x, float(exponent)), x=SPECIAL)
    same(got, torch.pow(torch.from_numpy(SPECIAL), float(exponent)))


@pytest.mark.parametrize("base", [2.0, 0.5, 1.0, 0.0, -2.0, np.inf])
def test_pow_with_a_number_base_is_torch_pow(base):
    x = Tensor("x", SPECIAL.shape, "float64")
    got = evaluate(ops.pow(float(base), x), x=SPECIAL)
    np.testing.assert_allclose(got, torch.pow(float(base), torch.from_numpy(SPECIAL)),
                               equal_nan=True)


def test_pow_broadcasts_like_torch():
    x, y = Tensor("x", (3, 1), "float64"), Tensor("y", (4,), "float64")
    a, b = np.abs(np.random.default_rng(0).standard_normal((3, 1))), np.arange(4.0) - 1
    got = evaluate(ops.pow(x, y), x=a, y=b)
    np.testing.assert_allclose(got, torch.pow(torch.from_numpy(a), torch.from_numpy(b)))
    assert ops.pow(x, y).shape == (3, 4)


def test_rsqrt_is_torch_rsqrt():
    x = Tensor("x", SPECIAL.shape, "float64")
    same(evaluate(ops.rsqrt(x), x=SPECIAL), torch.rsqrt(torch.from_numpy(SPECIAL)))


def test_sqrt_of_a_negative_number_is_nan_like_torch():
    x = Tensor("x", SPECIAL.shape, "float64")
    got = evaluate(ops.sqrt(x), x=SPECIAL)
    same(got, torch.sqrt(torch.from_numpy(SPECIAL)))
    assert np.isnan(got[SPECIAL < 0]).all()


def test_pow_prints_parses_and_renders():
    x = Tensor("x", (3,))
    e = ops.pow(ops.exp(x), 2)
    text = to_text(e, declarations=True)
    assert "pow(exp[i], 2)" in text
    assert parse(text) == e
    assert "^{2}" in to_latex(e)


def test_pow_needs_a_tensor_operand():
    with pytest.raises(ops.OpError, match="pow: at least one operand"):
        ops.pow(2, 3)


def test_new_builders_are_exported():
    for name in ("pow", "rsqrt", "erf", "gelu"):
        assert name in ops.__all__ and callable(getattr(ops, name))


def test_erf_is_torch_erf():
    x = Tensor("x", SPECIAL.shape, "float64")
    same(evaluate(ops.erf(x), x=SPECIAL), torch.erf(torch.from_numpy(SPECIAL)))


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_is_torch_gelu(approximate):
    values = np.concatenate([SPECIAL, np.linspace(-6, 6, 41)])
    x = Tensor("x", values.shape, "float64")
    e = ops.gelu(x, approximate=approximate)
    want = torch.nn.functional.gelu(torch.from_numpy(values), approximate=approximate)
    np.testing.assert_allclose(evaluate(e, x=values), want, rtol=1e-14, atol=1e-15,
                               equal_nan=True)


def test_gelu_rejects_an_unknown_approximation():
    with pytest.raises(ops.OpError, match="gelu: approximate must be 'none' or 'tanh'"):
        ops.gelu(Tensor("x", (2,)), approximate="fast")


def test_erf_prints_parses_and_renders():
    e = ops.gelu(Tensor("x", (3,)))
    assert parse(to_text(e, declarations=True)) == e
    assert r"\operatorname{erf}" in to_latex(e)
