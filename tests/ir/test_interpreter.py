"""The reference interpreter against numpy and torch."""
import time

import numpy as np
import torch

from ir import Iter, Scope, evaluate, parse, random_inputs


def run(text, shapes, integer=False, seed=0):
    e = parse(text, shapes)
    env = random_inputs(e, seed=seed, integer=integer)
    return evaluate(e, env), env


def test_matmul_matches_numpy():
    out, env = run("C[i,j] = sum[k] A[i,k] * B[k,j]", {"A": (3, 4), "B": (4, 5)})
    np.testing.assert_allclose(out, env["A"] @ env["B"])


def test_conv2d_with_padding_by_out_of_bounds_matches_torch():
    out, env = run("O[n,f,h,w] = sum[c,r,s] I[n,c,h+r-1,w+s-1] * K[f,c,r,s] where h in 0:6, w in 0:5",
                   {"I": (2, 3, 6, 5), "K": (4, 3, 3, 3)})
    ref = torch.nn.functional.conv2d(torch.tensor(env["I"]), torch.tensor(env["K"]), padding=1)
    np.testing.assert_allclose(out, ref.numpy(), rtol=1e-10)


def test_strided_conv_matches_torch():
    out, env = run("O[n,f,h,w] = sum[c,r,s] I[n,c,2*h+r,2*w+s] * K[f,c,r,s] where h in 0:3, w in 0:3",
                   {"I": (1, 2, 7, 7), "K": (3, 2, 3, 3)})
    ref = torch.nn.functional.conv2d(torch.tensor(env["I"]), torch.tensor(env["K"]), stride=2)
    np.testing.assert_allclose(out, ref.numpy(), rtol=1e-10)


def test_nested_scope_with_offset_is_read_at_value_minus_lo():
    out, env = run("S[i] = x[i] * 10 where i in 2:5\nY[j] = S[j] where j in 0:7", {"x": (8,)})
    expected = np.zeros(7)
    expected[2:5] = env["x"][2:5] * 10
    np.testing.assert_allclose(out, expected)


def test_scope_with_offset_has_extent_shape():
    out, _ = run("S[i] = x[i] where i in 2:5", {"x": (8,)})
    assert out.shape == (3,)


def test_max_reduce_matches_numpy():
    out, env = run("M[i] = max[k] X[i,k]", {"X": (4, 6)})
    np.testing.assert_allclose(out, env["X"].max(axis=1))


def test_softmax_matches_torch():
    out, env = run("M[i] = max[k] X[i,k]\nE[i,j] = exp(X[i,j] - M[i])\nS[i] = sum[j] E[i,j]\n"
                   "Y[i,j] = E[i,j] / S[i]", {"X": (4, 6)})
    np.testing.assert_allclose(out, torch.softmax(torch.tensor(env["X"]), dim=1).numpy())


def test_empty_dimension_gives_empty_output():
    out, _ = run("Y[i,j] = X[i,j]", {"X": (0, 3)})
    assert out.shape == (0, 3)


def test_sum_over_empty_range_is_zero():
    out, _ = run("Y[i] = sum[k] X[i,k]", {"X": (2, 0)})
    np.testing.assert_array_equal(out, np.zeros(2))


def test_floor_and_mod_indexing():
    out, env = run("Y[i] = x[i//2] + 10 * x[i%3] where i in 0:8", {"x": (4,)}, integer=True)
    ix = np.arange(8)
    np.testing.assert_allclose(out, env["x"][ix // 2] + 10 * env["x"][ix % 3])


def test_reshape_by_floor_and_mod_matches_numpy():
    out, env = run("Y[i,j] = x[3*i+j] where i in 0:2, j in 0:3", {"x": (6,)})
    np.testing.assert_allclose(out, env["x"].reshape(2, 3))


def test_scalar_output():
    out, env = run("s[] = sum[i] x[i]", {"x": (5,)})
    assert out.shape == () and np.isclose(out, env["x"].sum())


def test_constant_scope_broadcasts_to_its_shape():
    out = evaluate(Scope((Iter("i", 0, 3),), (), parse("c[] = 2").body), {})
    np.testing.assert_array_equal(out, [2.0, 2.0, 2.0])


def test_conv2d_64_channels_32x32_is_fast():
    e = parse("O[n,f,h,w] = sum[c,r,s] I[n,c,h+r-1,w+s-1] * K[f,c,r,s] where h in 0:32, w in 0:32",
              {"I": (1, 64, 32, 32), "K": (64, 64, 3, 3)})
    env = random_inputs(e, integer=False)
    start = time.perf_counter()
    evaluate(e, env)
    assert time.perf_counter() - start < 1.0
