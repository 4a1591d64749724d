"""The algebra research code contains (issue 9), each family in several spellings, built the
way core-ATen graphs spell them (``mm``/``bmm``, ``pow``, ``unsqueeze`` + ``cat``, ...): the
derivation finds the cheaper program from general rules, every candidate equals the original
on the reference interpreter, and the chosen program run through the torch lowering equals
eager torch on the original spelling.

Each case states its expected form as a bound on work (``max_points``: every scope of the
chosen program that iterates over more points is one of the ``library`` operators it must
instantiate), never as a program text: a spelling the rules were not written for is found
by the same rules.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest
import torch

import codegen
from ir import Tensor, analytic_cost, evaluate, iteration_points, ops
from ir.patterns import classify
from ir.nodes import sub_scopes

from derivations import Budget, derive

BUDGET = Budget(seconds=2.0)
SLACK = 2.0  # a loaded 2-core box
RESULTS: dict[str, tuple[float, int, int]] = {}  # case -> (seconds, e-nodes, e-classes)


@dataclass(frozen=True)
class Case:
    build: Callable        # ir.Tensors -> ir.Scope, as an ATen graph spells it
    eager: Callable        # torch tensors -> torch tensor, the research code
    shapes: tuple          # one shape per input, in order
    max_points: int        # scopes of the derived program iterating over more points are ...
    library: tuple = ()    # ... these library operators (ir.patterns.classify), all used


def _t(shapes):
    return [Tensor(f"x{k}", tuple(s), "float64") for k, s in enumerate(shapes)]


N, K = 48, 16
D, DK = 128, 64  # distances: large enough that the matmul form is the cheaper one
CASES = {
    # -- a product read only through its diagonal or trace: O(n^2), not O(n^3)
    "trace_mm": Case(lambda a, b: ops.trace(ops.mm(a, b)),
                     lambda a, b: torch.trace(a @ b), ((N, N), (N, N)), N * N),
    "diagonal_mm": Case(lambda a, b: ops.diagonal(ops.mm(a, b)),
                        lambda a, b: torch.diagonal(a @ b), ((N, N), (N, N)), N * N),
    "diag_mm_transposed": Case(lambda a, b: ops.diag(ops.mm(a, ops.transpose(b, 0, 1))),
                               lambda a, b: torch.diag(a @ b.T), ((N, K), (N, K)), N * K),
    "einsum_ii": Case(lambda a, b: ops.einsum("ii->i", ops.mm(a, b)),
                      lambda a, b: torch.einsum("ii->i", a @ b), ((N, K), (K, N)), N * K),
    "diagonal_sum_scaled": Case(lambda a, b: ops.mul(ops.sum(ops.diagonal(ops.mm(a, b))), 0.5),
                                lambda a, b: (a @ b).diagonal().sum() * 0.5,
                                ((N, N), (N, N)), N * N),
    "batched_diagonal": Case(lambda a, b: ops.diagonal(ops.bmm(a, b), 0, -2, -1),
                             lambda a, b: torch.diagonal(a @ b, dim1=-2, dim2=-1),
                             ((3, N, K), (3, K, N)), 3 * N * K),
    # -- squared differences over a broadcast axis: norms + one matmul (the square distributed)
    "sqdist_pow": Case(lambda x, y: ops.sum(ops.pow(ops.sub(ops.unsqueeze(x, 1),
                                                            ops.unsqueeze(y, 0)), 2), -1),
                       lambda x, y: ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1),
                       ((D, DK), (D, DK)), D * D, ("matmul",)),
    "sqdist_mul": Case(lambda x, y: (lambda d: ops.sum(ops.mul(d, d), 2))(
        ops.sub(ops.unsqueeze(x, 1), ops.unsqueeze(y, 0))),
        lambda x, y: (lambda d: (d * d).sum(2))(x.unsqueeze(1) - y.unsqueeze(0)),
        ((D, DK), (D, DK)), D * D, ("matmul",)),
    "sqdist_expand_T": Case(lambda x, y: ops.sum(ops.pow(ops.sub(
        ops.expand(ops.unsqueeze(x, 1), D, D, DK),
        ops.unsqueeze(y, 0)), 2.0), dim=(2,)),
        lambda x, y: (x.unsqueeze(1).expand(D, D, DK) - y.unsqueeze(0)).pow(2.0).sum(dim=(2,)),
        ((D, DK), (D, DK)), D * D, ("matmul",)),
    "sqdist_sqrt": Case(lambda x, y: ops.sqrt(ops.sum(ops.pow(ops.sub(ops.unsqueeze(x, 1),
                                                                     ops.unsqueeze(y, 0)), 2), -1)),
                        lambda x, y: ((x[:, None] - y[None]) ** 2).sum(-1).sqrt(),
                        ((D, DK), (D, DK)), D * D, ("matmul",)),
    # -- redundancy
    "double_transpose": Case(lambda a: ops.transpose(ops.transpose(a, 0, 1), 0, 1),
                             lambda a: a.T.T, ((N, K),), N * K),
}


def derived(name: str):
    case = CASES[name]
    tensors = _t(case.shapes)
    e = case.build(*tensors)
    start = time.perf_counter()
    d = derive(e, BUDGET)
    best = d.candidates(4, analytic_cost)[0]
    elapsed = time.perf_counter() - start
    RESULTS[name] = (elapsed, d.report.nodes, d.report.classes or 0)
    return case, tensors, e, d, best, elapsed


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_cheaper_program_is_derived_in_time(name):
    case, _, e, d, best, elapsed = derived(name)
    assert elapsed <= SLACK * BUDGET.seconds, (elapsed, d.report)
    assert d.rejected == [], d.rejected
    heavy = [s for s in sub_scopes(best.program) if iteration_points(s) > case.max_points]
    assert all(classify(s) in case.library for s in heavy), (best.program, best.rule_chain)
    assert set(case.library) <= set(best.operators), (best.operators, best.program)
    assert best.program is not e and best.verified is True


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_derived_program_equals_eager_torch(name):
    case, tensors, e, _, best, _ = derived(name)
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s) for s in case.shapes]
    want = case.eager(*(torch.from_numpy(a) for a in arrays))
    env = {t.name: a for t, a in zip(tensors, arrays)}
    np.testing.assert_allclose(evaluate(best.program, env), want.numpy(), rtol=1e-9, atol=1e-9)
    kernel = codegen.lower(best.program)
    got = kernel(*(torch.from_numpy(env[n]) for n in kernel.input_names))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-9, atol=1e-9)
