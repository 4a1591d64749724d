"""select, diagonal, diag, trace, var, clamp and full against torch (fp64)."""
import numpy as np
import pytest
import torch

import ir
from ir import Tensor, ops
from ir.ops import OpError

from op_helpers import check_against_torch, operands


@pytest.mark.parametrize("shape,dim,index", [((3, 4), 0, 1), ((3, 4), 1, -1), ((2, 3, 4), -2, 2),
                                             ((5,), 0, 4)])
def test_select_matches_torch(shape, dim, index):
    check_against_torch(lambda x: ops.select(x, dim, index),
                        lambda x: torch.select(x, dim, index), shape, name="select")
    check_against_torch(lambda x: ops.select(x, dim, index),
                        lambda x: torch.select(x, dim, index), shape, wrap=True)


@pytest.mark.parametrize("shape,offset,dim1,dim2", [
    ((4, 4), 0, 0, 1), ((3, 5), 2, 0, 1), ((3, 5), -2, 0, 1), ((3, 5), 7, 0, 1),
    ((5, 3), -1, 1, 0), ((2, 3, 4), 1, 2, 0), ((2, 3, 4), -1, -1, -2), ((4, 4), -4, 0, 1)])
def test_diagonal_matches_torch(shape, offset, dim1, dim2):
    kw = dict(offset=offset, dim1=dim1, dim2=dim2)
    check_against_torch(lambda x: ops.diagonal(x, **kw), lambda x: torch.diagonal(x, **kw),
                        shape, name="diagonal")
    check_against_torch(lambda x: ops.diagonal(x, **kw), lambda x: torch.diagonal(x, **kw),
                        shape, wrap=True)


@pytest.mark.parametrize("shape,k", [((4,), 0), ((3,), 2), ((3,), -1), ((4, 4), 1), ((3, 5), -2),
                                     ((1,), 0)])
def test_diag_matches_torch(shape, k):
    check_against_torch(lambda x: ops.diag(x, k), lambda x: torch.diag(x, k), shape, name="diag")
    check_against_torch(lambda x: ops.diag(x, k), lambda x: torch.diag(x, k), shape, wrap=True)


@pytest.mark.parametrize("shape", [(4, 4), (3, 5), (5, 2), (0, 3)])
def test_trace_matches_torch(shape):
    check_against_torch(ops.trace, torch.trace, shape, name="trace")


def test_trace_of_a_product_reads_its_diagonal_once():
    a, b = Tensor("a", (3, 4)), Tensor("b", (4, 3))
    t = ops.trace(ops.mm(a, b))
    assert len(t.summation) == 1 and t.body.indices[0] == t.body.indices[1]


@pytest.mark.parametrize("shape,dim,correction,keepdim", [
    ((5,), None, 1, False), ((3, 4), 1, 1, False), ((3, 4), (0, 1), 0, True),
    ((2, 3, 4), -1, 2, True), ((2, 3, 4), (0, 2), 1, False), ((1, 3), 0, 1, False),
    ((3, 2), 0, 5, False)])
@pytest.mark.filterwarnings("ignore::UserWarning")  # torch: degrees of freedom <= 0
def test_var_matches_torch(shape, dim, correction, keepdim):
    kw = dict(correction=correction, keepdim=keepdim)
    with np.errstate(all="ignore"):
        check_against_torch(lambda x: ops.var(x, dim, **kw), lambda x: torch.var(x, dim, **kw),
                            shape, name="var")


def test_var_of_one_element_is_nan_like_torch():
    (x,) = operands((1,))
    got = ir.evaluate(ops.var(x), {"x0": np.array([2.0])})
    assert np.isnan(got)


SPECIAL = np.array([np.nan, -np.inf, -2.0, -0.5, 0.0, 0.5, 2.0, np.inf])


@pytest.mark.parametrize("lo,hi", [(-1.0, 1.0), (None, 0.25), (0.0, None), (1.0, -1.0),
                                   (np.nan, 1.0), (-1.0, np.nan)])
def test_clamp_with_numbers_is_torch_clamp_nan_included(lo, hi):
    x = Tensor("x", SPECIAL.shape, "float64")
    got = ir.evaluate(ops.clamp(x, lo, hi), {"x": SPECIAL})
    want = torch.clamp(torch.from_numpy(SPECIAL), lo, hi).numpy()
    np.testing.assert_array_equal(got, want)
    assert np.isnan(got[0])


def test_clamp_with_tensor_bounds_broadcasts_like_torch():
    check_against_torch(lambda x, lo, hi: ops.clamp(x, lo, hi),
                        lambda x, lo, hi: torch.clamp(x, lo, hi), (3, 4), (4,), (2, 1, 1),
                        name="clamp")
    check_against_torch(lambda x, lo: ops.clamp(x, min=lo), lambda x, lo: torch.clamp(x, min=lo),
                        (3, 4), (3, 1))


def test_clamp_needs_a_bound():
    (x,) = operands((3,))
    with pytest.raises(OpError, match="clamp: at least one of 'min' or 'max'"):
        ops.clamp(x)


@pytest.mark.parametrize("size,value,dtype", [((2, 3), 1.5, "float32"), ((4,), 3, "int64"),
                                              ((), -2.0, "float32"), ((2, 0), 1.0, "float32"),
                                              ((2,), True, "bool")])
def test_full_matches_torch(size, value, dtype):
    e = ops.full(size, value)
    want = torch.full(size, value)
    assert e.dtype == dtype == str(want.dtype).removeprefix("torch.")
    assert e.shape == tuple(want.shape) and e.name == "full"
    ir.check(e)
    np.testing.assert_array_equal(ir.evaluate(e, {}), want.double().numpy())
    assert ops.full(size, value, dtype="float16").dtype == "float16"


def test_bad_arguments_name_the_op():
    x, v = operands((3, 4), (3,))
    with pytest.raises(OpError, match="select: index 3 out of range for dim 0 of size 3"):
        ops.select(x, 0, 3)
    with pytest.raises(OpError, match="diagonal: dim1 and dim2 must differ"):
        ops.diagonal(x, 0, 1, -1)
    with pytest.raises(OpError, match="diagonal: expected a tensor of at least 2 dims"):
        ops.diagonal(v)
    with pytest.raises(OpError, match="trace: expected input to be 2-D"):
        ops.trace(v)
    with pytest.raises(OpError, match="diag: expected input to be 1-D or 2-D"):
        ops.diag(operands((2, 2, 2))[0])
    with pytest.raises(OpError, match="full: size must be non-negative ints"):
        ops.full((2, -1), 0.0)
