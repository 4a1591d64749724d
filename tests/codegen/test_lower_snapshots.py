"""The generated source of a few small kernels, compared with stored snapshots.

Regenerate after an intended change with ``OLLIE_UPDATE_SNAPSHOTS=1 pytest tests/codegen``
and review the diff of ``tests/codegen/snapshots/``.
"""

import pytest

import codegen
from lowering_helpers import check_snapshot
from ir import Tensor, ops


KERNELS = {
    "matmul": lambda: ops.matmul(Tensor("a", (4, 3)), Tensor("b", (3, 5))),
    "softmax": lambda: ops.softmax(Tensor("x", (2, 8)), dim=-1),
    "conv2d_bias_relu": lambda: ops.relu(ops.conv2d(Tensor("x", (1, 3, 6, 6)),
                                                    Tensor("w", (4, 3, 3, 3)),
                                                    Tensor("b", (4,)), padding=1)),
    "g2bmm_dilated": lambda: ops.g2bmm(Tensor("q", (2, 16, 4)), Tensor("k", (2, 16, 4)), 2, 3),
    "gather_reshape": lambda: ops.reshape(ops.conv_transpose2d(
        Tensor("x", (1, 2, 3, 3)), Tensor("w", (2, 2, 2, 2)), stride=2), 2, 36),
}


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_generated_source_matches_snapshot(name):
    source = codegen.lower(KERNELS[name]()).source
    check_snapshot(name, source)
