import pytest
import torch.nn.functional as F

from ir import ops
from ir.ops import OpError

from op_helpers import check_against_torch, operands

AVG_POOL2D = [  # (input, kwargs)
    ((1, 3, 8, 8), dict(kernel_size=2)),
    ((2, 2, 7, 9), dict(kernel_size=3, stride=2, padding=1)),  # padding counted, torch's default
    ((1, 2, 6, 5), dict(kernel_size=(2, 3), stride=(1, 2))),
    ((2, 4, 9, 9), dict(kernel_size=3, stride=1, padding=1)),  # Inception's pool branch
    ((1, 2, 8, 8), dict(kernel_size=2, count_include_pad=False)),  # no padding to leave out
    ((3, 5, 5), dict(kernel_size=2, stride=1)),  # unbatched
]


@pytest.mark.parametrize("x,kw", AVG_POOL2D, ids=str)
def test_avg_pool2d_matches_torch(x, kw):
    check_against_torch(ops.avg_pool2d, F.avg_pool2d, x, name="avg_pool2d", **kw)


def test_avg_pool2d_is_one_window_sum():
    [x] = operands((1, 3, 8, 8))
    s = ops.avg_pool2d(x, 2)
    assert [it.name for it in s.summation] == ["r", "s"] and s.shape == (1, 3, 4, 4)


@pytest.mark.parametrize("kw", [
    dict(kernel_size=2, divisor_override=3),
    dict(kernel_size=3, padding=1, count_include_pad=False),
    dict(kernel_size=2, ceil_mode=True),  # 7 rows: a last window of one row
    dict(kernel_size=1, ceil_mode=True),  # whole windows here, not at every size
    dict(kernel_size=3, padding=2),
], ids=["divisor", "padding_not_counted", "partial_window", "ceil_mode", "padding_over_half"])
def test_avg_pool2d_refuses_windows_whose_divisor_is_not_their_size(kw):
    [x] = operands((1, 2, 7, 7))
    with pytest.raises(OpError, match="avg_pool2d"):
        ops.avg_pool2d(x, **kw)
