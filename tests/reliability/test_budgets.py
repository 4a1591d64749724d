"""Budgets hold: a derivation ends within its time budget (plus 0.5 s) in under 1 GB, for
inputs up to 1,000 operations; deeper inputs are refused with one clear message; index-range
analysis never allocates per index value; budgets reject NaN, infinity and non-positive
values. Derivations that could run away on a regression run in a child under a watchdog."""
import json
import math

import pytest

from reliability_helpers import run_python

GOAL_SLACK_S = 0.5
MAX_MB = 1024

DERIVE = """
import json, resource, sys, time
import ir, derivations
from ir.nodes import Binary, BinOp, Const, Unary, UnOp

kind, n, budget = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
STEPS = ["relu({x})", "{x} * 1.5", "exp({x})", "{x} + 1.0", "tanh({x})", "{x} - 0.5"]
if kind == "statements" and n <= 80:  # T0 = f(A); T1 = g(T0); ...: a chain of n scopes
    lines, prev = [], "A[i,j]"
    for k in range(n):
        lines.append(f"T{k}[i,j] = " + STEPS[k % len(STEPS)].format(x=prev))
        prev = f"T{k}[i,j]"
    expr = ir.parse("\\n".join(lines), tensors={"A": (64, 64)})
elif kind == "statements":  # longer than the parser takes: built node by node
    first = ir.parse("T[i,j] = A[i,j]", tensors={"A": (64, 64)})
    expr, ij = first, first.body.indices
    for k in range(n):
        read = ir.Access(expr, ij)
        x = Unary(UnOp.RELU, read) if k % 2 else Binary(BinOp.MUL, read, Const(1.5))
        expr = ir.Scope(first.traversal, (), x, name=f"T{k}")
elif kind == "operations":  # one scope whose body is n operations deep
    body = ir.parse("T[i,j] = A[i,j]", tensors={"A": (64, 64)})
    x = body.body
    for k in range(n):
        x = Unary(UnOp.RELU, x) if k % 2 else Binary(BinOp.MUL, x, Const(1.5))
    expr = ir.Scope(body.traversal, body.summation, x, name="T")
else:                       # a matmul over dimensions of a billion
    big = 10 ** 9
    expr = ir.parse("T[i,j] = sum[k] A[i,k] * B[k,j]", tensors={"A": (big, big), "B": (big, big)})
row = {}
derivations.derive  # its modules load before the clock starts: once a process, not a budget's
t0 = time.perf_counter()
try:
    d = derivations.derive(expr, derivations.Budget(seconds=budget, nodes=20000))
    row["derive_s"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    cands = d.candidates(4, ir.analysis.analytic_cost)
    row["candidates_s"] = time.perf_counter() - t1
    row["stop"] = d.report.stop
    row["candidates"] = len(cands)
except derivations.InputTooDeep as e:
    row["refused"] = str(e)
    row["derive_s"] = time.perf_counter() - t0
# This process's own peak: VmHWM belongs to its address space (getrusage's maxrss would also
# carry the parent's peak across fork and exec: a big pytest made every child "1.15 GB").
with open("/proc/self/status") as status:
    hwm = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
row["peak_mb"] = max(hwm, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
print(json.dumps(row))
"""


def derive_in_child(kind: str, n: int, budget: float, timeout: float = 60) -> dict:
    r = run_python(DERIVE, [kind, str(n), str(budget)], timeout=timeout, max_mb=MAX_MB * 1.5)
    assert not r.killed, f"{kind} {n}: {r.killed} ({r.peak_mb:.0f} MB)"
    assert r.returncode == 0, f"{kind} {n}: rc {r.returncode}: {r.stderr[-1500:]}"
    row = json.loads(r.stdout.strip().splitlines()[-1])
    row["child_peak_mb"] = r.peak_mb
    return row


@pytest.mark.parametrize("kind, n", [("statements", 70), ("statements", 80),
                                     ("operations", 250)])
def test_a_long_elementwise_chain_derives_within_budget_and_memory(kind, n):
    budget = 2.0
    row = derive_in_child(kind, n, budget)
    assert "refused" not in row, row
    assert row["derive_s"] <= budget + GOAL_SLACK_S, row
    assert row["peak_mb"] <= MAX_MB, row
    assert row["candidates"] >= 1


@pytest.mark.parametrize("kind, n", [("statements", 100), ("statements", 300),
                                     ("statements", 1000), ("operations", 1000)])
def test_deeper_inputs_are_refused_with_one_clear_message(kind, n):
    row = derive_in_child(kind, n, 2.0)
    assert "refused" in row, row
    message = row["refused"]
    assert "\n" not in message and "levels deep" in message and "256" in message
    assert row["derive_s"] <= 2.0 + GOAL_SLACK_S and row["peak_mb"] <= MAX_MB


def test_a_billion_wide_matmul_derives_in_bounded_memory():
    row = derive_in_child("huge", 0, 2.0)
    assert row["derive_s"] <= 2.0 + GOAL_SLACK_S, row
    assert row["peak_mb"] <= MAX_MB, row


LIVE_RANGE = """
import json
import ir
from ir.nodes import Iter
from derivations.index_rules import live_range
A = ir.Tensor("A", (100,))
body = ir.parse("T[i] = sum[j] A[i+j] where i in 0:1, j in 0:3", tensors={"A": (100,)}).body
print(json.dumps(live_range(body, Iter("i", -5, 10 ** 12), {"i": (-5, 10 ** 12), "j": (0, 3)})))
"""


def test_index_range_analysis_allocates_nothing_per_index_value():
    r = run_python(LIVE_RANGE, timeout=30, max_mb=500)
    assert r.returncode == 0 and not r.killed, r.killed or r.stderr[-800:]
    assert json.loads(r.stdout) == [-2, 100]   # i + j in 0:100 for some j in 0:3


@pytest.mark.parametrize("seconds", [math.nan, math.inf, 0.0, -1.0])
def test_a_budget_rejects_nan_infinity_and_non_positive_seconds(seconds):
    from derivations import Budget
    with pytest.raises(ValueError, match="finite number > 0"):
        Budget(seconds=seconds)


def test_index_rules_see_the_deadline():
    """A rule can ask how much time is left, and a rule that loops stops at the deadline."""
    import time

    import ir
    from derivations import IndexRule, derive
    from derivations import index_rules

    seen: list[float] = []

    def patient(scope):
        seen.append(index_rules.time_left())
        while True:  # a rule with much work to do: it checks the time as it goes
            index_rules.check_time()
            time.sleep(0.01)

    expr = ir.parse("T[i] = relu(A[i])", tensors={"A": (8,)})
    t0 = time.perf_counter()
    d = derive(expr, index_rules=(IndexRule("patient", "checks the time", patient),),
               budget=__import__("derivations").Budget(seconds=0.5))
    assert time.perf_counter() - t0 <= 0.5 + GOAL_SLACK_S
    assert seen and all(0 < s <= 0.5 for s in seen)
    assert d.report.stop == "seconds"
