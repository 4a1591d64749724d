"""The text syntax: what each form parses to, and the errors malformed text gets."""
import pytest
import sympy

from ir import (Access, Binary, BinOp, Const, Iter, ParseError, Reduce, Scope, Tensor, UnOp,
                Unary, iterator_symbol, parse, parse_all)

i, j, k = (iterator_symbol(n) for n in "ijk")
A, B = Tensor("A", (4, 6)), Tensor("B", (6, 5))
SHAPES = {"A": (4, 6), "B": (6, 5), "x": (8,), "X": (4, 6)}


def p(text, **shapes):
    return parse(text, {**SHAPES, **shapes})


def parse_error(text, **shapes) -> ParseError:
    with pytest.raises(ParseError) as info:
        p(text, **shapes)
    return info.value


def test_matmul_parses_to_the_scope_built_by_hand():
    expected = Scope((Iter("i", 0, 4), Iter("j", 0, 5)), (Iter("k", 0, 6),), A[i, k] * B[k, j])
    assert p("C[i,j] = sum[k] A[i,k] * B[k,j]") == expected


def test_statement_name_becomes_the_name_hint():
    assert p("C[i,j] = sum[k] A[i,k] * B[k,j]").name == "C"


def test_earlier_statement_is_the_access_source():
    stmts = parse_all("T[i,j] = sum[k] A[i,k] * B[k,j]\nD[i] = sum[j] T[i,j]", SHAPES)
    assert stmts["D"].body.source is stmts["T"]


def test_declarations_give_shapes_and_dtypes():
    e = parse("P: f64[2, 3]\nQ: bf16[3]\nR[i] = sum[j] P[i,j] * Q[j]")
    assert {a.source for a in (e.body.lhs, e.body.rhs)} == {
        Tensor("P", (2, 3), "float64"), Tensor("Q", (3,), "bfloat16")}


def test_long_dtype_names_are_accepted():
    assert parse("P: float16[2]\nR[i] = P[i]").body.source.dtype == "float16"


def test_tensors_argument_accepts_tensor_objects():
    assert parse("R[i] = P[i]", {"P": Tensor("P", (3,), "float64")}).body.source.dtype == "float64"


def test_no_reduce_prefix_means_no_summation():
    e = p("Y[i,j] = A[i,j] + 1")
    assert e.summation == () and e.reduce is Reduce.SUM


def test_max_and_min_reductions():
    assert p("M[i] = max[k] X[i,k]").reduce is Reduce.MAX
    assert p("M[i] = min[k] X[i,k]").reduce is Reduce.MIN


def test_scalar_output_and_scalar_access():
    stmts = parse_all("s[] = sum[i] x[i]\ny[i] = x[i] / s[]", SHAPES)
    assert stmts["s"].shape == () and stmts["y"].body.rhs == Access(stmts["s"], ())


def test_where_overrides_inference():
    e = p("Y[i] = x[i] where i in 2:5")
    assert e.traversal == (Iter("i", 2, 5),)


def test_negative_bounds_in_where():
    assert p("Y[i] = sum[r] x[i+r] where i in 0:8, r in -1:2").summation == (Iter("r", -1, 2),)


def test_range_inferred_from_a_scope_with_offset():
    stmts = parse_all("S[i] = x[i] where i in 2:6\nY[i] = S[i] * 2", SHAPES)
    assert stmts["Y"].traversal == (Iter("i", 2, 6),)


def test_affine_indices_are_sympy_expressions():
    e = p("Y[i,k] = sum[j] A[2*i+1-j,k-1] * B[j,k] where i in 0:2", A=(8, 6), B=(3, 7))
    assert e.body.lhs.indices == (2 * i + 1 - j, k - 1)


def test_floor_division_and_modulo_indices():
    e = p("Y[i] = x[i//2] + x[i%3] where i in 0:8")
    assert (e.body.lhs.indices[0], e.body.rhs.indices[0]) == (sympy.floor(i / 2), sympy.Mod(i, 3))


def test_operator_precedence_and_left_associativity():
    a, b, c = (Access(Tensor("x", (8,)), (i,)),) * 3
    assert p("Y[i] = x[i] - x[i] - x[i] * x[i]").body == Binary(
        BinOp.SUB, Binary(BinOp.SUB, a, b), Binary(BinOp.MUL, b, c))


def test_parentheses_group():
    body = p("Y[i] = x[i] - (x[i] - x[i])").body
    assert isinstance(body.rhs, Binary) and body.rhs.op is BinOp.SUB


def test_minus_number_is_a_negative_constant_and_minus_paren_a_negation():
    assert p("Y[i] = x[i] * -2").body.rhs == Const(-2.0)
    assert p("Y[i] = x[i] * -(2)").body.rhs == Unary(UnOp.NEG, Const(2.0))


def test_number_literals():
    assert p("Y[i] = x[i] * 1e-3 + 0.5").body.lhs.rhs == Const(1e-3)


def test_unary_and_binary_functions():
    for op in ("relu", "exp", "log", "tanh", "sigmoid", "sqrt", "abs", "recip"):
        assert p(f"Y[i] = {op}(x[i])").body == Unary(UnOp(op), Access(Tensor("x", (8,)), (i,)))
    assert p("Y[i] = max(x[i], 0)").body.op is BinOp.MAX


def test_comments_and_blank_lines_are_ignored():
    assert p("# header\n\nY[i] = x[i]  # copy\n").name == "Y"


def test_error_shows_line_and_caret():
    err = parse_error("C[i,j] = sum[k] A[i,k * B[k,j]")
    assert str(err) == ("line 1, column 23: expected ']' or ',' after index\n"
                        "  C[i,j] = sum[k] A[i,k * B[k,j]\n"
                        "                        ^")
    assert (err.line, err.column) == (1, 23)


def test_error_line_number_counts_all_lines():
    assert parse_error("# c\nY[i] = x[i]\nZ[i] = Q[i]").line == 3


@pytest.mark.parametrize("text, message, column", [
    ("Y[i] = Q[i]", "unknown tensor or statement 'Q'", 8),
    ("Y[i] = x[j]", "unknown iterator 'j'", 10),
    ("Y[i] = A[i]", "'A' has rank 2 but is indexed with 1 indices", 8),
    ("Y[i] = sum[j] A[i,j] * B[i,j]", "ambiguous range for 'i'", 3),
    ("Y[i] = x[i+1]", "cannot infer the range of 'i'", 3),
    ("Y[i] = sum[j] A[i*j,j]", "non-affine index i*j", 18),
    ("Y[i] = x[i/2] where i in 0:4", "use '//' for floor division", 11),
    ("Y[i] = x[i//0] where i in 0:4", "expected a positive integer after '//'", 13),
    ("Y[i] = x[1.5]", "index constants must be integers", 10),
    ("Y[i,i] = A[i,i]", "duplicate iterator 'i'", 5),
    ("Y[i] = x[i] where j in 0:2", "unknown iterator 'j' in where", 19),
    ("Y[i] = x[i] where i in 3:1", "inverted range 3:1", 3),
    ("Y[i] = x[i] x[i]", "expected an operator, 'where' or end of line", 13),
    ("Y[i] = x[i] @ 2", "unexpected character '@'", 13),
    ("Y[i] = x[i] + ", "expected an expression", 14),
    ("Y[i] = foo(x[i])", "unknown function, tensor or statement 'foo'", 8),
    ("Y[i] = x + 1", "expected '[' after 'x'", 10),
    ("sum[i] = x[i]", "'sum' is a reserved word", 1),
    ("P: q8[3]", "unknown dtype 'q8'", 4),
    ("x: f32[3]", "'x' is declared as", 1),
    ("Y[i] = x[i]\nY[i] = x[i]", "'Y' is already defined", 1),
    ("Y[i] = exp(x[i]", "')' after the argument of exp", 16),
    ("Y[i] = max(x[i])", "',' between the two arguments of max", 16),
])
def test_malformed_input_error(text, message, column):
    err = parse_error(text)
    assert message in err.message and err.column == column
    assert str(err).splitlines()[-1] == "  " + " " * (column - 1) + "^"


def test_uninferable_range_error_suggests_where():
    assert "write `where i in lo:hi`" in parse_error("Y[i] = x[i+1]").message


def test_empty_program_is_an_error():
    assert "expected a statement" in parse_error("# nothing\n").message


def test_program_must_end_with_a_statement():
    assert "expected a statement" in parse_error("Y[i] = x[i]\nP: f32[2]").message
