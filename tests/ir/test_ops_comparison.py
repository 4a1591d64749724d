"""Comparisons and where against torch, NaN and inf included: where's untaken branch never
leaks into the result (it is not ``c * a + (1 - c) * b``)."""
import numpy as np
import pytest
import torch

import ir
from ir import Tensor, ops, parse, to_latex, to_text
from ir.nodes import BinOp, selection

VALUES = np.array([-np.inf, -2.0, -0.0, 0.0, 1.0, np.inf, np.nan])
A, B = (m.ravel() for m in np.meshgrid(VALUES, VALUES, indexing="ij"))
COMPARE = [(ops.lt, torch.lt), (ops.le, torch.le), (ops.gt, torch.gt), (ops.ge, torch.ge),
           (ops.eq, torch.eq), (ops.ne, torch.ne)]


def run(e, **arrays):
    return ir.evaluate(e, {k: np.asarray(v, dtype=np.float64) for k, v in arrays.items()})


@pytest.mark.parametrize("ir_fn,torch_fn", COMPARE, ids=lambda f: getattr(f, "__name__", ""))
def test_comparison_of_tensors_is_torch_nan_included(ir_fn, torch_fn):
    x, y = Tensor("x", A.shape, "float64"), Tensor("y", B.shape, "float64")
    e = ir_fn(x, y)
    assert e.dtype == "bool" and e.name == ir_fn.__name__
    want = torch_fn(torch.from_numpy(A), torch.from_numpy(B)).double().numpy()
    np.testing.assert_array_equal(run(e, x=A, y=B), want)


@pytest.mark.parametrize("ir_fn,torch_fn", COMPARE, ids=lambda f: getattr(f, "__name__", ""))
def test_comparison_with_a_number_and_broadcasting(ir_fn, torch_fn):
    x = Tensor("x", (len(VALUES), 1), "float64")
    want = torch_fn(torch.from_numpy(VALUES[:, None]), 0.0).double().numpy()
    np.testing.assert_array_equal(run(ir_fn(x, 0.0), x=VALUES[:, None]), want)
    y = Tensor("y", (3,), "float64")
    assert ir_fn(x, y).shape == (len(VALUES), 3)


def test_where_of_tensors_is_torch_where():
    c = Tensor("c", A.shape, "bool")
    x, y = Tensor("x", A.shape, "float64"), Tensor("y", B.shape, "float64")
    cond = np.arange(len(A)) % 3 == 0
    got = run(ops.where(c, x, y), c=cond, x=A, y=B)
    want = torch.where(torch.from_numpy(cond), torch.from_numpy(A), torch.from_numpy(B))
    np.testing.assert_array_equal(got, want.numpy())


def test_where_never_leaks_the_untaken_branch():
    """torch.where(x > 0, log(x), 0): log(-1) is NaN but never taken; 0 * NaN would be."""
    x = Tensor("x", VALUES.shape, "float64")
    e = ops.where(ops.gt(x, 0), ops.log(x), 0.0)
    t = torch.from_numpy(VALUES)
    want = torch.where(t > 0, torch.log(t), 0.0).numpy()
    got = run(e, x=VALUES)
    np.testing.assert_array_equal(got, want)
    assert not np.isnan(got[:4]).any()


@pytest.mark.parametrize("a,b", [(1.5, -2.0), (0.0, 3.0), (2.0, 0.0), (np.inf, np.nan)])
def test_where_with_number_branches(a, b):
    x = Tensor("x", VALUES.shape, "float64")
    want = torch.where(torch.from_numpy(VALUES) >= 0, a, b).double().numpy()
    np.testing.assert_array_equal(run(ops.where(ops.ge(x, 0), a, b), x=VALUES), want)


def test_where_broadcasts_all_three():
    c, x, y = Tensor("c", (3, 1), "bool"), Tensor("x", (4,), "float64"), Tensor("y", (2, 1, 1))
    assert ops.where(c, x, y).shape == (2, 3, 4)
    cond = np.array([[True], [False], [True]])
    a, b = np.arange(4.0), np.full((2, 1, 1), -1.0)
    want = torch.where(torch.from_numpy(cond), torch.from_numpy(a), torch.from_numpy(b))
    np.testing.assert_array_equal(run(ops.where(c, x, y), c=cond, x=a, y=b), want.numpy())


def test_where_body_is_a_selection_the_lowerings_recognise():
    c, x, y = Tensor("c", (3,), "bool"), Tensor("x", (3,)), Tensor("y", (3,))
    e = ops.where(c, x, y)
    assert selection(e.body) == (c[e.traversal[0].symbol], x[e.traversal[0].symbol],
                                 y[e.traversal[0].symbol])
    assert ops.where(c, x, 0.0).body.op is BinOp.MASK  # a 0 branch is no term at all


def test_comparisons_and_where_print_parse_and_render():
    x = Tensor("x", (3,))
    e = ops.where(ops.le(x, 0.5), ops.neg(x), ops.ne(x, 1.0))
    text = to_text(e, declarations=True)
    assert "le(x[i], 0.5)" in text and "mask(" in text
    assert parse(text) == e
    assert r"\left[x_{i} \le 0.5\right]" in to_latex(e)


def test_where_needs_a_tensor_condition():
    with pytest.raises(ops.OpError, match="where: condition must be an ir.Tensor"):
        ops.where(True, Tensor("x", (2,)), 0.0)
