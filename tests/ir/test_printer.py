"""The printer: exact round trips with the parser, minimal text, LaTeX."""
import pytest
import sympy
from hypothesis import HealthCheck, given, settings, strategies as st

from ir import (Access, Binary, BinOp, Const, Iter, Reduce, Scope, Tensor, UnOp, Unary,
                iterator_symbol, parse, to_latex, to_text)
from ir.printer import index_text

i, j, k = (iterator_symbol(n) for n in "ijk")
X, V = Tensor("X", (4, 5)), Tensor("V", (5,), "float64")


def round_trips(e: Scope) -> bool:
    return parse(to_text(e, declarations=True)) == e


CANONICAL_TEXTS = {
    "matmul": "A: f32[4, 6]\nB: f32[6, 5]\nC[i,j] = sum[k] A[i,k] * B[k,j]",
    "conv": "I: f32[1, 3, 7, 7]\nK: f32[8, 3, 3, 3]\n"
            "O[n,f,h,w] = sum[c,r,s] I[n,c,h+r-1,w+s-1] * K[f,c,r,s] where h in 0:7, w in 0:7",
    "nested": "B: f32[6, 5]\nC: f32[5, 3]\nA: f32[4, 6]\n"
              "T[k,l] = sum[j] B[k,j] * C[j,l]\nD[i,l] = sum[k] A[i,k] * T[k,l]",
    "softmax": "X: f32[4, 6]\nM[i] = max[k] X[i,k]\nE[i,j] = exp(X[i,j] - M[i])\n"
               "S[i] = sum[j] E[i,j]\nY[i,j] = E[i,j] / S[i]",
    "min": "X: f32[4, 6]\nM[i] = min[k] -X[i,k]",
    "max without summation": "x: f32[8]\nY[i] = max[] x[i]",
    "floor and mod": "x: f64[8]\nY[i] = x[i//2] * x[i%3] + x[2*i+1] where i in 0:8",
    "negative range": "x: f32[8]\nY[i] = sum[r] x[i+r] * 0.25 where i in 0:8, r in -1:2",
    "offset scope": "x: f32[8]\nS[i] = x[i-2] where i in 2:6\nY[i] = S[i] * 2",
    "scalar": "x: f32[8]\ns[] = sum[i] x[i]\ny[i] = x[i] / s[]",
    "functions": "x: f16[8]\ny[i] = relu(x[i]) + sigmoid(-x[i]) * max(x[i], -1.5) - recip(2)",
    "parens": "x: f32[8]\ny[i] = x[i] - (x[i] - 2) / (x[i] * -(3))",
    "broadcast": "x: f32[8]\ny[i,j] = x[i] where j in 0:3",
}


@pytest.mark.parametrize("name", CANONICAL_TEXTS)
def test_canonical_text_prints_back_unchanged(name):
    text = CANONICAL_TEXTS[name]
    assert to_text(parse(text), declarations=True) == text


@pytest.mark.parametrize("name", CANONICAL_TEXTS)
def test_round_trip_is_exact(name):
    assert round_trips(parse(CANONICAL_TEXTS[name]))


def test_unnamed_scopes_get_fresh_names_root_last():
    inner = Scope((Iter("a", 0, 4),), (Iter("b", 0, 5),), X[iterator_symbol("a"), iterator_symbol("b")])
    outer = Scope((Iter("i", 0, 4),), (), inner[i] * 2)
    assert to_text(outer) == "T0[a] = sum[b] X[a,b]\nT1[i] = T0[i] * 2"


def test_name_hint_that_clashes_with_an_input_is_replaced():
    inner = Scope((Iter("i", 0, 5),), (), V[i], name="V")
    assert to_text(Scope((Iter("i", 0, 5),), (), inner[i] + V[i], name="Y")).splitlines() == [
        "T0[i] = V[i]", "Y[i] = T0[i] + V[i]"]


def test_shared_scope_is_printed_once():
    s = parse("x: f32[8]\nS[i] = exp(x[i])")
    y = Scope((Iter("i", 0, 8),), (), s[i] * s[i], name="Y")
    assert to_text(y) == "S[i] = exp(x[i])\nY[i] = S[i] * S[i]"


def test_integral_constants_print_without_point():
    assert to_text(Scope((Iter("i", 0, 5),), (), V[i] * 2.0 + 0.1)) == "T0[i] = V[i] * 2 + 0.1"


def test_negation_of_constant_keeps_parentheses():
    assert to_text(Scope((), (), Unary(UnOp.NEG, Const(2.0)), name="c")) == "c[] = -(2)"


@pytest.mark.parametrize("expr, text", [
    (i + k - 1, "i+k-1"), (k + i - 1, "i+k-1"), (sympy.floor(i / 2), "i//2"),
    (sympy.Mod(i, 3), "i%3"), (2 * i + 1, "2*i+1"), (-sympy.floor(i / 2), "-(i//2)"),
    (sympy.floor((i + 1) / 2), "(i+1)//2"), (3 * sympy.Mod(i, 2), "3*(i%2)"), (i - 2 * k, "i-2*k"),
])
def test_index_text(expr, text):
    assert index_text(expr, {"i": 0, "k": 1}) == text


def test_where_only_for_ranges_inference_would_miss():
    e = parse("x: f32[8]\nY[i] = sum[r] x[i+r] where i in 0:8, r in 0:8")
    assert to_text(e).endswith("where i in 0:8, r in 0:8")
    assert "where" not in to_text(parse("x: f32[8]\nY[i] = x[i] where i in 0:8"))


def test_repr_is_the_program_text():
    assert repr(parse(CANONICAL_TEXTS["matmul"])) == "C[i,j] = sum[k] A[i,k] * B[k,j]"


def test_latex_matmul():
    assert to_latex(parse(CANONICAL_TEXTS["matmul"])) == r"C_{i,j} = \sum_{k} A_{i,k} B_{k,j}"


def test_latex_shows_max_exp_frac_and_aligns_programs():
    tex = to_latex(parse(CANONICAL_TEXTS["softmax"]))
    assert tex.startswith(r"\begin{aligned}") and r"\max_{k}" in tex
    assert r"\exp\left(X_{i,j} - M_{i}\right)" in tex and r"\frac{E_{i,j}}{S_{i}}" in tex


def test_latex_shows_explicit_ranges():
    tex = to_latex(parse(CANONICAL_TEXTS["negative range"]))
    assert r"\sum_{r \in [-1, 2)}" in tex and r"\quad i \in [0, 8)" in tex


def test_repr_latex_wraps_in_display_math():
    assert parse(CANONICAL_TEXTS["matmul"])._repr_latex_().startswith("$$C_{i,j} =")


# -- property: random expressions print and parse back exactly ---------------------------------
NAMES = ("i", "j", "k")
INNER = Scope((Iter("a", 1, 4),), (Iter("b", 0, 5),),
              X[iterator_symbol("a"), iterator_symbol("b")], name="S")


def indices(names):
    leaf = st.sampled_from([iterator_symbol(n) for n in names]) | st.integers(-3, 3).map(sympy.Integer)
    return st.recursive(leaf, lambda sub: st.one_of(
        st.tuples(sub, sub).map(lambda t: t[0] + t[1]),
        st.tuples(st.integers(-3, 3), sub).map(lambda t: t[0] * t[1]),
        st.tuples(sub, st.integers(1, 4)).map(lambda t: sympy.floor(t[0] / t[1])),
        st.tuples(sub, st.integers(1, 4)).map(lambda t: sympy.Mod(t[0], t[1])),
    ), max_leaves=4)


def bodies(names):
    ix = indices(names)
    leaf = st.one_of(
        st.sampled_from([0.0, 1.0, -2.0, 0.5, -1.25, 1e-3, 1e20, float("inf")]).map(Const),
        st.tuples(ix, ix).map(lambda t: X[t]), ix.map(lambda t: V[t]), ix.map(lambda t: INNER[t]))
    return st.recursive(leaf, lambda sub: st.one_of(
        st.tuples(st.sampled_from(list(BinOp)), sub, sub).map(lambda t: Binary(*t)),
        st.tuples(st.sampled_from(list(UnOp)), sub).map(lambda t: Unary(*t))), max_leaves=6)


@st.composite
def scopes(draw):
    n_trav = draw(st.integers(0, 2))
    n_sum = draw(st.integers(0, 1))
    ranges = [draw(st.tuples(st.integers(-2, 2), st.integers(0, 4))) for _ in range(n_trav + n_sum)]
    its = [Iter(n, lo, lo + ext) for n, (lo, ext) in zip(NAMES, ranges)]
    body = draw(bodies(NAMES[:n_trav + n_sum] or ("i",))) if its else draw(
        st.sampled_from([Const(3.0), Access(V, (sympy.Integer(1),))]))
    return Scope(tuple(its[:n_trav]), tuple(its[n_trav:]), body, draw(st.sampled_from(list(Reduce))))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scopes())
def test_random_expressions_round_trip(e):
    assert round_trips(e)
