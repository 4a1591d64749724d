"""Ollie's own operators, registered with ``torch.library`` as ``ollie::`` custom ops.

Only operators with no ATen equivalent are registered: the banded products G2BMM and GBMM
(``codegen.banded``). A rewritten graph then holds one ``ollie.g2bmm`` node that Inductor
calls, that AOTAutograd's cache keeps and that ``torch.export`` and AOTInductor carry, instead
of the pads, strided windows and diagonals of its lowering. The other eOperators (gathers,
re-indexings, padding, offset-reduces) lower to ATen views and reads that Inductor fuses
into their neighbours; an opaque op there would only force a copy.

Each op has a fake (meta) implementation, so graphs holding it trace with fake and symbolic
sizes, and returns a contiguous tensor (the fake one says so). Its kernel is the torch
lowering on every device; no autograd formula is registered, because Ollie rewrites the
graphs AOTAutograd has already differentiated.

    g2bmm(q, k, w, d, offset): out[.., i, j] = sum_c q[.., i, c] * k[.., i + d*(j - w) + offset, c]
    gbmm(a, v, w, d, offset):  out[.., i, c] = sum_j a[.., i, j] * v[.., i + d*(j - w) + offset, c]
"""
from __future__ import annotations

import torch

from codegen import banded


@torch.library.custom_op("ollie::g2bmm", mutates_args=())
def g2bmm(q: torch.Tensor, k: torch.Tensor, w: int, d: int = 1, offset: int = 0) -> torch.Tensor:
    """Banded Q·Kᵀ: ``(batch.., rows, feats) x (batch.., rows_k, feats) -> (batch.., rows, 2w+1)``."""
    return banded.g2bmm(q, k, w, d, offset).contiguous()  # a custom op's layout is fixed


@g2bmm.register_fake
def _(q, k, w, d=1, offset=0):
    return q.new_empty((*q.shape[:-1], 2 * w + 1))


@torch.library.custom_op("ollie::gbmm", mutates_args=())
def gbmm(a: torch.Tensor, v: torch.Tensor, w: int, d: int = 1, offset: int = 0) -> torch.Tensor:
    """Banded A·V: ``(batch.., rows, 2w+1) x (batch.., rows_v, feats) -> (batch.., rows, feats)``."""
    return banded.gbmm(a, v, w, d, offset).contiguous()


@gbmm.register_fake
def _(a, v, w, d=1, offset=0):
    torch._check(a.shape[-1] == 2 * w + 1,
                 lambda: f"ollie::gbmm: a has {a.shape[-1]} band columns, expected 2*{w}+1")
    return a.new_empty((*a.shape[:-1], v.shape[-1]))
