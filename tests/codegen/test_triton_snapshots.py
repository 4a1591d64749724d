"""The generated Triton source of a few kernels, compared with stored snapshots.

Lowering only writes source (nothing runs), under ``TRITON_INTERPRET=1`` so that it needs no
GPU. Regenerate after an intended change with ``OLLIE_UPDATE_SNAPSHOTS=1 pytest
tests/codegen/test_triton_snapshots.py`` and review the diff of
``tests/codegen/snapshots/triton_*``.
"""

import pytest

import codegen
from lowering_helpers import check_snapshot
from ir import Scope, Tensor, accesses, ops



def _upsample_gather() -> Scope:
    up = ops.conv_transpose2d(Tensor("x", (1, 2, 3, 3)), Tensor("w", (2, 2, 2, 2)), stride=2)
    return next(a.source for a in accesses(up.body) if isinstance(a.source, Scope))


KERNELS = {
    "triton_gather": _upsample_gather,
    "triton_softmax": lambda: ops.softmax(Tensor("x", (2, 8)), dim=-1),
    "triton_matmul": lambda: ops.matmul(Tensor("a", (4, 3)), Tensor("b", (3, 5))),
    "triton_conv_bias_relu": lambda: ops.relu(ops.conv2d(
        Tensor("x", (1, 3, 6, 6)), Tensor("w", (4, 3, 3, 3)), Tensor("b", (4,)), padding=1)),
    "triton_g2bmm": lambda: ops.g2bmm(Tensor("q", (2, 20, 8)), Tensor("k", (2, 20, 8)), 3, 2),
}


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_generated_triton_source_matches_snapshot(name, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    source = codegen.lower(KERNELS[name](), backend="triton").source
    check_snapshot(name, source)


def test_generated_source_is_valid_python_with_short_lines(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    for make in KERNELS.values():
        source = codegen.lower(make(), backend="triton").source
        compile(source, "<generated>", "exec")
        code = [ln for ln in source.splitlines() if not ln.lstrip().startswith("#")]
        assert max(map(len, code)) <= 110, source
