"""check(): every kind of invalid expression is reported, naming the statement."""
import pytest
import sympy

from ir import (Access, Binary, IRError, Iter, Scope, Tensor, Unary, check,
                iterator_symbol, parse)

i, j, k = (iterator_symbol(n) for n in "ijk")
A, B, x = Tensor("A", (4, 6)), Tensor("B", (6, 5)), Tensor("x", (8,))
I8 = (Iter("i", 0, 8),)


def check_error(scope) -> str:
    with pytest.raises(IRError) as info:
        check(scope)
    return str(info.value)


def test_valid_program_passes():
    check(parse("A: f32[4, 6]\nT[i] = max[k] A[i,k]\nY[i,k] = exp(A[i,k] - T[i])"))


def test_zero_extent_is_legal():
    check(Scope((Iter("i", 3, 3),), (), x[i]))


def test_unbound_iterator():
    msg = check_error(Scope(I8, (), x[j], name="Y"))
    assert "unbound iterator 'j'" in msg and "in statement 'Y[i] = x[j]" in msg


def test_rank_mismatch():
    assert "rank mismatch: 'A' has rank 2 but is indexed with 1" in check_error(Scope(I8, (), A[i]))


def test_inverted_range():
    assert "inverted range 5:2 for 'i'" in check_error(Scope((Iter("i", 5, 2),), (), x[i]))


def test_duplicate_iterator_names():
    assert "duplicate iterator name 'i'" in check_error(Scope(I8, I8, x[i]))


def test_product_of_iterators_is_not_affine():
    assert "a product of iterators" in check_error(Scope(I8, (Iter("j", 0, 8),), x[i * j]))


def test_non_integer_coefficient_is_not_affine():
    assert "coefficients must be integers" in check_error(Scope(I8, (), x[sympy.Rational(1, 2) * i]))


def test_modulo_by_non_positive_integer():
    assert "'%' must be by a positive integer" in check_error(Scope(I8, (), x[sympy.Mod(i, -3)]))


def test_floor_by_non_integer():
    assert "floor division must be by a positive integer" in check_error(
        Scope(I8, (), x[sympy.floor(i / sympy.Symbol("n", integer=True))]))


def test_floor_by_zero():
    assert "not finite" in check_error(Scope(I8, (), x[sympy.floor(i / 0)]))


def test_non_iterator_symbol():
    assert "not an integer iterator symbol" in check_error(Scope(I8, (), x[sympy.Symbol("i")]))


def test_unknown_operators():
    assert "unknown unary operator 'cube'" in check_error(Scope(I8, (), Unary("cube", x[i])))
    assert "unknown binary operator" in check_error(Scope(I8, (), Binary("pow", x[i], x[i])))


def test_foreign_node_in_body():
    class Foreign:
        pass
    assert "unknown node type Foreign" in check_error(Scope(I8, (), Foreign()))


def test_inline_scope_must_be_accessed():
    inner = Scope(I8, (), x[i])
    assert "must be accessed" in check_error(Scope(I8, (), inner + 1))


def test_two_inputs_with_one_name():
    assert "two different input tensors named 'x'" in check_error(
        Scope(I8, (), x[i] + Tensor("x", (9,))[i]))


def test_problems_in_accessed_scopes_are_found():
    inner = Scope(I8, (), x[k], name="Bad")
    msg = check_error(Scope(I8, (), Access(inner, (i,)), name="Y"))
    assert "in statement 'Bad[i] = x[k]" in msg and "unbound iterator 'k'" in msg
