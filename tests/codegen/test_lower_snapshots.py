"""The generated source of a few small kernels, compared with stored snapshots.

Regenerate after an intended change with ``OLLIE_UPDATE_SNAPSHOTS=1 pytest tests/codegen``
and review the diff of ``tests/codegen/snapshots/``.
"""
import os
import pathlib

import pytest

import codegen
from ir import Tensor, ops

SNAPSHOTS = pathlib.Path(__file__).parent / "snapshots"
UPDATE = os.environ.get("OLLIE_UPDATE_SNAPSHOTS") == "1"

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
    path = SNAPSHOTS / f"{name}.py.txt"
    if UPDATE or not path.exists():
        path.write_text(source)
        if not UPDATE:
            pytest.skip(f"wrote a new snapshot {path.name}; review it and commit")
    assert source == path.read_text(), (
        f"generated source of {name!r} changed; if intended, regenerate with "
        f"OLLIE_UPDATE_SNAPSHOTS=1 and review the diff\n{source}")
