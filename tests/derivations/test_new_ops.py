"""The IR's newer operators (pow, ...) survive the e-graph: encode/decode round trips are
exact up to iterator names, and a default derivation keeps every candidate equal to the
original."""
from __future__ import annotations

import pytest

from ir import Tensor, ops

from derivations import Budget, derive
from derivation_helpers import all_verified, check_equiv, fingerprint, round_trip

X, Y = Tensor("x", (4, 5)), Tensor("y", (5, 3))

CASES = {
    "pow_tensor_tensor": lambda: ops.pow(ops.matmul(X, Y), ops.exp(ops.matmul(X, Y))),
    "pow_number_exponent": lambda: ops.sum(ops.pow(ops.matmul(X, Y), 2), dim=1),
    "pow_number_base": lambda: ops.pow(2.0, X),
    "rsqrt": lambda: ops.rsqrt(ops.sum(ops.pow(X, 2), dim=1)),
    "gelu": lambda: ops.gelu(ops.matmul(X, Y)),
    "gelu_tanh": lambda: ops.gelu(ops.matmul(X, Y), approximate="tanh"),
    "where": lambda: ops.where(ops.gt(ops.matmul(X, Y), 0), ops.matmul(X, Y), 0.5),
    "where_reduced": lambda: ops.sum(ops.where(ops.lt(X, 0.5), ops.exp(X), X), dim=0),
    "comparison": lambda: ops.eq(ops.matmul(X, Y), 0.0),
    "clamp_var": lambda: ops.clamp(ops.var(ops.matmul(X, Y), 1), max=1.0),
    "trace_diag": lambda: ops.add(ops.trace(ops.mm(X, ops.transpose(X, 0, 1))),
                                  ops.sum(ops.diagonal(ops.mm(Y, ops.transpose(Y, 0, 1))))),
    "select_full": lambda: ops.mul(ops.select(X, 1, 2), ops.full((4,), 2.0)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_round_trip_is_exact(case):
    e = CASES[case]()
    back, _ = round_trip(e)
    assert fingerprint(back) == fingerprint(e), f"--- original:\n{e}\n--- decoded:\n{back}"
    check_equiv(back, e)


@pytest.mark.parametrize("case", sorted(CASES))
def test_derived_candidates_equal_the_original(case):
    d = derive(CASES[case](), Budget(seconds=2))
    assert all_verified(d, k=3)
