import pytest
import sympy
import torch
import torch.nn.functional as F

from ir import ops
from ir.ops import OpError

from op_helpers import check_against_torch, operands

pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")

CONV2D = [  # (input, weight, kwargs)
    ((1, 3, 7, 7), (4, 3, 3, 3), {}),
    ((2, 3, 7, 6), (4, 3, 3, 3), dict(stride=2, padding=1)),
    ((2, 2, 9, 11), (3, 2, 2, 2), dict(stride=4)),  # stride larger than the kernel
    ((2, 4, 6, 5), (6, 2, 3, 3), dict(groups=2, padding=1)),
    ((1, 4, 5, 5), (4, 1, 3, 3), dict(groups=4)),  # depthwise
    ((1, 2, 9, 9), (3, 2, 3, 3), dict(dilation=2, padding=2)),
    ((1, 2, 6, 7), (3, 2, 2, 4), dict(padding="same", dilation=(1, 2))),  # asymmetric same
    ((1, 2, 5, 5), (3, 2, 3, 3), dict(padding="same")),
    ((1, 2, 5, 6), (3, 2, 2, 3), dict(padding="valid")),
    ((1, 2, 7, 8), (2, 2, 3, 2), dict(stride=(1, 3), padding=(2, 0), dilation=(2, 1))),
    ((0, 3, 5, 5), (2, 3, 3, 3), dict(padding=1)),  # empty batch
    ((2, 3, 4, 4), (5, 3, 1, 1), {}),  # 1x1
    ((1, 1, 1, 1), (1, 1, 1, 1), {}),
    ((1, 6, 5, 4), (6, 2, 3, 2), dict(groups=3, stride=(2, 1), padding=(1, 2), dilation=2)),
]


@pytest.mark.parametrize("x,w,kw", CONV2D, ids=str)
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
def test_conv2d_matches_torch(x, w, kw, bias):
    shapes = (x, w) + (((w[0],),) if bias else ())
    check_against_torch(ops.conv2d, F.conv2d, *shapes, name="conv2d", **kw)


def test_conv2d_unbatched_and_shifted_operands():
    check_against_torch(ops.conv2d, F.conv2d, (3, 7, 7), (4, 3, 3, 3), padding=1)
    check_against_torch(ops.conv2d, F.conv2d, (1, 4, 6, 5), (6, 2, 3, 3), (6,), wrap=True,
                        groups=2, padding=1, stride=2)


def test_conv2d_is_one_scope_and_groups_1_has_no_floor_div():
    x, w = operands((1, 3, 7, 7), (4, 3, 3, 3))
    s = ops.conv2d(x, w, padding=1)
    assert [it.name for it in s.traversal] == ["n", "f", "h", "w"]
    assert [it.name for it in s.summation] == ["c", "r", "s"]
    assert not any(i.has(sympy.floor) for i in s.body.lhs.indices)


CONV1D = [
    ((2, 3, 9), (4, 3, 3), {}), ((1, 4, 10), (6, 2, 3), dict(groups=2, stride=3, padding=2)),
    ((1, 2, 8), (3, 2, 4), dict(padding="same", dilation=3)), ((8, 5), (4, 2, 3),
                                                               dict(groups=4, padding=1)),
]


@pytest.mark.parametrize("x,w,kw", CONV1D, ids=str)
def test_conv1d_matches_torch(x, w, kw):
    check_against_torch(ops.conv1d, F.conv1d, x, w, name="conv1d", **kw)
    check_against_torch(ops.conv1d, F.conv1d, x, w, (w[0],), **kw)


CONV_T2D = [  # (input, weight (C, F/groups, R, S), kwargs)
    ((1, 2, 4, 4), (2, 3, 3, 3), {}),
    ((2, 2, 3, 4), (2, 3, 3, 3), dict(stride=2)),
    ((1, 2, 3, 3), (2, 2, 2, 2), dict(stride=3, padding=1, output_padding=2)),  # s > k
    ((1, 2, 4, 3), (2, 2, 3, 3), dict(dilation=2, output_padding=1)),  # op < dilation
    ((2, 4, 3, 3), (4, 3, 3, 3), dict(groups=2, stride=2, padding=1)),
    ((1, 2, 3, 4), (2, 1, 3, 2), dict(stride=(2, 3), padding=(0, 1), output_padding=(1, 0))),
    ((1, 6, 3, 2), (6, 1, 2, 3), dict(groups=3, stride=2, dilation=(1, 2), padding=(1, 2),
                                      output_padding=1)),
    ((1, 1, 1, 1), (1, 2, 3, 3), dict(stride=2)),
    ((0, 2, 3, 3), (2, 2, 2, 2), dict(stride=2)),
    ((1, 2, 5, 5), (2, 2, 3, 3), dict(padding=3)),  # padding beyond the dilated kernel
]


@pytest.mark.parametrize("x,w,kw", CONV_T2D, ids=str)
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
def test_conv_transpose2d_matches_torch(x, w, kw, bias):
    groups = kw.get("groups", 1)
    shapes = (x, w) + (((w[1] * groups,),) if bias else ())
    check_against_torch(ops.conv_transpose2d, F.conv_transpose2d, *shapes,
                        name="conv_transpose2d", **kw)


def test_conv_transpose2d_unbatched_and_shifted_operands():
    check_against_torch(ops.conv_transpose2d, F.conv_transpose2d, (2, 3, 4), (2, 3, 3, 3),
                        stride=2, output_padding=1)
    check_against_torch(ops.conv_transpose2d, F.conv_transpose2d, (1, 4, 3, 3), (4, 1, 2, 3),
                        (2,), wrap=True, groups=2, stride=(2, 3), padding=1)


def test_conv_transpose2d_is_an_upsample_then_a_correlation():
    x, w = operands((1, 2, 3, 4), (2, 3, 3, 3))
    s = ops.conv_transpose2d(x, w, stride=2)
    upsample = s.body.lhs.source
    assert upsample.name == "conv_transpose2d_upsample" and upsample.shape == (1, 2, 6, 8)
    assert not upsample.summation and [it.name for it in s.summation] == ["c", "r", "s"]
    assert ops.conv_transpose2d(x, w).body.lhs.source is x  # stride 1: no upsample


@pytest.mark.parametrize("x,w,kw", [
    ((2, 3, 5), (3, 2, 3), dict(stride=2, output_padding=1)),
    ((1, 4, 4), (4, 1, 2), dict(groups=2, stride=3, padding=1, dilation=2)),
], ids=str)
def test_conv_transpose1d_matches_torch(x, w, kw):
    check_against_torch(ops.conv_transpose1d, F.conv_transpose1d, x, w,
                        name="conv_transpose1d", **kw)


def test_relu_of_conv_composes():
    check_against_torch(lambda x, w: ops.relu(ops.conv2d(ops.relu(x), w, padding="same")),
                        lambda x, w: torch.relu(F.conv2d(torch.relu(x), w, padding="same")),
                        (1, 2, 5, 5), (3, 2, 3, 3))


@pytest.mark.parametrize("call,shapes,message", [
    (ops.conv2d, [(3, 7), (4, 3, 3, 3)], r"conv2d: expected input to be 3-D or 4-D, got 2-D"),
    (ops.conv2d, [(1, 3, 7, 7), (4, 3, 3)], r"conv2d: expected weight to be 4-D, got 3-D"),
    (ops.conv2d, [(1, 2, 7, 7), (4, 3, 3, 3)], r"conv2d: groups=1, weight of shape "
                                               r"\(4, 3, 3, 3\) expects 3 input channels, but "
                                               r"the input \(1, 2, 7, 7\) has 2 channels"),
    (ops.conv2d, [(1, 4, 7, 7), (3, 2, 3, 3)], r"out_channels \(weight dim 0 = 3\) must be "
                                               r"divisible by groups=2"),
    (ops.conv2d, [(1, 3, 2, 2), (4, 3, 3, 3)], r"kernel size \(3, 3\) .* can't be greater than "
                                               r"the padded input size"),
    (ops.conv2d, [(1, 3, 7, 7), (4, 3, 3, 3), (3,)], r"conv2d: bias must have shape \(4,\)"),
    (ops.conv1d, [(1, 3, 7), (4, 3, 3)], "conv1d: expected input to be 2-D or 3-D, got 3-D"),
])
def test_bad_shapes(call, shapes, message):
    xs = operands(*shapes)
    if call is ops.conv1d:  # a 4-D input for conv1d
        xs[0] = operands((1, 3, 7, 7))[0]
        message = "conv1d: expected input to be 2-D or 3-D, got 4-D"
    kw = dict(groups=2) if "groups=2" in message else {}
    with pytest.raises(OpError, match=message):
        call(*xs, **kw)


@pytest.mark.parametrize("kw,message", [
    (dict(stride=0), r"conv2d: stride must be >= 1, got 0"),
    (dict(stride=(1, 2, 3)), r"stride must be an int or a tuple of 2 ints"),
    (dict(dilation=0), r"dilation must be >= 1"),
    (dict(padding=-1), r"padding must be >= 0"),
    (dict(padding="full"), r"padding must be 'same', 'valid', an int or a tuple"),
    (dict(padding="same", stride=2), r"padding='same' is not supported for strided"),
    (dict(groups=0), r"groups must be a positive int, got 0"),
])
def test_bad_conv2d_arguments(kw, message):
    x, w = operands((1, 4, 7, 7), (4, 4, 3, 3))
    with pytest.raises(OpError, match=message):
        ops.conv2d(x, w, **kw)


@pytest.mark.parametrize("shapes,kw,message", [
    ([(1, 2, 3, 3), (2, 2, 3, 3)], dict(stride=2, output_padding=2),
     r"output padding must be smaller than either stride or dilation"),
    ([(1, 3, 3, 3), (2, 2, 3, 3)], {}, r"weight of shape \(2, 2, 3, 3\) expects 2 input "
                                       r"channels \(weight dim 0\), but the input "
                                       r"\(1, 3, 3, 3\) has 3 channels"),
    ([(1, 3, 3, 3), (3, 2, 3, 3)], dict(groups=2), r"input channels \(3\) must be divisible "
                                                   r"by groups=2"),
    ([(1, 2, 2, 2), (2, 2, 2, 2)], dict(padding=2), r"the output size \(-1, -1\) is not "
                                                    r"positive"),
    ([(1, 2, 3, 3), (2, 2, 3, 3), (4,)], {}, r"bias must have shape \(2,\)"),
])
def test_bad_conv_transpose2d_arguments(shapes, kw, message):
    with pytest.raises(OpError, match="conv_transpose2d: " + message):
        ops.conv_transpose2d(*operands(*shapes), **kw)
