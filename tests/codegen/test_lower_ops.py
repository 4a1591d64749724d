"""Operator-library scopes lowered to torch agree with the reference interpreter (fp64)."""
import pytest

from ir import Tensor
from ir import ops

from lowering_helpers import check_lowering


def T(name, *shape):
    return Tensor(name, shape, "float64")


x2, y2 = T("x", 4, 6), T("y", 6, 5)
x3, y3 = T("x", 3, 4, 6), T("y", 3, 6, 5)
img, w3 = T("img", 2, 4, 7, 6), T("w", 6, 4, 3, 3)

CASES = {
    # linear algebra
    "matmul": lambda: ops.matmul(x2, y2),
    "matmul_vec": lambda: ops.matmul(x2, T("v", 6)),
    "matmul_vec_left": lambda: ops.matmul(T("v", 4), x2),
    "matmul_broadcast_batch": lambda: ops.matmul(T("a", 2, 1, 4, 6), T("b", 3, 6, 5)),
    "bmm": lambda: ops.bmm(x3, y3),
    "dot": lambda: ops.dot(T("u", 6), T("v", 6)),
    "linear_bias": lambda: ops.linear(x2, T("w", 3, 6), T("bias", 3)),
    "einsum_bilinear": lambda: ops.einsum("bi,ij,bj->b", T("a", 3, 4), T("m", 4, 5),
                                          T("c", 3, 5)),
    "einsum_trace": lambda: ops.einsum("ii->", T("a", 5, 5)),
    "einsum_outer": lambda: ops.einsum("i,j->ij", T("a", 3), T("b", 4)),
    "einsum_batch_t": lambda: ops.einsum("bij,bkj->bki", x3, T("z", 3, 2, 6)),
    # convolutions and banded products
    "conv1d": lambda: ops.conv1d(T("s", 2, 3, 9), T("k", 4, 3, 3), padding=1),
    "conv2d": lambda: ops.conv2d(img, w3),
    "conv2d_pad_stride": lambda: ops.conv2d(img, w3, stride=2, padding=1),
    "conv2d_dilation": lambda: ops.conv2d(img, w3, padding=2, dilation=2),
    "conv2d_same_bias": lambda: ops.conv2d(img, w3, T("b", 6), padding="same"),
    "conv2d_groups": lambda: ops.conv2d(img, T("w", 6, 2, 3, 3), padding=1, groups=2),
    "conv2d_depthwise": lambda: ops.conv2d(img, T("w", 4, 1, 3, 3), groups=4),
    "conv_transpose2d": lambda: ops.conv_transpose2d(img, T("w", 4, 3, 3, 3)),
    "conv_transpose2d_stride": lambda: ops.conv_transpose2d(
        img, T("w", 4, 3, 3, 2), stride=2, padding=1, output_padding=1),
    "conv_transpose2d_groups": lambda: ops.conv_transpose2d(
        img, T("w", 4, 2, 3, 3), stride=(2, 1), groups=2, dilation=(1, 2)),
    "g2bmm": lambda: ops.g2bmm(T("q", 2, 8, 4), T("k", 2, 8, 4), w=2),
    "g2bmm_dilated": lambda: ops.g2bmm(T("q", 2, 9, 4), T("k", 2, 9, 4), w=1, d=3),
    "gbmm": lambda: ops.gbmm(T("a", 2, 8, 5), T("v", 2, 8, 3), w=2, d=2),
    # elementwise with broadcasting, unary functions
    "add_broadcast": lambda: ops.add(T("a", 4, 1, 6), T("b", 5, 1), alpha=2),
    "sub_scalar": lambda: ops.sub(3.0, x2),
    "div": lambda: ops.div(x2, T("b", 6)),
    "maximum": lambda: ops.maximum(x2, T("b", 4, 1)),
    "minimum_scalar": lambda: ops.minimum(x2, 0.25),
    "relu_exp_tanh": lambda: ops.tanh(ops.exp(ops.relu(x2))),
    "sigmoid_abs_sqrt": lambda: ops.sqrt(ops.abs(ops.sigmoid(x2))),
    "log_neg_recip": lambda: ops.reciprocal(ops.neg(ops.log(ops.abs(x2)))),
    # reductions
    "sum_all": lambda: ops.sum(x3),
    "sum_dim_keepdim": lambda: ops.sum(x3, dim=1, keepdim=True),
    "mean": lambda: ops.mean(x3, dim=(0, 2)),
    "amax": lambda: ops.amax(x3, dim=2),
    "amin_keepdim": lambda: ops.amin(x3, dim=0, keepdim=True),
    "softmax": lambda: ops.softmax(x3, dim=1),
    "log_softmax": lambda: ops.log_softmax(x2, dim=-1),
    # shapes
    "transpose": lambda: ops.transpose(x3, 0, 2),
    "permute_matmul": lambda: ops.matmul(ops.permute(x3, 0, 2, 1), x3),
    "reshape_merge": lambda: ops.reshape(x3, 12, 6),
    "reshape_split": lambda: ops.reshape(x2, 2, 2, 3, 2),
    "reshape_regroup": lambda: ops.reshape(x3, 6, 12),
    "flatten_of_transpose": lambda: ops.flatten(ops.transpose(x3, 1, 2)),
    "squeeze_unsqueeze": lambda: ops.squeeze(ops.unsqueeze(x2, 1)),
    "slice_step": lambda: ops.slice(x3, 2, 1, 6, 2),
    "unfold": lambda: ops.unfold(x2, 1, 3, 2),
    "pad": lambda: ops.pad(x2, (1, 2, 0, 3)),
    "cat": lambda: ops.cat([x2, T("z", 4, 2)], dim=1),
    "stack": lambda: ops.stack([x2, T("z", 4, 6)], dim=0),
    "expand": lambda: ops.expand(T("a", 4, 1), 3, 4, 5),
    # compositions
    "attention": lambda: ops.matmul(ops.softmax(ops.matmul(x3, ops.transpose(x3, 1, 2)), -1),
                                    x3),
    "conv_relu_pool_sum": lambda: ops.sum(ops.relu(ops.conv2d(img, w3, padding=1)),
                                          dim=(2, 3)),
    "mlp": lambda: ops.linear(ops.relu(ops.linear(x2, T("w1", 8, 6), T("b1", 8))),
                              T("w2", 3, 8)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_op_matches_interpreter(case):
    check_lowering(CASES[case]())


def test_empty_dims():
    check_lowering(ops.matmul(T("a", 0, 3), T("b", 3, 4)))
    check_lowering(ops.matmul(T("a", 2, 0), T("b", 0, 4)))  # empty sum: zeros
    check_lowering(ops.amax(T("a", 3, 0), dim=0))
    check_lowering(ops.relu(T("a", 0)))
