"""random_inputs / compare / equivalent: numeric checks that rewrites keep the meaning."""
import numpy as np

from ir import compare, equivalent, parse, random_inputs

SHAPES = {"A": (4, 6), "B": (6, 5), "C": (5, 3), "x": (6,), "Q": (5, 5)}


def p(text):
    return parse(text, SHAPES)


def test_random_inputs_are_small_integers_with_the_input_shapes():
    env = random_inputs(p("P[i,j] = sum[k] A[i,k] * B[k,j]"))
    assert {n: a.shape for n, a in env.items()} == {"A": (4, 6), "B": (6, 5)}
    assert all(a.dtype == np.float64 and np.all(a == np.round(a)) and np.abs(a).max() <= 3
               for a in env.values())


def test_random_inputs_are_reproducible_by_seed():
    e = p("Y[i] = x[i]")
    assert np.array_equal(random_inputs(e, seed=3)["x"], random_inputs(e, seed=3)["x"])
    assert not np.array_equal(random_inputs(e, seed=3)["x"], random_inputs(e, seed=4)["x"])


def test_float_inputs_are_not_integers():
    assert np.any(random_inputs(p("Y[i] = x[i]"), integer=False)["x"] % 1 != 0)


def test_matmul_chain_orders_are_equivalent():
    left = p("T[i,l] = sum[j] A[i,j] * B[j,l]\nD[i,m] = sum[l] T[i,l] * C[l,m]")
    right = p("U[j,m] = sum[l] B[j,l] * C[l,m]\nD[i,m] = sum[j] A[i,j] * U[j,m]")
    assert equivalent(left, right)


def test_padding_by_out_of_bounds_matches_explicit_boundary():
    shifted = p("Y[i] = x[i-1] where i in 0:6")
    explicit = p("S[i] = x[i-1] where i in 1:6\nY[i] = S[i] where i in 0:6")
    assert equivalent(shifted, explicit)


def test_transposed_operand_is_not_equivalent():
    c = compare(p("Y[i,j] = Q[i,j]"), p("Y[i,j] = Q[j,i]"))
    assert not c.ok and c.max_abs_error > 0 and "trial 0 (integer inputs)" in c.reason


def test_reduction_scopes_over_the_whole_right_hand_side():
    c = compare(p("Y[i] = sum[k] A[i,k] + 1"), p("Y[i] = sum[k] A[i,k]"))
    assert not c.ok and c.max_abs_error == 6.0


def test_different_inputs_are_not_equivalent():
    c = compare(p("Y[i] = x[i]"), parse("Y[i] = z[i]", {"z": (6,)}))
    assert not c.ok and "different inputs" in c.reason


def test_different_output_shapes_are_not_equivalent():
    c = compare(p("Y[i] = x[i]"), p("Y[i] = x[i] where i in 0:5"))
    assert not c.ok and "different output shapes" in c.reason


def test_float_trial_tolerates_rounding_from_reassociation():
    assert equivalent(p("Y[i] = (x[i] * 0.1 + 0.2) + 0.3"), p("Y[i] = x[i] * 0.1 + (0.2 + 0.3)"))


def test_nan_in_both_is_agreement():
    assert equivalent(p("Y[i] = log(x[i])"), p("Y[i] = log(x[i]) * 1"))
