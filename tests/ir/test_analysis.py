"""The analytic cost: iteration points, flops, bytes moved, per program."""
from ir import analytic_cost, bytes_moved, flops, iteration_points, parse, program_cost, sub_scopes
from ir.analysis import BALANCE, LAUNCH

SHAPES = {"A": (4, 6), "B": (6, 5), "C": (5, 3), "x": (1000,)}
MATMUL = parse("P[i,j] = sum[k] A[i,k] * B[k,j]", SHAPES)


def test_iteration_points_is_product_of_all_extents():
    assert iteration_points(MATMUL) == 4 * 5 * 6


def test_matmul_flops_count_multiply_and_accumulate():
    assert flops(MATMUL) == 2 * 4 * 5 * 6


def test_elementwise_flops_count_every_operator():
    assert flops(parse("Y[i] = exp(x[i] - 1) * 2", SHAPES)) == 1000 * 3


def test_copy_has_no_flops():
    assert flops(parse("Y[i] = x[i]", SHAPES)) == 0


def test_matmul_bytes_are_output_plus_inputs():
    assert bytes_moved(MATMUL) == (4 * 5 + 4 * 6 + 6 * 5) * 4


def test_source_read_is_capped_by_iteration_points():
    assert bytes_moved(parse("Y[i] = x[i] where i in 0:10", SHAPES), itemsize=2) == (10 + 10) * 2


def test_repeated_source_counts_once():
    assert bytes_moved(parse("Y[i] = x[i] * x[i]", SHAPES)) == (1000 + 1000) * 4


def test_analytic_cost_is_roofline_plus_launch():
    assert analytic_cost(MATMUL) == max(flops(MATMUL), BALANCE * bytes_moved(MATMUL)) + LAUNCH


def test_program_cost_sums_over_sub_scopes():
    e = parse("T[i,l] = sum[j] A[i,j] * B[j,l]\nD[i,m] = sum[l] T[i,l] * C[l,m]", SHAPES)
    assert program_cost(e, flops) == sum(flops(s) for s in sub_scopes(e)) == 2 * 4 * 5 * 6 + 2 * 4 * 3 * 5
