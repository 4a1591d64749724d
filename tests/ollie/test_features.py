"""Features of candidate programs: fixed length, finite, and telling kinds of work apart."""
import numpy as np
import pytest

from ir import Tensor, ops, sub_scopes
from ollie.cost.features import (
    FEATURE_NAMES, kinds, program_features, scope_features, standalone,
)

A, B, C = Tensor("a", (64, 128)), Tensor("b", (128, 256)), Tensor("c", (256, 32))
X, W = Tensor("x", (2, 8, 16, 16)), Tensor("w", (4, 8, 3, 3))

PROGRAMS = {
    "matmul": ops.matmul(A, B),
    "chain": ops.matmul(ops.matmul(A, B), C),
    "relu": ops.relu(A),
    "add": ops.add(A, A),
    "sum": ops.sum(A, 1),
    "softmax": ops.softmax(A, dim=1),
    "conv": ops.conv2d(X, W, padding=1),
    "grouped_conv": ops.conv2d(X, Tensor("wg", (4, 4, 3, 3)), groups=2),
    "pad": ops.pad(A, (1, 1)),
    "reshape": ops.reshape(A, (128, 64)),
    "einsum": ops.einsum("bij,bjk->bik", Tensor("p", (2, 3, 4)), Tensor("q", (2, 4, 5))),
    "g2bmm": ops.g2bmm(Tensor("q", (1, 32, 8)), Tensor("k", (1, 32, 8)), 2),
}


def feature(program, name):
    return program_features(program)[FEATURE_NAMES.index(name)]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_fixed_length_and_finite(name):
    v = program_features(PROGRAMS[name])
    assert v.shape == (len(FEATURE_NAMES),) and np.isfinite(v).all()


def test_kinds_from_structure():
    assert kinds(PROGRAMS["matmul"]) == ["contraction"]
    assert kinds(PROGRAMS["conv"]) == ["contraction"]
    assert kinds(PROGRAMS["relu"]) == ["elementwise"]
    assert kinds(PROGRAMS["sum"]) == ["reduction"]
    assert kinds(PROGRAMS["pad"]) == ["gather"]
    assert kinds(PROGRAMS["reshape"]) == ["gather"]
    assert sorted(set(kinds(PROGRAMS["softmax"]))) == ["elementwise", "reduction"]


def test_matmul_and_elementwise_differ():
    mm, ew = program_features(PROGRAMS["matmul"]), program_features(PROGRAMS["add"])
    assert not np.allclose(mm, ew)
    assert feature(PROGRAMS["matmul"], "contraction_count") == 1
    assert feature(PROGRAMS["add"], "elementwise_count") == 1
    assert feature(PROGRAMS["matmul"], "log_intensity") > feature(PROGRAMS["add"], "log_intensity")


def test_flops_and_bytes_of_a_matmul():
    f = scope_features(PROGRAMS["matmul"])
    assert f.flops == 2 * 64 * 128 * 256
    assert f.bytes_read == 4 * (64 * 128 + 128 * 256)
    assert f.bytes_written == 4 * 64 * 256


def test_program_aggregates_scopes():
    chain = PROGRAMS["chain"]
    assert feature(chain, "n_scopes") == 2
    assert feature(chain, "log_intermediate_bytes") == pytest.approx(np.log2(1 + 4 * 64 * 256))
    assert feature(chain, "log_flops") > feature(PROGRAMS["matmul"], "log_flops")


def test_strides_of_the_innermost_iterator():
    # relu reads a[i, j] along j: contiguous; the transpose reads a[j, i]: strided
    assert feature(PROGRAMS["relu"], "contiguous_share") == 1
    transposed = ops.mul(ops.transpose(A, 0, 1), 1.0)
    assert feature(transposed, "strided_share") > 0
    assert feature(PROGRAMS["reshape"], "irregular_share") == 1


def test_grouped_conv_gathers_its_input():
    assert feature(PROGRAMS["grouped_conv"], "log_gather_space") > 0
    assert feature(PROGRAMS["conv"], "log_gather_space") == 0


def test_standalone_scope_matches_own_only_features():
    for s in sub_scopes(PROGRAMS["softmax"]):
        alone = standalone(s)
        assert len(sub_scopes(alone)) == 1
        np.testing.assert_allclose(program_features(alone), program_features(s, own_only=True))
