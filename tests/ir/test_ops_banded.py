import pytest
import torch

from ir import ops
from ir.ops import OpError

from op_helpers import check_against_torch, operands


def _band_rows(m: int, n: int, w: int, d: int, j: int):
    """Row ``i + d*(j - w)`` of an n-row operand for each i < m, and whether it exists."""
    rows = torch.arange(m) + d * (j - w)
    return rows.clamp(0, max(n - 1, 0)), (rows >= 0) & (rows < n)


def g2bmm_reference(q, k, w, d):
    b, m, _ = q.shape
    out = torch.zeros(b, m, 2 * w + 1, dtype=q.dtype)
    for j in range(2 * w + 1):
        rows, ok = _band_rows(m, k.shape[1], w, d, j)
        if k.shape[1]:
            out[:, :, j] = (q * k[:, rows, :]).sum(-1) * ok
    return out


def gbmm_reference(a, v, w, d):
    b, m, _ = a.shape
    out = torch.zeros(b, m, v.shape[2], dtype=a.dtype)
    for j in range(2 * w + 1):
        rows, ok = _band_rows(m, v.shape[1], w, d, j)
        if v.shape[1]:
            out += a[:, :, j:j + 1] * v[:, rows, :] * ok[None, :, None]
    return out


BANDS = [  # (B, M, N, C, w, d)
    (2, 7, 7, 3, 1, 1), (1, 9, 9, 4, 2, 2), (2, 5, 8, 2, 3, 1), (1, 8, 5, 3, 1, 3),
    (1, 3, 3, 2, 4, 1),  # band wider than the sequence
    (1, 6, 6, 1, 0, 1), (2, 4, 4, 0, 1, 1), (0, 4, 4, 2, 1, 2),
]


@pytest.mark.parametrize("b,m,n,c,w,d", BANDS, ids=str)
def test_g2bmm_matches_reference(b, m, n, c, w, d):
    check_against_torch(ops.g2bmm, g2bmm_reference, (b, m, c), (b, n, c), w=w, d=d,
                        name="g2bmm")


@pytest.mark.parametrize("b,m,n,c,w,d", BANDS, ids=str)
def test_gbmm_matches_reference(b, m, n, c, w, d):
    check_against_torch(ops.gbmm, gbmm_reference, (b, m, 2 * w + 1), (b, n, c), w=w, d=d,
                        name="gbmm")


def test_references_agree_with_dense_masked_attention():
    q, k = torch.randn(1, 6, 3, dtype=torch.float64), torch.randn(1, 6, 3, dtype=torch.float64)
    dense = q @ k.transpose(1, 2)  # dense[0, i, i + 2*(j - 1)] == band[0, i, j]
    band = g2bmm_reference(q, k, 1, 2)
    assert torch.allclose(band[0, 3, 0], dense[0, 3, 1]) and band[0, 0, 0] == 0


def test_banded_operands_may_be_shifted_scopes():
    check_against_torch(ops.g2bmm, g2bmm_reference, (1, 6, 2), (1, 6, 2), wrap=True, w=2, d=2)


def test_longformer_attention_composes():
    def ir_fn(q, k, v):
        return ops.gbmm(ops.softmax(ops.g2bmm(q, k, 2, 2), -1), v, 2, 2)

    def torch_fn(q, k, v):
        return gbmm_reference(torch.softmax(g2bmm_reference(q, k, 2, 2), -1), v, 2, 2)
    check_against_torch(ir_fn, torch_fn, (1, 7, 3), (1, 7, 3), (1, 7, 4))


def test_g2bmm_is_one_contraction_over_c():
    q, k = operands((1, 6, 3), (1, 6, 3))
    s = ops.g2bmm(q, k, 2, 3)
    assert [it.name for it in s.summation] == ["c"] and s.shape == (1, 6, 5)


@pytest.mark.parametrize("call,shapes,args,message", [
    (ops.g2bmm, [(1, 6, 3), (1, 6, 4)], (1, 1), r"g2bmm: feature sizes differ: dim 2 of q "
                                                r"\(1, 6, 3\) \(3\) != dim 2 of k"),
    (ops.g2bmm, [(2, 6, 3), (1, 6, 3)], (1, 1), r"g2bmm: batch sizes differ: q \(2, 6, 3\) "
                                                r"has 2, k \(1, 6, 3\) has 1"),
    (ops.g2bmm, [(6, 3), (1, 6, 3)], (1, 1), "g2bmm: expected q to be 3-D, got 2-D q"),
    (ops.g2bmm, [(1, 6, 3), (1, 6, 3)], (-1, 1), "g2bmm: w must be an int >= 0, got -1"),
    (ops.g2bmm, [(1, 6, 3), (1, 6, 3)], (1, 0), "g2bmm: d must be an int >= 1, got 0"),
    (ops.gbmm, [(1, 6, 4), (1, 6, 3)], (1, 1), r"gbmm: dim 2 of a \(1, 6, 4\) must be the band "
                                               r"size 2\*w\+1 = 3, got 4"),
    (ops.gbmm, [(1, 6, 3), (1, 6)], (1, 1), "gbmm: expected v to be 3-D"),
])
def test_bad_input_messages(call, shapes, args, message):
    with pytest.raises(OpError, match=message):
        call(*operands(*shapes), *args)
