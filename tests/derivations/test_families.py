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
from ir import Tensor, analytic_cost, evaluate, flops, iteration_points, ops
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
    total: int | None = None  # iteration points of all its scopes together, at most
    most_flops: int | None = None  # flops (distinct operators per point) together, at most


def _kron(a, b):
    """torch.kron as its decomposition spells it: an outer product reshaped."""
    (m, n), (p, q) = a.shape, b.shape
    return ops.reshape(ops.mul(ops.reshape(a, m, 1, n, 1), ops.reshape(b, 1, p, 1, q)),
                       m * p, n * q)


def _row_mm(a, w, i):
    """``a[i] @ w`` as core ATen spells it: the row unsqueezed, an ``mm``, squeezed back."""
    return ops.squeeze(ops.mm(ops.unsqueeze(ops.select(a, 0, i), 0), w), 0)


def _t(shapes):
    return [Tensor(f"x{k}", tuple(s), "float64") for k, s in enumerate(shapes)]


N, K = 48, 16
D, DK = 128, 64  # distances: large enough that the matmul form is the cheaper one
V, M = 1024, 192  # vectors, and matrices where a library matmul beats a fused loop nest
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
    # -- outer and Kronecker products consumed by a matrix product: small matmuls, never
    #    the product materialised
    "outer_mv": Case(lambda u, v, x: ops.mv(ops.mul(ops.unsqueeze(u, 1), ops.unsqueeze(v, 0)), x),
                     lambda u, v, x: torch.outer(u, v) @ x, ((V,), (V,), (V,)), V),
    "outer_einsum_mm": Case(lambda u, v, a: ops.mm(ops.einsum("i,j->ij", u, v), a),
                            lambda u, v, a: torch.einsum("i,j->ij", u, v) @ a,
                            ((V,), (V,), (V, K)), V * K),
    "kron_mv": Case(lambda a, b, x: ops.mv(_kron(a, b), x),
                    lambda a, b, x: torch.kron(a, b) @ x, ((32, 24), (16, 12), (288,)), 10_000),
    "kron_mm": Case(lambda a, b, x: ops.mm(_kron(a, b), x),
                    lambda a, b, x: torch.kron(a, b) @ x, ((32, 24), (16, 12), (288, 4)),
                    40_000),
    # -- bilinear and quadratic forms in their cheapest order: never a matrix-matrix product
    "bilinear_chain": Case(lambda x, a, b, y: ops.matmul(ops.matmul(ops.matmul(x, a), b), y),
                           lambda x, a, b, y: x @ a @ b @ y, ((M,), (M, M), (M, M), (M,)), M * M),
    "bilinear_einsum": Case(lambda x, a, b, y: ops.einsum("i,ij,jk,k->", x, a, b, y),
                            lambda x, a, b, y: torch.einsum("i,ij,jk,k->", x, a, b, y),
                            ((M,), (M, M), (M, M), (M,)), M * M),
    "quadratic_form_rows": Case(lambda x, a: ops.sum(ops.mul(ops.mm(x, a), x), -1),
                                lambda x, a: ((x @ a) * x).sum(-1), ((K, M), (M, M)), K * M,
                                ("matmul",)),
    # -- a squared product expanded into Gram matrices: sum[k,l] (AᵀA)[k,l] (BBᵀ)[k,l], or
    #    the large product is never formed
    "product_sqnorm_pow": Case(lambda a, b: ops.sum(ops.pow(ops.mm(a, b), 2)),
                               lambda a, b: (a @ b).pow(2).sum(), ((D, K), (K, D)), D * K * K),
    "product_sqnorm_mul": Case(lambda a, b: (lambda p: ops.sum(ops.mul(p, p)))(ops.mm(a, b)),
                               lambda a, b: (lambda p: (p * p).sum())(a @ b),
                               ((D, K), (K, D)), D * K * K),
    "product_row_sqnorms": Case(lambda a, b: ops.sum(ops.pow(ops.mm(a, b), 2), 1),
                                lambda a, b: ((a @ b) ** 2).sum(1), ((D, K), (K, D)), D * K * K),
    "products_sharing_a_factor": Case(
        lambda a, b, c: ops.sum(ops.mul(ops.mm(a, b), ops.mm(a, c))),
        lambda a, b, c: ((a @ b) * (a @ c)).sum(), ((D, K), (K, D), (K, D)), D * K * K),
    # -- strength reduction
    "common_factor": Case(lambda a, b, c: ops.add(ops.mm(a, b), ops.mm(c, b)),
                          lambda a, b, c: a @ b + c @ b, ((M, M), (M, M), (M, M)), M * M,
                          ("matmul",), M ** 3 + 2 * M * M),
    "scalars_out_of_a_product": Case(lambda a, b: ops.mm(ops.mul(a, 2.0), ops.mul(b, 3.0)),
                                     lambda a, b: (a * 2) @ (b * 3), ((M, M), (M, M)), M * M,
                                     ("matmul",), M ** 3 + M * M),
    "like_terms": Case(lambda u, v: ops.add(ops.add(ops.mul(u, v), ops.mul(v, u)),
                                            ops.mul(u, v)),
                       lambda u, v: u * v + v * u + u * v, ((N,), (N,)), N, (), N),
    "repeated_product_in_a_function": Case(
        lambda u: ops.exp(ops.add(ops.mul(ops.mul(ops.mul(u, u), u), u), 1.0)),
        lambda u: torch.exp(u * u * u * u + 1.0), ((V,),), V, (), V, 4 * V),  # x*x once
    "sum_of_sums": Case(lambda a: ops.sum(ops.sum(a, 1), 0), lambda a: a.sum(1).sum(0),
                        ((N, K),), N * K, (), N * K),
    "max_of_max": Case(lambda a: ops.amax(ops.amax(a, 1), 0), lambda a: a.amax(1).amax(0),
                       ((N, K),), N * K, (), N * K),
    "mean_of_means": Case(lambda a: ops.mean(ops.mean(a, -1), -1), lambda a: a.mean(-1).mean(-1),
                          ((N, K),), N * K, (), N * K),
    # -- redundancy
    "reshape_round_trip": Case(lambda a: ops.reshape(ops.reshape(a, 4, N // 4, K), N, K),
                               lambda a: a.reshape(4, N // 4, K).reshape(N, K), ((N, K),),
                               N * K, (), N * K),
    "permute_round_trip": Case(lambda a: ops.permute(ops.permute(a, 2, 0, 1), 1, 2, 0),
                               lambda a: a.permute(2, 0, 1).permute(1, 2, 0), ((4, N, K),),
                               4 * N * K, (), 4 * N * K),
    # -- unrolled loops vectorised (Dynamo hands them over as n selects and a cat)
    "unrolled_stack": Case(lambda a: ops.stack([ops.exp(ops.select(a, 0, i)) for i in range(8)]),
                           lambda a: torch.stack([torch.exp(a[i]) for i in range(8)]),
                           ((8, K),), 8 * K, (), 8 * K),
    "unrolled_cat_of_slices": Case(
        lambda a: ops.cat([ops.relu(ops.mul(ops.slice(a, 0, i, i + 1), 2.0)) for i in range(6)]),
        lambda a: torch.cat([torch.relu(a[i:i + 1] * 2.0) for i in range(6)]),
        ((6, K),), 6 * K, (), 6 * K),
    "unrolled_affine_index": Case(
        lambda a: ops.stack([ops.add(ops.select(a, 0, 2 * i + 1), 1.0) for i in range(5)], 1),
        lambda a: torch.stack([a[2 * i + 1] + 1.0 for i in range(5)], 1),
        ((11, K),), 5 * K, (), 5 * K),
    "unrolled_matmul_rows": Case(
        lambda a, w: ops.stack([ops.matmul(ops.select(a, 0, i), w) for i in range(6)]),
        lambda a, w: torch.stack([a[i] @ w for i in range(6)]),
        ((6, N), (N, K)), 6 * K, ("matmul",), 6 * N * K + 6 * K),
    # ... as core ATen spells them through the compiler: x[i] @ w is select, unsqueeze, mm,
    #     squeeze; a stack of vectors is a flat cat read through a view (cat[M*i + j])
    "unrolled_aten_rows": Case(
        lambda a, w: ops.reshape(ops.cat([ops.tanh(_row_mm(a, w, i)) for i in range(8)]), 8, K),
        lambda a, w: torch.stack([torch.tanh(a[i] @ w) for i in range(8)]),
        ((8, N), (N, K)), 8 * K, ("matmul",), 8 * N * K + 8 * K),
    "unrolled_aten_matvec": Case(
        lambda a, w: ops.reshape(ops.cat([ops.mv(w, ops.select(a, 0, i)) for i in range(6)]),
                                 6, K),
        lambda a, w: torch.stack([w @ a[i] for i in range(6)]),
        ((6, N), (K, N)), 6 * K, ("matmul",), 6 * N * K),
    "unrolled_aten_slices": Case(
        lambda a, w: ops.cat([ops.relu(ops.mm(ops.slice(a, 0, i, i + 1), w)) for i in range(6)]),
        lambda a, w: torch.cat([torch.relu(a[i:i + 1] @ w) for i in range(6)]),
        ((6, N), (N, K)), 6 * K, ("matmul",), 6 * N * K + 6 * K),
    "stack_amax_of_products": Case(
        lambda x, a, b, c: ops.amax(ops.stack([ops.mm(x, a), ops.mm(x, b), ops.mm(x, c)]), 0),
        lambda x, a, b, c: torch.stack([x @ a, x @ b, x @ c]).amax(0),
        ((K, N), (N, K), (N, K), (N, K)), K * K, ("matmul",), 3 * K * N * K + 3 * K * K),
    # -- reductions over stacks: elementwise
    "stack_sum": Case(lambda u, v, w: ops.sum(ops.stack([u, v, w]), 0),
                      lambda u, v, w: torch.stack([u, v, w]).sum(0), ((N,), (N,), (N,)), N,
                      (), N),
    "stack_mean_dim1": Case(lambda u, v, w: ops.mean(ops.stack([u, v, w], 1), 1),
                            lambda u, v, w: torch.stack([u, v, w], 1).mean(1),
                            ((N,), (N,), (N,)), N, (), N),
    "stack_amax": Case(lambda u, v, w: ops.amax(ops.stack([u, v, w]), 0),
                       lambda u, v, w: torch.stack([u, v, w]).amax(0), ((N,), (N,), (N,)), N,
                       (), N),
    "stack_amin_2d": Case(lambda u, v: ops.amin(ops.stack([u, v], 2), -1),
                          lambda u, v: torch.stack([u, v], 2).amin(-1), ((N, K), (N, K)), N * K,
                          (), N * K),
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


def _cheaper_form(case: Case, best) -> bool:
    """The library form and the work bounds the asserts below check."""
    programs = sub_scopes(best.program)
    heavy = [s for s in programs if iteration_points(s) > case.max_points]
    return all(classify(s) in case.library for s in heavy) and \
        set(case.library) <= set(best.operators) and \
        (case.most_flops is None or sum(map(flops, programs)) <= case.most_flops) and \
        (case.total is None or sum(map(iteration_points, programs)) <= case.total)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_cheaper_program_is_derived_in_time(name):
    case, _, e, d, best, elapsed = derived(name)
    if not _cheaper_form(case, best) and d.report.stop == "seconds":
        # A 2-core box under load can end the budget an iteration early (seen on CI: one
        # iteration where two or three run here); a regression fails the second run too.
        case, _, e, d, best, elapsed = derived(name)
    assert elapsed <= SLACK * BUDGET.seconds, (elapsed, d.report)
    assert d.rejected == [], d.rejected
    heavy = [s for s in sub_scopes(best.program) if iteration_points(s) > case.max_points]
    assert all(classify(s) in case.library for s in heavy), (best.program, best.rule_chain)
    assert set(case.library) <= set(best.operators), (best.operators, best.program)
    if case.most_flops is not None:
        assert sum(map(flops, sub_scopes(best.program))) <= case.most_flops, best.program
    if case.total is not None:
        total = sum(iteration_points(s) for s in sub_scopes(best.program))
        assert total <= case.total, (total, best.program, best.rule_chain)
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
