"""Model fragments for ``ollie bench --suite models`` that carry a graph substitution
(``ollie.capture.graph_rules``): two spellings of each family, written here."""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class QKVLinears(nn.Module):
    """Three projections of one input (BERT's Q, K, V): one product of concatenated weights."""

    def __init__(self, d=256):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        return self.q(x) * self.k(x) + self.v(x)


class GateProducts(nn.Module):
    """An LSTM cell's four gate products of one input, written as matmuls of parameters."""

    def __init__(self, d=64):
        super().__init__()
        self.w = nn.ParameterList(nn.Parameter(torch.randn(d, d) / 8) for _ in range(4))

    def forward(self, x):
        i, f, g, o = (x @ w for w in self.w)
        return torch.sigmoid(o) * torch.tanh(torch.sigmoid(f) + torch.sigmoid(i) * torch.tanh(g))


class Inception1x1(nn.Module):
    """Inception-style 1×1 branches of one input."""

    def __init__(self, c=32):
        super().__init__()
        self.branches = nn.ModuleList(nn.Conv2d(c, c // 2, 1) for _ in range(4))

    def forward(self, x):
        return torch.cat([F.relu(b(x)) for b in self.branches], 1)


class ConvBranches(nn.Module):
    """Two 3×3 convolutions of one input, summed (a multi-branch block)."""

    def __init__(self, c=64):
        super().__init__()
        self.a, self.b = nn.Conv2d(c, c, 3, padding=1), nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return F.relu(self.a(x) + self.b(x))


class ConvDifference(nn.Module):
    """A difference of two 5×5 filters of one input, without biases (a learned
    difference-of-Gaussians edge filter): one convolution by the filters' difference."""

    def __init__(self, c=32):
        super().__init__()
        self.a = nn.Parameter(torch.randn(c, c, 5, 5) / (5 * math.sqrt(c)))
        self.b = nn.Parameter(torch.randn(c, c, 5, 5) / (5 * math.sqrt(c)))

    def forward(self, x):
        return torch.tanh(F.conv2d(x, self.a, padding=2) - F.conv2d(x, self.b, padding=2))


class ConvLayersDifference(nn.Module):
    """The difference written with two ``nn.Conv2d`` layers, biases and all: one convolution
    by the filters' difference, adding the biases' difference."""

    def __init__(self, c=32):
        super().__init__()
        self.a, self.b = nn.Conv2d(c, c, 5, padding=2), nn.Conv2d(c, c, 5, padding=2)

    def forward(self, x):
        return torch.tanh(self.a(x) - self.b(x))


class RepVGGBlock(nn.Module):
    """RepVGG's training-time block: 3×3 and 1×1 convolutions with batch norms, and the
    identity, summed."""

    def __init__(self, c=64):
        super().__init__()
        self.a, self.b = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.Conv2d(c, c, 1, bias=False)
        self.bn_a, self.bn_b = nn.BatchNorm2d(c), nn.BatchNorm2d(c)
        for bn in (self.bn_a, self.bn_b):
            bn.running_mean.uniform_(-1, 1), bn.running_var.uniform_(0.5, 2)

    def forward(self, x):
        return F.relu(self.bn_a(self.a(x)) + self.bn_b(self.b(x)) + x)


class SlicesOneWeight(nn.Module):
    """One linear map applied to every slice of a batch, in a Python loop."""

    def __init__(self, d=64):
        super().__init__()
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        return torch.stack([torch.relu(self.proj(s)) for s in x.unbind(0)])


class SplitOneWeight(nn.Module):
    """The same, spelled with ``torch.split`` and a matmul."""

    def __init__(self, d=64):
        super().__init__()
        self.w = nn.Parameter(torch.randn(d, d) / 8)

    def forward(self, x):
        return torch.cat([torch.tanh(p @ self.w) for p in torch.split(x, 4)], 0)


class GroupConvLoop(nn.Module):
    """A Python loop over channel groups (``chunk``), each with its own convolution."""

    def __init__(self, c=64, groups=8):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(c // groups, c // groups, 3, padding=1)
                                   for _ in range(groups))

    def forward(self, x):
        pieces = x.chunk(len(self.convs), 1)
        return F.relu(torch.cat([conv(p) for conv, p in zip(self.convs, pieces)], 1))


class GroupConvSlices(nn.Module):
    """The same loop, spelled with channel slices."""

    def __init__(self, c=64, groups=8):
        super().__init__()
        self.width = c // groups
        self.convs = nn.ModuleList(nn.Conv2d(self.width, self.width, 3, padding=1, bias=False)
                                   for _ in range(groups))

    def forward(self, x):
        w = self.width
        return torch.cat([conv(x[:, i * w:(i + 1) * w]) for i, conv in enumerate(self.convs)], 1)


class GroupLinears(nn.Module):
    """A linear layer per column group of the features (``chunk``), concatenated."""

    def __init__(self, d=256, groups=8):
        super().__init__()
        self.linears = nn.ModuleList(nn.Linear(d // groups, d // groups) for _ in range(groups))

    def forward(self, x):
        pieces = x.chunk(len(self.linears), -1)
        return F.gelu(torch.cat([lin(p) for lin, p in zip(self.linears, pieces)], -1))


class GroupMatmulSlices(nn.Module):
    """The same, spelled with column slices and one stacked weight tensor."""

    def __init__(self, d=256, groups=8):
        super().__init__()
        self.width = d // groups
        self.w = nn.Parameter(torch.randn(groups, self.width, self.width) / self.width ** 0.5)

    def forward(self, x):
        w = self.width
        return torch.cat([torch.relu(x[:, i * w:(i + 1) * w] @ self.w[i])
                          for i in range(self.w.shape[0])], -1)


class TimeMajorRNN(nn.Module):
    """An Elman RNN over a time-major sequence, stepped with ``unbind``."""

    def __init__(self, d_in=64, d=64):
        super().__init__()
        self.w, self.u = nn.Linear(d_in, d), nn.Linear(d, d, bias=False)

    def forward(self, xs):
        h = torch.zeros(xs.shape[1], self.u.in_features)
        for x in xs.unbind(0):
            h = torch.tanh(self.w(x) + self.u(h))
        return h


class LSTMCellLinears(nn.Module):
    """An LSTM cell as written by hand: one Linear of the input, one of the state."""

    def __init__(self, d_in=256, d=256):
        super().__init__()
        self.ih, self.hh = nn.Linear(d_in, 4 * d), nn.Linear(d, 4 * d)

    def forward(self, x, h, c):
        i, f, g, o = (self.ih(x) + self.hh(h)).chunk(4, 1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c


class ElmanCellMatmuls(nn.Module):
    """One step of an Elman RNN, spelled with matmuls of parameters."""

    def __init__(self, d_in=256, d=512):
        super().__init__()
        self.w = nn.Parameter(torch.randn(d_in, d) / d_in ** 0.5)
        self.u = nn.Parameter(torch.randn(d, d) / d ** 0.5)
        self.b = nn.Parameter(torch.zeros(d))

    def forward(self, x, h):
        return torch.tanh(x @ self.w + h @ self.u + self.b)


class LinearLayersDifference(nn.Module):
    """Two ``nn.Linear`` layers of one input, subtracted: one layer by the weights' and the
    biases' differences."""

    def __init__(self, d=512):
        super().__init__()
        self.a, self.b = nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        return torch.tanh(self.a(x) - self.b(x))


class ParallelLinears(nn.Module):
    """Two linear branches of one input, summed (a multi-branch block, RepVGG-style)."""

    def __init__(self, d=512):
        super().__init__()
        self.a, self.b = nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        return torch.relu(self.a(x) + self.b(x))


class ParallelMatmuls(nn.Module):
    """Three branches of one input, spelled as matmuls of parameters."""

    def __init__(self, d=256):
        super().__init__()
        self.w = nn.ParameterList(nn.Parameter(torch.randn(d, d) / d ** 0.5) for _ in range(3))

    def forward(self, x):
        return x @ self.w[0] + x @ self.w[1] + x @ self.w[2]


class WeightChain(nn.Module):
    """A product by three parameters in a row, spelled as matmuls: ``x @ (A @ B @ C)``."""

    def __init__(self, d=256):
        super().__init__()
        self.w = nn.ParameterList(nn.Parameter(torch.randn(d, d) / d ** 0.5) for _ in range(3))

    def forward(self, x):
        return torch.tanh(x @ self.w[0] @ self.w[1] @ self.w[2])


class LoRALinear(nn.Module):
    """A linear layer with a low-rank adapter, peft's spelling on a batch of sequences:
    ``base(x) + lora_B(lora_A(x)) * scaling``; in inference the adapter merges into the
    base weight (a regrouping and a shared-operand rule, judged as one)."""

    def __init__(self, d=256, rank=16):
        super().__init__()
        self.base = nn.Linear(d, d)
        self.lora_a = nn.Linear(d, rank, bias=False)
        self.lora_b = nn.Linear(rank, d, bias=False)
        self.scaling = 2.0

    def forward(self, x):
        return self.base(x) + self.lora_b(self.lora_a(x)) * self.scaling


class LowRankCorrection(nn.Module):
    """A weight minus a low-rank correction, spelled as matmuls: ``x @ W - (x @ U) @ V``."""

    def __init__(self, d=256, rank=8):
        super().__init__()
        self.w = nn.Parameter(torch.randn(d, d) / d ** 0.5)
        self.u = nn.Parameter(torch.randn(d, rank) / d ** 0.5)
        self.v = nn.Parameter(torch.randn(rank, d) / rank ** 0.5)

    def forward(self, x):
        return torch.relu(x @ self.w - x @ self.u @ self.v)


class RowColumnSums(nn.Module):
    """A costly elementwise value summed over rows and over columns: Inductor computes it
    again in each sum; Korch's program writes it once (``orchestrate``)."""

    def forward(self, x):
        y = torch.sin(x) * torch.cos(2 * x)
        return torch.cat([y.sum(0), y.sum(1)])


class DoublyNormalised(nn.Module):
    """An elementwise value divided by its row sums and by its column sums (one step of a
    Sinkhorn-style normalisation): read by two reductions and the output's loop."""

    def forward(self, x):
        e = torch.cos(x) ** 2 + 1
        return e / e.sum(1, keepdim=True) + e / e.sum(0, keepdim=True)


class LastPositionsLogits(nn.Module):
    """A language-model head over every position of a sequence, of which the last 4 are read
    (decoding spelled as the whole sequence's logits, then a slice)."""

    def __init__(self, d=256, vocab=2048):
        super().__init__()
        self.head = nn.Parameter(torch.randn(d, vocab) / d ** 0.5)

    def forward(self, h):
        return torch.log_softmax((h @ self.head)[-4:], dim=-1)


class FirstOutputs(nn.Module):
    """A Linear layer of which the first 64 outputs are read (a shared projection, sliced)."""

    def __init__(self, d=512, out=2048):
        super().__init__()
        self.proj = nn.Linear(d, out, bias=False)

    def forward(self, x):
        return torch.relu(self.proj(x)[:, :64])
