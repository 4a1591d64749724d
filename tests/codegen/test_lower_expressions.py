"""Hand-built expressions lowered to torch agree with the reference interpreter (fp64)."""
import math

import numpy as np
import pytest
import sympy
import torch

import codegen
import codegen.torch_backend as torch_backend
import codegen.torch_expr as torch_expr
from ir import (
    Binary, BinOp, Const, Iter, Reduce, Scope, Tensor, UnOp, Unary, evaluate, iterator_symbol,
)
from ir.errors import IRError

from lowering_helpers import calls, check_lowering, constant_args, random_inputs

i, j, k, r, s = (iterator_symbol(n) for n in "ijkrs")
A, B, V = Tensor("A", (5, 4), "float64"), Tensor("B", (4, 6), "float64"), Tensor("V", (4,))


def It(name, lo, hi):
    return Iter(name, lo, hi)


def test_offset_ranges_pad_and_slice():
    # reads at i - 1 over i in 1:6 and j in -1:4: the j = -1 column is padding
    check_lowering(Scope((It("i", 1, 6), It("j", -1, 4)), (), A[i - 1, j] * 2.0 + 1.0))
    # a window reaching out of both ends, and one strictly inside
    check_lowering(Scope((It("i", 0, 7),), (), A[i - 1, 2] + A[i - 2, 3]))
    check_lowering(Scope((It("i", 0, 2), It("j", 0, 2)), (), A[i + 2, j + 1]))


def test_nested_scope_with_offset_bounds():
    inner = Scope((It("i", 2, 7), It("j", 0, 4)), (), A[i - 2, j] * 2.0, name="inner")
    check_lowering(Scope((It("i", 0, 8),), (It("j", 0, 4),), inner[i, j] * B[j, 1]))
    shifted = Scope((It("a", 3, 8), It("b", -2, 2)), (), A[iterator_symbol("a") - 3,
                                                           iterator_symbol("b") + 2])
    check_lowering(Scope((It("i", 0, 5), It("j", 0, 6)), (It("k", 0, 4),),
                         shifted[i + 3, k - 2] * B[k, j]))


def test_floor_and_mod_indices_gather_or_pad():
    kernel = check_lowering(Scope((It("i", 0, 10), It("j", 0, 3)), (),
                                  A[sympy.floor(i / 2), sympy.Mod(3 * j, 4)]
                                  + A[sympy.floor(i / 2) + 1, j]))
    # 3j mod 4 is no digit: gathered; floor(i/2) + 1 reaches row 5, a zero padded in
    assert list(kernel.index_arrays) == ["A_pos0", "A_pos1"] and calls(kernel)["pad"]


def test_reshape_indices_are_a_view():
    kernel = check_lowering(Scope((It("i", 0, 20),), (), A[sympy.floor(i / 4), sympy.Mod(i, 4)]))
    assert calls(kernel)["reshape"] == 1 and not kernel.index_arrays


def test_indices_taking_an_iterator_apart_by_digits_are_views_merged_again():
    """``X[n // d, c, n % d]``, a reshape merging dims after a permute (a Conv1d's output read
    as rows, attention's heads joined): no index arrays, one program for every size."""
    X = Tensor("X", (4, 3, 6), "float64")
    rows = check_lowering(Scope((It("i", 0, 24), It("j", 0, 3)), (),
                                X[sympy.floor(i / 6), j, sympy.Mod(i, 6)] * 2.0))
    heads = check_lowering(Scope((It("i", 0, 4), It("j", 0, 6), It("k", 0, 18)), (),
                                 X[i, sympy.floor(k / 6), sympy.Mod(k, 6)] +
                                 X[i, sympy.floor(k / 6), j]))  # one digit: broadcast
    padded = check_lowering(Scope((It("i", 0, 24),), (),  # a digit past the end reads 0
                                  X[sympy.floor(i / 6), 1, sympy.Mod(i, 6) + 1]))
    assert not rows.index_arrays and not heads.index_arrays and not padded.index_arrays


def test_strided_views():
    check_lowering(Scope((It("i", 0, 4),), (), A[i, i]))  # diagonal
    check_lowering(Scope((It("i", 0, 3),), (It("k", 0, 2),), A[2 * i, k] + A[2 * i + 1, k + 1],
                         Reduce.MAX))
    kernel = check_lowering(Scope((It("i", 0, 4), It("r", 0, 3)), (), V[i + r - 1] * A[i, r]))
    assert calls(kernel)["as_strided"] and not kernel.index_arrays


def test_reads_backwards_flip_the_source():
    kernel = check_lowering(Scope((It("i", 0, 5),), (), A[4 - i, 1] + A[i, 3 - i]))
    assert calls(kernel)["flip"] and not kernel.index_arrays


def test_mixed_sign_indices_gather():
    kernel = check_lowering(Scope((It("i", 0, 5), It("j", 0, 4)), (), A[i - j, 1]))
    assert kernel.index_arrays and calls(kernel)["where"]


def test_index_tables_go_to_the_inputs_device():
    """A gather's index tensors are constants of the kernel's graph, built on the CPU; inputs
    on another device (here ``meta``, as the candidate ranker calls kernels) read a copy of
    them made there."""
    kernel = codegen.lower(Scope((It("i", 0, 5), It("j", 0, 4)), (), A[i - j, 1]))
    assert kernel.index_arrays
    out = kernel(torch.empty(A.shape, dtype=torch.float64, device="meta"))
    assert out.device.type == "meta" and tuple(out.shape) == (5, 4)


def test_reads_entirely_out_of_bounds_are_zero():
    kernel = check_lowering(Scope((It("i", 0, 5),), (), A[i + 10, 1] + 1.0))
    assert calls(kernel) == {"new_full": 1}  # no read of A


@pytest.mark.parametrize("op", list(UnOp))
def test_unary_ops(op):
    check_lowering(Scope((It("i", 0, 5), It("j", 0, 4)), (), Unary(op, A[i, j])))


@pytest.mark.parametrize("op", list(BinOp))
def test_binary_ops_with_broadcast_and_constants(op):
    check_lowering(Scope((It("i", 0, 5), It("j", 0, 4)), (), Binary(op, A[i, j], V[j])))
    check_lowering(Scope((It("i", 0, 5),), (), Binary(op, Const(0.5), A[i, 2])))
    check_lowering(Scope((It("i", 0, 5),), (), Binary(op, A[i, 1], Const(-2.0))))


def test_precedence_of_nested_arithmetic():
    x, y, z = A[i, 0], A[i, 1], A[i, 2]
    check_lowering(Scope((It("i", 0, 5),), (), x - (y - z) / (x * (y + z)) - -(x - y)))


def test_constants_fold_including_inf_and_nan():
    kernel = check_lowering(Scope((It("i", 0, 3),), (), A[i, 0] + Const(1.0) / Const(0.0)))
    assert math.inf in constant_args(kernel)
    check_lowering(Scope((It("i", 0, 3),), (), A[i, 0] * (Const(0.0) / Const(0.0))))
    check_lowering(Scope((It("i", 0, 3),), (It("k", 0, 4),), Const(2.0)))
    check_lowering(Scope((It("i", 0, 3),), (It("k", 0, 4),), Const(2.0), Reduce.MAX))


def test_sum_scales_by_unused_summation_iterators_and_constant_factors():
    kernel = check_lowering(Scope((It("i", 0, 5),), (It("k", 0, 4), It("r", 0, 3)),
                                  A[i, k] * 3.0 * V[k]))
    assert 9.0 in constant_args(kernel)


@pytest.mark.parametrize("reduce", list(Reduce))
def test_reductions_of_elementwise_bodies(reduce):
    check_lowering(Scope((It("i", 0, 5),), (It("j", 0, 6), It("k", 0, 4)),
                         Unary(UnOp.RELU, A[i, k] - B[k, j]), reduce))
    check_lowering(Scope((It("j", 0, 6),), (It("k", 0, 4),), B[k, j] * A[0, k], reduce))


def test_scalar_output_and_rank_zero_input():
    x = Tensor("x", (), "float64")
    check_lowering(Scope((), (It("i", 0, 5), It("k", 0, 4)), A[i, k] * x[()]))
    check_lowering(Scope((It("i", 0, 3),), (), x[()] + 1.0))
    check_lowering(Scope((), (), x[()] * 2.0))


def test_broadcast_output_with_unit_and_missing_axes():
    check_lowering(Scope((It("a", 0, 1), It("j", 0, 4)), (), V[j]))
    check_lowering(Scope((It("a", 0, 3), It("j", 0, 4), It("b", 0, 1)), (), V[j]))
    check_lowering(Scope((It("a", 0, 1),), (It("j", 0, 4),), V[j]))


def test_empty_ranges():
    check_lowering(Scope((It("i", 0, 0), It("j", 0, 3)), (), A[i, j]))
    check_lowering(Scope((It("i", 0, 5),), (It("k", 3, 3),), A[i, k], Reduce.MAX))
    check_lowering(Scope((It("i", 0, 5),), (It("k", 0, 4),), Tensor("E", (0, 4))[i, k]))


def test_no_inputs():
    kernel = codegen.lower(Scope((It("i", 0, 3),), (It("k", 0, 2),), Const(1.5)))
    assert kernel.input_names == ()
    np.testing.assert_allclose(kernel().numpy(), [3.0, 3.0, 3.0])
    assert kernel().dtype == torch.float32
    kernel = codegen.lower(Scope((It("i", 0, 3),), (), Const(1.5), dtype="float64"))
    assert kernel().dtype == torch.float64


def test_equal_nested_scopes_are_computed_once():
    make = lambda: Scope((It("i", 0, 5), It("j", 0, 4)), (), Unary(UnOp.EXP, A[i, j]))  # noqa: E731
    a, b = make(), make()
    kernel = check_lowering(Scope((It("i", 0, 5),), (It("j", 0, 4),), a[i, j] * b[i, j]))
    assert calls(kernel)["exp"] == 1


@pytest.mark.parametrize("reduce", list(Reduce))
def test_chunked_reduction_matches(monkeypatch, reduce):
    monkeypatch.setattr(torch_backend, "CHUNK_LIMIT", 50)
    body = Unary(UnOp.TANH, A[i, k] + B[k, j] * A[sympy.floor(j / 2), k])
    kernel = check_lowering(Scope((It("i", 0, 5),), (It("j", 0, 6), It("k", 0, 4)), body,
                                  reduce))
    assert calls(kernel)["tanh"] == 3  # j in chunks of 2


def test_chunked_sum_of_products_with_strided_read(monkeypatch):
    monkeypatch.setattr(torch_backend, "CHUNK_LIMIT", 40)
    x = Tensor("x", (3, 12), "float64")
    body = x[i, j + k - 1] * Unary(UnOp.EXP, V[k] - x[i, j])
    kernel = check_lowering(Scope((It("i", 0, 3),), (It("j", 0, 12), It("k", 0, 4)), body))
    _, size = torch_backend.plan_chunk(kernel.scope)
    assert calls(kernel)["exp"] == -(-12 // size) > 1  # one body per chunk


def test_float32_inputs_give_float32():
    scope = Scope((It("i", 0, 5), It("j", 0, 6)), (It("k", 0, 4),),
                  Unary(UnOp.EXP, A[i, k] * 0.5) * B[k, j])
    env = random_inputs(scope)
    kernel = codegen.lower(scope)
    out = kernel(*(torch.tensor(env[n], dtype=torch.float32) for n in kernel.input_names))
    assert out.dtype == torch.float32
    np.testing.assert_allclose(out.numpy(), evaluate(scope, env), rtol=1e-5, atol=1e-5)


def test_results_never_alias_inputs():
    a = torch.randn(5, 4, dtype=torch.float64)
    for scope in (Scope((It("i", 0, 5), It("j", 0, 4)), (), A[i, j]),  # identity
                  Scope((It("j", 0, 4), It("i", 0, 5)), (), A[i, j]),  # transpose
                  Scope((It("i", 0, 5), It("j", 0, 4), It("r", 0, 2)), (), A[i, j])):  # expand
        out = codegen.lower(scope)(a)
        before = a.clone()
        out.add_(1.0)
        assert torch.equal(a, before)


def test_repeated_sub_expressions_are_computed_once():
    e = Unary(UnOp.EXP, A[i, j] - V[j])
    kernel = check_lowering(Scope((It("i", 0, 5), It("j", 0, 4)), (), e * e + e))
    assert calls(kernel)["exp"] == 1


def test_invalid_scopes_are_rejected_naming_the_statement():
    with pytest.raises(IRError, match="sq"):
        codegen.lower(Scope((It("i", 0, 4),), (), A[i * i, 0], name="sq"))
    with pytest.raises(IRError, match="unbound iterator 'k'"):
        codegen.lower(Scope((It("i", 0, 4),), (), A[i, k], name="sq"))


def test_lowering_failures_name_the_statement(monkeypatch):
    def broken(*args):
        raise RuntimeError("no plan")

    monkeypatch.setattr(torch_expr, "plan_read", broken)
    with pytest.raises(RuntimeError, match="no plan") as info:
        codegen.lower(Scope((It("i", 0, 4),), (), A[i, 0] * 2.0, name="sq"))
    assert "while lowering sq[i] = A[i,0] * 2" in "".join(info.value.__notes__)
