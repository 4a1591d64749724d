"""The built-in benchmark cases: ordinary PyTorch functions where the algebra matters.

Each case makes its function and inputs at a size ``scale`` (1.0: the sizes below; tests use a
small scale). Sizes are chosen so that the whole suite, torch.compile's compile time
included, runs in a few minutes on two CPU cores.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Case:
    name: str
    description: str
    make: Callable[[float], tuple[Callable, tuple]]  # scale -> (function, inputs)


class AsModule(torch.nn.Module):
    """A case's function as a module (what torch.export takes); the modules its closure holds
    become its submodules, so their weights are the program's weights."""

    def __init__(self, fn: Callable):
        super().__init__()
        self.fn = fn
        for i, cell in enumerate(getattr(fn, "__closure__", None) or ()):
            if isinstance(cell.cell_contents, torch.nn.Module):
                self.add_module(f"held{i}", cell.cell_contents)

    def forward(self, *args):
        return self.fn(*args)


def as_module(fn: Callable) -> torch.nn.Module:
    return fn if isinstance(fn, torch.nn.Module) else AsModule(fn)


def _dim(n: int, scale: float, least: int = 1) -> int:
    return max(least, round(n * scale))


def _randn(*shape: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


def _inputs(*shapes) -> tuple[torch.Tensor, ...]:
    return tuple(_randn(*s, seed=k) for k, s in enumerate(shapes))


# -- the functions (module level, so torch.fx and torch.compile see plain code) -------------
def matmul_chain(a, b, c):
    return (a @ b) @ c


def einsum4(a, b, c, d):
    return torch.einsum("ij,jk,kl,lm->im", a, b, c, d)


def longformer_qk(q, k, w: int):
    # Each query position i against key positions i-w .. i+w: pad, take windows, contract.
    windows = F.pad(k, (0, 0, w, w)).unfold(1, 2 * w + 1, 1)  # (heads, seq, d, 2w+1)
    return torch.einsum("hsd,hsdw->hsw", q, windows)


def matmul_sum(x, w):
    return (x @ w).sum(0)


def running_sum_last(x, w):
    return torch.cumsum(x @ w, 0)[-1]


def attention(q, k, v):
    return torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ v


def conv3x3(x, w):
    return F.conv2d(x, w, padding=1)


def conv_transpose(x, w):
    return F.conv_transpose2d(x, w, stride=2, padding=1)


def dilated_conv(x, w):
    return F.conv2d(x, w, padding=2, dilation=2)


# -- research-code algebra (spellings as found in the wild) -----------------------------------
def trace_product(a, b):
    return torch.trace(a @ b)


def diag_product(a, b):
    return torch.diagonal(a @ b.T) * 2


def pairwise_sqdist(x, y):
    return ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1)


def kron_matvec(p, q, v):
    return torch.kron(p, q) @ v


def common_factor(a, b, c):
    return a @ b + c @ b


def stack_sum(x, w1, w2, w3):
    return torch.stack([x @ w1, x @ w2, x @ w3]).sum(0)


def stack_amax(x, w1, w2, w3):
    return torch.stack([x @ w1, x @ w2, x @ w3]).amax(0)


def row_loop(x, w):
    return torch.stack([torch.tanh(x[i] @ w) for i in range(x.shape[0])])


def head_loop(q, k, v):
    return torch.cat([torch.softmax(q[h] @ k[h].T / 8, -1) @ v[h] for h in range(q.shape[0])],
                     -1)


def outer_product_loop(u, v):
    total = torch.zeros(u.shape[1], v.shape[1])
    for i in range(u.shape[0]):
        total = total + torch.outer(u[i], v[i])
    return total


def column_loop(x, w):
    total = torch.zeros(x.shape[0], w.shape[1])
    for i in range(w.shape[0]):
        total = total + x[:, i:i + 1] * w[i]
    return total


def bilinear_sum_loop(x, w, y):
    return sum(x[i] @ w @ y[i] for i in range(x.shape[0]))


def product_sqnorm(a, b):
    return (a @ b).pow(2).sum()


def product_norm_squared(a, b):
    return torch.linalg.norm(a @ b) ** 2


def khatri_rao_gram(a, b):
    k = (a[:, None, :] * b[None, :, :]).reshape(-1, a.shape[1])
    return k.T @ k


def khatri_rao_gram_einsum(a, b):
    k = torch.einsum("ir,jr->ijr", a, b).flatten(0, 1)
    return torch.einsum("nr,ns->rs", k, k)


def broadcast_tanh_sum(x, y):
    # Nothing for Ollie to derive (tanh blocks the algebra): Inductor's fused loop must stay.
    return torch.tanh(x[:, None, :] * y[None, :, :] + 1).sum(-1)


# -- sizes ------------------------------------------------------------------------------------
def _matmul_chain(s):
    return matmul_chain, _inputs((_dim(512, s), _dim(1024, s)), (_dim(1024, s), _dim(1024, s)),
                                 (_dim(1024, s), _dim(16, s)))


def _einsum4(s):
    i, j, m = _dim(256, s), _dim(512, s), _dim(8, s)
    return einsum4, _inputs((i, j), (j, j), (j, j), (j, m))


def _longformer(s):
    heads, seq, d, w = _dim(4, s), _dim(512, s, 8), _dim(64, s), _dim(32, s)
    q, k = _inputs((heads, seq, d), (heads, seq, d))
    return (lambda q, k: longformer_qk(q, k, w)), (q, k)


def _matmul_sum(s):
    return matmul_sum, _inputs((_dim(2048, s), _dim(512, s)), (_dim(512, s), _dim(512, s)))


def _running_sum_last(s):
    return running_sum_last, _inputs((_dim(2048, s), _dim(256, s)), (_dim(256, s), _dim(256, s)))


def _attention(s):
    shape = (_dim(4, s), _dim(256, s), _dim(64, s))
    return attention, _inputs(shape, shape, shape)


def _conv3x3(s):
    c, hw = _dim(64, s), _dim(56, s, 3)
    return conv3x3, _inputs((1, c, hw, hw), (c, c, 3, 3))


def _conv_transpose(s):
    c, hw = _dim(64, s), _dim(28, s, 2)
    return conv_transpose, _inputs((1, c, hw, hw), (c, _dim(32, s), 4, 4))


def _dilated(s):
    c, hw = _dim(32, s), _dim(56, s, 5)
    return dilated_conv, _inputs((1, c, hw, hw), (c, c, 3, 3))


def _chunked_band(s):
    from ollie.cli.bench_gpu import g2bmm_fn
    heads, seq, feats, w = _dim(4, s), _dim(1024, s, 16), _dim(64, s), _dim(64, s, 2)
    return g2bmm_fn(w, 4), _inputs((heads, seq, feats), (heads, seq, feats))


def _chunked_band_pv(s):
    from ollie.cli.bench_gpu import gbmm_fn
    heads, seq, feats, w = _dim(4, s), _dim(1024, s, 16), _dim(64, s), _dim(64, s, 2)
    return gbmm_fn(w, 4), _inputs((heads, seq, 2 * w + 1), (heads, seq, feats))


def _square_pair(s):
    n = _dim(1024, s, 2)
    return _inputs((n, n), (n, n))


def _pairwise(s):
    return pairwise_sqdist, _inputs((_dim(1024, s, 2), _dim(64, s)), (_dim(1024, s, 2),
                                                                      _dim(64, s)))


def _kron(s):
    m = _dim(64, s, 2)
    return kron_matvec, _inputs((m, m), (m, m), (m * m,))


def _common_factor(s):
    n = _dim(512, s, 2)
    return common_factor, _inputs((n, n), (n, n), (n, n))


def _stack_sum(s):
    n = _dim(512, s, 2)
    return stack_sum, _inputs((n, n), (n, n), (n, n), (n, n))


def _stack_amax(s):
    n = _dim(512, s, 2)
    return stack_amax, _inputs((n, n), (n, n), (n, n), (n, n))


def _row_loop(s):
    return row_loop, _inputs((_dim(32, s, 2), _dim(256, s)), (_dim(256, s), _dim(256, s)))


def _head_loop(s):
    shape = (_dim(8, s, 2), _dim(128, s, 2), _dim(32, s, 2))
    return head_loop, _inputs(shape, shape, shape)


def _outer_product_loop(s):
    n = _dim(384, s, 2)
    return outer_product_loop, _inputs((_dim(32, s, 2), n), (_dim(32, s, 2), n))


def _column_loop(s):
    k = _dim(32, s, 2)
    return column_loop, _inputs((_dim(512, s, 2), k), (k, _dim(256, s, 2)))


def _bilinear_sum_loop(s):
    n = _dim(256, s, 2)
    return bilinear_sum_loop, _inputs((_dim(32, s, 2), n), (n, n), (_dim(32, s, 2), n))


def _thin_product(fn):
    def make(s):
        n, r = _dim(2048, s, 2), _dim(16, s)
        return fn, _inputs((n, r), (r, n))
    return make


def _khatri_rao(fn):
    def make(s):
        r = _dim(32, s)
        return fn, _inputs((_dim(128, s, 2), r), (_dim(96, s, 2), r))
    return make


def _broadcast_tanh_sum(s):
    n, d = _dim(256, s, 2), _dim(64, s)
    return broadcast_tanh_sum, _inputs((n, d), (n, d))


CASES = [
    Case("matmul_chain", "(a @ b) @ c, thin last factor", _matmul_chain),
    Case("einsum4", "einsum ij,jk,kl,lm->im, skewed sizes", _einsum4),
    Case("longformer_qk", "banded Q·Kᵀ via pad + unfold + einsum", _longformer),
    Case("chunked_g2bmm", "dilated banded Q·Kᵀ, 64 offsets per einsum over strided windows",
         _chunked_band),
    Case("chunked_gbmm", "dilated banded P·V, 64 offsets per einsum over strided windows",
         _chunked_band_pv),
    Case("matmul_sum", "(x @ w).sum(0)", _matmul_sum),
    Case("running_sum_last", "torch.cumsum(x @ w, 0)[-1]: a running sum's last entry",
         _running_sum_last),
    Case("attention", "softmax(q @ kᵀ) @ v", _attention),
    Case("conv3x3", "conv2d 3×3, padding 1", _conv3x3),
    Case("conv_transpose", "conv_transpose2d 4×4, stride 2", _conv_transpose),
    Case("dilated_conv", "conv2d 3×3, dilation 2", _dilated),
    Case("trace_product", "torch.trace(a @ b)", lambda s: (trace_product, _square_pair(s))),
    Case("diag_product", "torch.diagonal(a @ b.T) * 2", lambda s: (diag_product,
                                                                    _square_pair(s))),
    Case("pairwise_sqdist", "((x[:, None] - y[None]) ** 2).sum(-1)", _pairwise),
    Case("kron_matvec", "torch.kron(p, q) @ v", _kron),
    Case("common_factor", "a @ b + c @ b", _common_factor),
    Case("stack_sum", "torch.stack([x @ w1, x @ w2, x @ w3]).sum(0)", _stack_sum),
    Case("stack_amax", "torch.stack([x @ w1, x @ w2, x @ w3]).amax(0)", _stack_amax),
    Case("row_loop", "torch.stack([tanh(x[i] @ w) for i in rows])", _row_loop),
    Case("head_loop", "attention per head in a Python loop, the heads concatenated",
         _head_loop),
    Case("outer_product_loop", "a Python loop adding torch.outer(u[i], v[i]) over the rows",
         _outer_product_loop),
    Case("column_loop", "a Python loop adding x[:, i:i+1] * w[i] over the columns",
         _column_loop),
    Case("bilinear_sum_loop", "sum(x[i] @ w @ y[i] for i in rows)", _bilinear_sum_loop),
    Case("product_sqnorm", "(a @ b).pow(2).sum(), thin inner dimension",
         _thin_product(product_sqnorm)),
    Case("product_norm_squared", "torch.linalg.norm(a @ b) ** 2, thin inner dimension",
         _thin_product(product_norm_squared)),
    Case("khatri_rao_gram", "k.T @ k, k the Khatri-Rao product of a and b",
         _khatri_rao(khatri_rao_gram)),
    Case("khatri_rao_gram_einsum", "the same Gram, spelled with einsum and flatten",
         _khatri_rao(khatri_rao_gram_einsum)),
    Case("broadcast_tanh_sum", "tanh(x[:, None] * y[None] + 1).sum(-1): left to Inductor",
         _broadcast_tanh_sum),
]

BY_NAME = {c.name: c for c in CASES}
