"""Banded products without the dense product: the runtime of G2BMM / GBMM lowerings.

    g2bmm(q, k, w, d, offset): out[.., i, j] = sum_c q[.., i, c] * k[.., i + d*(j - w) + offset, c]
    gbmm(a, v, w, d, offset):  out[.., i, c] = sum_j a[.., i, j] * v[.., i + d*(j - w) + offset, c]

for ``j in 0:2w+1``; rows of ``k`` / ``v`` outside ``0:N`` read 0. Operands are laid out
``(batch.., rows, features)`` (``a``: ``(batch.., rows, 2w+1)``), any number of batch dims.

Two reshapes make it a handful of dense batched matmuls, with no loop over rows:

1. *Dilation* (EinNet's "dilated banded matmul -> dense banded matmul"): with ``i = d*i' + r``
   the rows read, ``d*(i' + j + e) + r``, stay in the residue class ``r`` of ``i``; splitting
   rows by residue (a reshape and a transpose) gives ``d`` interleaved undilated bands.
2. *Blocks*: rows are cut into blocks of ``B`` rows; block ``t`` needs the ``B + 2w``
   consecutive rows of ``k`` from ``t*B + start``: overlapping windows that are one strided
   view of the zero-padded ``k``. One batched matmul gives each block's ``(B, B + 2w)``
   scores, whose band diagonal is again a strided view. GBMM writes ``a`` into that diagonal
   of a zero ``(B, B + 2w)`` block and multiplies it with the windows of ``v``.

Work is ``rows * (B + 2w) * features`` multiply-adds instead of ``rows * N * features``.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def block_rows(band: int, rows: int) -> int:
    """Rows per block: about half the band (1.5x the band's multiply-adds; measured fastest
    on CPU for w = 64), at least 32 so that each block's matmul is not tiny."""
    return max(32, min(band // 2, rows))


def g2bmm(q: torch.Tensor, k: torch.Tensor, w: int, d: int = 1, offset: int = 0,
          block: int | None = None) -> torch.Tensor:
    """``out[.., i, j] = sum_c q[.., i, c] * k[.., i + d*(j - w) + offset, c]``."""
    *batch, rows, feats = q.shape
    band = 2 * w + 1
    q3, k3 = q.reshape(-1, rows, feats), k.reshape(-1, k.shape[-2], feats)
    q3, k3, start = _undilate(q3, k3, d, offset - d * w)
    blk = block or block_rows(band, q3.shape[1])
    q_blocks, k_windows, shape = _blocks(q3, k3, band, start, blk)
    scores = torch.matmul(q_blocks, k_windows.transpose(-1, -2)).contiguous()
    out = _diagonal(scores, band).reshape(shape[0], -1, band)[:, :shape[1]]
    return _redilate(out, d, rows).reshape(*batch, rows, band)


def gbmm(a: torch.Tensor, v: torch.Tensor, w: int, d: int = 1, offset: int = 0,
         block: int | None = None) -> torch.Tensor:
    """``out[.., i, c] = sum_j a[.., i, j] * v[.., i + d*(j - w) + offset, c]``."""
    *batch, rows, band = a.shape
    assert band == 2 * w + 1, f"gbmm: a has {band} band columns, expected 2*{w}+1"
    feats = v.shape[-1]
    a3, v3 = a.reshape(-1, rows, band), v.reshape(-1, v.shape[-2], feats)
    a3, v3, start = _undilate(a3, v3, d, offset - d * w)
    blk = block or block_rows(band, a3.shape[1])
    a_blocks, v_windows, shape = _blocks(a3, v3, band, start, blk)
    dense = a_blocks.new_zeros(a_blocks.shape[:-1] + (v_windows.shape[-2],))
    _diagonal(dense, band).copy_(a_blocks)
    out = torch.matmul(dense, v_windows).reshape(shape[0], -1, feats)[:, :shape[1]]
    return _redilate(out, d, rows).reshape(*batch, rows, feats)


def _undilate(x: torch.Tensor, y: torch.Tensor, d: int, start: int):
    """Rows of ``x`` read rows ``i + d*j + start`` of ``y``; returns ``(x', y', start')`` with
    ``x'`` reading rows ``i' + j + start'`` of ``y'``, residues of ``d`` moved to the batch."""
    if d == 1:
        return x, y, start
    lead = (-start) % d  # zero rows before y so that start becomes a multiple of d
    rows_x = math.ceil(x.shape[1] / d) * d
    rows_y = math.ceil((y.shape[1] + lead) / d) * d
    x = F.pad(x, (0, 0, 0, rows_x - x.shape[1]))
    y = F.pad(y, (0, 0, lead, rows_y - y.shape[1] - lead))

    def split(t):  # (b, d*n, c) -> (b*d, n, c): residue r of the rows becomes batch b*d + r
        b, n, c = t.shape
        return t.reshape(b, n // d, d, c).transpose(1, 2).reshape(b * d, n // d, c)
    return split(x), split(y), (start + lead) // d


def _redilate(out: torch.Tensor, d: int, rows: int) -> torch.Tensor:
    """Inverse of ``_undilate`` on the output rows: ``(b*d, n, c) -> (b, rows, c)``."""
    if d == 1:
        return out
    bd, n, c = out.shape
    return out.reshape(bd // d, d, n, c).transpose(1, 2).reshape(bd // d, n * d, c)[:, :rows]


def _blocks(x: torch.Tensor, y: torch.Tensor, band: int, start: int, blk: int):
    """``x`` as ``(b, T, blk, .)`` row blocks and the ``(b, T, blk + band - 1, c)`` windows of
    ``y`` block ``t`` reads from row ``t*blk + start``; plus ``(b, rows of x)``."""
    b, rows, width = x.shape
    blocks = math.ceil(rows / blk)
    span = blk + band - 1
    x_blocks = F.pad(x, (0, 0, 0, blocks * blk - rows)).reshape(b, blocks, blk, width)
    before = max(0, -start)
    after = max(0, start + before + (blocks - 1) * blk + span - (y.shape[1] + before))
    y = F.pad(y, (0, 0, before, after)) if before or after else y.contiguous()
    sb, sr, sc = y.stride()
    windows = y.as_strided((b, blocks, span, y.shape[2]), (sb, blk * sr, sr, sc),
                           y.storage_offset() + (start + before) * sr)
    return x_blocks, windows, (b, rows)


def _diagonal(blocks: torch.Tensor, band: int) -> torch.Tensor:
    """The band ``[.., r, r + j]`` (``j in 0:band``) of contiguous ``(b, T, blk, span)`` blocks,
    as a ``(b, T, blk, band)`` view."""
    b, t, blk, span = blocks.shape
    assert blocks.is_contiguous()
    return blocks.as_strided((b, t, blk, band), (t * blk * span, blk * span, span + 1, 1),
                             blocks.storage_offset())
