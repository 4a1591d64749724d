"""``ollie bench --suite kernels``: one-line kernels where Ollie should cost nothing.

Elementwise chains, reductions, matrix-vector products and views at 1024², and a DCGAN
generator at batch 1 (where Inductor runs slower than eager on a CPU). Ollie derives nothing
in most of them, so the suite shows what Ollie costs when it finds nothing: the promise is
torch.compile's speed, or eager's where eager is faster.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ollie.cli.bench_suite import Case, _dim, _inputs


def _square(scale: float, count: int = 2):
    n = 2 * _dim(512, scale, 4)  # even: reshape_sum pairs rows
    return _inputs(*[(n, n)] * count)


def _matrix_vectors(scale: float):
    n = _dim(1024, scale, 8)
    return _inputs((n, n), (n,), (n,))


def _one_liner(name: str, code: str, fn, make=_square) -> Case:
    return Case(name, code, lambda s: (fn, make(s)))


ELEMENTWISE = [
    _one_liner("pow5_chain", "a*a*a*a*a", lambda a, b: a * a * a * a * a),
    _one_liner("add_relu", "relu(a+b)", lambda a, b: (a + b).relu()),
    _one_liner("tanh_mul_add", "tanh(a)*b+1", lambda a, b: torch.tanh(a) * b + 1),
    _one_liner("silu", "a*sigmoid(a)", lambda a, b: a * torch.sigmoid(a)),
    _one_liner("softplus", "log1p(exp(a))", lambda a, b: torch.log1p(torch.exp(a))),
    _one_liner("where", "where(a>0,a,b)", lambda a, b: torch.where(a > 0, a, b)),
    _one_liner("abs_diff_sq", "(a-b).abs()**2", lambda a, b: (a - b).abs() ** 2),
    _one_liner("clamp_mul", "clamp(a)*b", lambda a, b: torch.clamp(a, -1, 1) * b),
    _one_liner("gelu_add", "gelu(a)+b", lambda a, b: F.gelu(a) + b),
    _one_liner("div_abs", "a/(|b|+1)", lambda a, b: a / (b.abs() + 1)),
    _one_liner("square", "pow(a,2)", lambda a, b: torch.pow(a, 2)),
]
REDUCTIONS = [
    _one_liner("add_sum0", "(a+b).sum(0)", lambda a, b: (a + b).sum(0)),
    _one_liner("sum1", "a.sum(1)", lambda a, b: a.sum(1)),
    _one_liner("amax0", "a.amax(0)", lambda a, b: a.amax(0)),
    _one_liner("mean", "a.mean()", lambda a, b: a.mean()),
    _one_liner("rowwise_dot", "(a*b).sum(-1)", lambda a, b: (a * b).sum(-1)),
    _one_liner("logsumexp", "logsumexp(a,1)", lambda a, b: torch.logsumexp(a, 1)),
    _one_liner("softmax", "softmax(a,-1)", lambda a, b: torch.softmax(a, -1)),
    _one_liner("var0", "var(a,0)", lambda a, b: torch.var(a, 0)),
    _one_liner("row_norm", "norm(a,dim=1)", lambda a, b: a.norm(dim=1)),
    _one_liner("nested_sum", "sum(sum(a,0))", lambda a, b: a.sum(0).sum(0)),
]
MATRIX_VECTOR = [
    _one_liner("matvec", "a@x", lambda a, x, y: a @ x, _matrix_vectors),
    _one_liner("matvec_t", "a.T@x", lambda a, x, y: a.T @ x, _matrix_vectors),
    _one_liner("bilinear", "x@a@y", lambda a, x, y: x @ a @ y, _matrix_vectors),
    _one_liner("matvec_sum", "(a@x).sum()", lambda a, x, y: (a @ x).sum(), _matrix_vectors),
    _one_liner("outer_sum", "outer(x,y).sum(0)", lambda a, x, y: torch.outer(x, y).sum(0), _matrix_vectors),
    _one_liner("dot", "dot(x,y)", lambda a, x, y: torch.dot(x, y), _matrix_vectors),
    _one_liner("matvec_add", "a@x+y", lambda a, x, y: a @ x + y, _matrix_vectors),
]
VIEWS = [
    _one_liner("view", "a.view(-1)", lambda a, b: a.view(-1)),
    _one_liner("transpose_copy", "a.t().contiguous()", lambda a, b: a.t().contiguous()),
    _one_liner("strided_add", "a[::2]+1", lambda a, b: a[::2] + 1),
    _one_liner("cat", "cat([a,b])", lambda a, b: torch.cat([a, b])),
    _one_liner("reshape_sum", "reshape(a).sum(1)", lambda a, b: a.reshape(-1, 2 * a.shape[1]).sum(1)),
]


def dcgan_generator(scale: float = 1.0) -> torch.nn.Module:
    """DCGAN's generator (Radford et al.): transposed convolutions with batch norm and ReLU,
    100-dimensional noise to a 64×64 RGB image."""
    c = _dim(64, scale, 4)
    layers, channels = [], [100, 8 * c, 4 * c, 2 * c, c]
    for k, (cin, cout) in enumerate(zip(channels, channels[1:])):
        layers += [torch.nn.ConvTranspose2d(cin, cout, 4, 1 if k == 0 else 2, 0 if k == 0 else 1,
                                            bias=False), torch.nn.BatchNorm2d(cout),
                   torch.nn.ReLU()]
    layers += [torch.nn.ConvTranspose2d(c, 3, 4, 2, 1, bias=False), torch.nn.Tanh()]
    torch.manual_seed(0)
    return torch.nn.Sequential(*layers).eval()


def _dcgan(scale: float):
    generator = dcgan_generator(scale)
    return (lambda z: generator(z)), _inputs((1, 100, 1, 1))


CASES = ELEMENTWISE + REDUCTIONS + MATRIX_VECTOR + VIEWS + [
    Case("dcgan_generator", "DCGAN generator, batch 1, eval", _dcgan)]
BY_NAME = {c.name: c for c in CASES}
