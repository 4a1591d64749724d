import pytest
import torch

from ir import ops
from ir.nodes import Reduce
from ir.ops import OpError

from op_helpers import check_against_torch, operands

REDUCTIONS = [(ops.sum, torch.sum), (ops.mean, torch.mean), (ops.amax, torch.amax),
              (ops.amin, torch.amin)]
CASES = [  # (shape, kwargs)
    ((2, 3, 4), {}), ((2, 3, 4), dict(dim=1)), ((2, 3, 4), dict(dim=-1, keepdim=True)),
    ((2, 3, 4), dict(dim=(0, 2))), ((2, 3, 4), dict(dim=(2, 0), keepdim=True)),
    ((5,), dict(dim=0)), ((), {}), ((1, 4), dict(dim=0)), ((3, 1), dict(dim=(0, 1))),
    ((0, 3), dict(dim=1)),
]


@pytest.mark.parametrize("ir_fn,torch_fn", REDUCTIONS, ids=lambda f: getattr(f, "__name__", ""))
@pytest.mark.parametrize("shape,kw", CASES, ids=str)
def test_reduction_matches_torch(ir_fn, torch_fn, shape, kw):
    check_against_torch(ir_fn, torch_fn, shape, name=ir_fn.__name__, **kw)


@pytest.mark.parametrize("shape,dim", [((5,), 0), ((3, 4), 0), ((3, 4), 1), ((2, 3, 4), -2),
                                       ((0, 3), 0), ((1, 4), 1)], ids=str)
def test_cumsum_matches_torch(shape, dim):
    check_against_torch(ops.cumsum, torch.cumsum, shape, dim=dim)


def test_cumsum_is_a_sum_over_shifts_and_refuses_a_0d_tensor():
    scope = ops.cumsum(ops.exp(operands((4, 3))[0]), 0)
    assert scope.reduce is Reduce.SUM and [it.extent for it in scope.summation] == [4]
    with pytest.raises(OpError, match="0-d"):
        ops.cumsum(operands(())[0], 0)


@pytest.mark.parametrize("ir_fn,torch_fn", REDUCTIONS[:2], ids=lambda f: f.__name__)
def test_sum_and_mean_over_an_empty_dim(ir_fn, torch_fn):
    check_against_torch(ir_fn, torch_fn, (2, 0, 3), dim=1)  # 0 for sum, nan for mean


def test_dim_empty_tuple_reduces_everything():
    check_against_torch(ops.sum, torch.sum, (2, 3), dim=())
    check_against_torch(ops.amax, torch.amax, (2, 3), dim=())


def test_reduction_is_one_scope_with_summation_iterators():
    (x,) = operands((2, 3, 4))
    s = ops.amax(x, dim=(0, 2))
    assert s.reduce is Reduce.MAX and [it.extent for it in s.summation] == [2, 4]
    assert [it.extent for it in s.traversal] == [3]


def test_reduction_of_a_shifted_scope():
    check_against_torch(ops.mean, torch.mean, (3, 4), wrap=True, dim=0)


SOFTMAX = [(ops.softmax, torch.softmax), (ops.log_softmax, torch.log_softmax)]


@pytest.mark.parametrize("ir_fn,torch_fn", SOFTMAX, ids=lambda f: f.__name__)
@pytest.mark.parametrize("shape,dim", [((2, 5), 1), ((2, 5), 0), ((3, 1, 4), -1), ((4,), 0),
                                       ((), 0), ((2, 0), 1), ((0, 3), 1), ((3, 1), 1)], ids=str)
def test_softmax_matches_torch(ir_fn, torch_fn, shape, dim):
    check_against_torch(ir_fn, torch_fn, shape, dim=dim, name=ir_fn.__name__)


@pytest.mark.parametrize("ir_fn,torch_fn", SOFTMAX, ids=lambda f: f.__name__)
def test_softmax_is_stable_for_large_inputs(ir_fn, torch_fn):
    big_ir = lambda x, dim: ir_fn(ops.mul(x, 1000.0), dim)  # noqa: E731
    big_torch = lambda x, dim: torch_fn(x * 1000.0, dim)  # noqa: E731
    check_against_torch(big_ir, big_torch, (3, 6), dim=1)


def test_softmax_nests_max_exp_and_sum_scopes():
    (x,) = operands((2, 5))
    s = ops.softmax(x, 1)
    names = {a.source.name for a in [s.body.lhs, s.body.rhs]}
    assert names == {"softmax_exp", "softmax_sum"}
    assert s.body.rhs.source.reduce is Reduce.SUM


def test_dim_out_of_range():
    (x,) = operands((2, 3))
    with pytest.raises(OpError, match=r"sum: dim out of range \(expected to be in range of "
                                      r"\[-2, 1\], but got 2\)"):
        ops.sum(x, 2)


def test_repeated_dim():
    (x,) = operands((2, 3))
    with pytest.raises(OpError, match=r"mean: dim \(1, -1\) names a dimension more than once"):
        ops.mean(x, (1, -1))


def test_amax_over_an_empty_dim_is_an_error():
    (x,) = operands((2, 0))
    with pytest.raises(OpError, match="amax: Expected reduction dim 1 to have non-zero size"):
        ops.amax(x, 1)


def test_softmax_needs_a_dim():
    (x,) = operands((2, 3))
    with pytest.raises(OpError, match="softmax: dim must be given"):
        ops.softmax(x, None)
