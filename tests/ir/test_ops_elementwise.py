import pytest
import torch

from ir import ops
from ir.ops import OpError

from op_helpers import check_against_torch, operands

BINARY = [
    (ops.add, torch.add), (ops.sub, torch.sub), (ops.mul, torch.mul), (ops.div, torch.div),
    (ops.maximum, torch.maximum), (ops.minimum, torch.minimum),
]
SHAPE_PAIRS = [
    ((2, 3), (2, 3)), ((2, 1, 4), (3, 1)), ((1,), (2, 3)), ((), (2, 3)), ((2, 3), ()),
    ((0, 3), (1, 3)), ((3, 1, 5), (1, 4, 1)), ((1, 1), (1, 1)),
]


@pytest.mark.parametrize("ir_fn,torch_fn", BINARY, ids=lambda f: getattr(f, "__name__", ""))
@pytest.mark.parametrize("shapes", SHAPE_PAIRS, ids=str)
def test_binary_broadcasting_matches_torch(ir_fn, torch_fn, shapes):
    check_against_torch(ir_fn, torch_fn, *shapes, positive=True, name=ir_fn.__name__)


@pytest.mark.parametrize("ir_fn,torch_fn", BINARY[:4], ids=lambda f: getattr(f, "__name__", ""))
def test_binary_with_python_scalar_on_either_side(ir_fn, torch_fn):
    check_against_torch(lambda x: ir_fn(x, 2.5), lambda x: torch_fn(x, 2.5), (2, 3))
    check_against_torch(lambda x: ir_fn(3, x), lambda x: torch_fn(torch.tensor(3.0,
                        dtype=torch.float64), x), (2, 3), positive=True)


@pytest.mark.parametrize("ir_fn,torch_fn", [(ops.add, torch.add), (ops.sub, torch.sub)])
def test_alpha_scales_other(ir_fn, torch_fn):
    check_against_torch(ir_fn, torch_fn, (2, 3), (3,), alpha=-0.5)


def test_operands_may_be_scopes_with_shifted_bounds():
    check_against_torch(ops.mul, torch.mul, (2, 1, 4), (3, 1), wrap=True)


UNARY = [
    (ops.relu, torch.relu, False), (ops.exp, torch.exp, False), (ops.log, torch.log, True),
    (ops.tanh, torch.tanh, False), (ops.sigmoid, torch.sigmoid, False),
    (ops.sqrt, torch.sqrt, True), (ops.abs, torch.abs, False), (ops.neg, torch.neg, False),
    (ops.reciprocal, torch.reciprocal, True),
]


@pytest.mark.parametrize("ir_fn,torch_fn,positive", UNARY, ids=lambda f: getattr(f, "__name__", ""))
@pytest.mark.parametrize("shape", [(3, 4), (), (0, 2), (1, 5, 1)], ids=str)
def test_unary_matches_torch(ir_fn, torch_fn, positive, shape):
    check_against_torch(ir_fn, torch_fn, shape, positive=positive, name=ir_fn.__name__)


def test_chained_elementwise_ops_nest_scopes():
    fn = lambda x, y: ops.sigmoid(ops.add(ops.mul(x, y), ops.relu(y)))  # noqa: E731
    ref = lambda x, y: torch.sigmoid(x * y + torch.relu(y))  # noqa: E731
    out = check_against_torch(fn, ref, (2, 3), (3,))
    assert out.body.x.source.name == "add"


def test_not_broadcastable_names_the_dim():
    x, y = operands((2, 3), (4, 3))
    with pytest.raises(OpError, match=r"add: shapes \(2, 3\) and \(4, 3\) are not "
                                      r"broadcastable: dim -2 has sizes 2, 4"):
        ops.add(x, y)


def test_two_python_numbers_are_rejected():
    with pytest.raises(OpError, match="mul: at least one operand"):
        ops.mul(2, 3)


def test_bad_operand_type():
    (x,) = operands((2,))
    with pytest.raises(OpError, match="sub: other must be an ir.Tensor, ir.Scope or a Python "
                                      "number, got str"):
        ops.sub(x, "y")
    with pytest.raises(OpError, match="exp: input must be an ir.Tensor or ir.Scope, got list"):
        ops.exp([1.0])


def test_rounding_mode_is_not_supported():
    x, y = operands((2,), (2,))
    with pytest.raises(OpError, match="div: rounding_mode='floor' is not supported"):
        ops.div(x, y, rounding_mode="floor")


def test_op_error_is_a_value_error():
    assert issubclass(OpError, ValueError)
