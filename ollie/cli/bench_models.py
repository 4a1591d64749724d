"""``ollie bench --suite models``: small real models, written here (no torchvision).

A ResNet-18 with batch norm, a MobileNet-v3-like network (depthwise convolutions,
squeeze-and-excitation, hard-swish), a ResNeXt block (grouped convolution), a stack of BERT
layers, a GPT-2 block, an MLP-Mixer, an unrolled RNN cell (each in eval mode at batch 1) and a
low-rank projection (two linear layers, batch 256), with random weights. They show what Ollie does on ordinary model code: its speed against
eager and torch.compile, and (``--first-call``) its compile time against torch.compile's,
each in a fresh process with fresh caches.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ollie.cli.bench_suite import Case, _inputs


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.down is None else self.down(x)))


class ResNet18(nn.Module):
    def __init__(self, classes=10, width=16):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU())
        layers, cin = [], width
        for i, blocks in enumerate((2, 2, 2, 2)):
            cout = width * 2 ** i
            for j in range(blocks):
                layers.append(BasicBlock(cin, cout, 2 if (j == 0 and i > 0) else 1))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class InvertedResidual(nn.Module):
    """MobileNet-v3's block: expand (1×1), depthwise k×k, squeeze-and-excite, project."""

    def __init__(self, cin, hidden, cout, kernel, stride):
        super().__init__()
        self.expand = nn.Sequential(nn.Conv2d(cin, hidden, 1, bias=False),
                                    nn.BatchNorm2d(hidden), nn.Hardswish())
        self.depthwise = nn.Sequential(
            nn.Conv2d(hidden, hidden, kernel, stride, kernel // 2, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden), nn.Hardswish())
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(hidden, hidden // 4, 1),
                                nn.ReLU(), nn.Conv2d(hidden // 4, hidden, 1), nn.Hardsigmoid())
        self.project = nn.Sequential(nn.Conv2d(hidden, cout, 1, bias=False),
                                     nn.BatchNorm2d(cout))
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        h = self.depthwise(self.expand(x))
        h = self.project(h * self.se(h))
        return x + h if self.residual else h


class MobileNetV3Like(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16),
                                  nn.Hardswish())
        spec = [(16, 64, 24, 3, 2), (24, 72, 24, 3, 1), (24, 96, 40, 5, 2),
                (40, 120, 40, 5, 1), (40, 240, 80, 3, 2), (80, 200, 80, 3, 1)]
        self.blocks = nn.Sequential(*[InvertedResidual(*s) for s in spec])
        self.head = nn.Sequential(nn.Conv2d(80, 256, 1), nn.Hardswish(),
                                  nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, classes))

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)))


class ResNeXtBlock(nn.Module):
    """A ResNeXt bottleneck: 1×1 reduce, grouped 3×3 (32 groups), 1×1 expand, with BN."""

    def __init__(self, channels=256, width=128, groups=32):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(channels, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, width, 3, 1, 1, groups=groups, bias=False), nn.BatchNorm2d(width),
            nn.ReLU(), nn.Conv2d(width, channels, 1, bias=False), nn.BatchNorm2d(channels))

    def forward(self, x):
        return F.relu(x + self.body(x))


class BertLayer(nn.Module):
    """Post-norm encoder layer: separate Q, K, V projections of one input, as in BERT."""

    def __init__(self, d=256, heads=4, hidden=1024):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.out = nn.Linear(d, d)
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff1, self.ff2 = nn.Linear(d, hidden), nn.Linear(hidden, d)

    def forward(self, x):
        b, n, d = x.shape
        h = self.heads

        def split(t):
            return t.view(b, n, h, d // h).transpose(1, 2)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // h), dim=-1) @ v
        x = self.norm1(x + self.out(att.transpose(1, 2).reshape(b, n, d)))
        return self.norm2(x + self.ff2(F.gelu(self.ff1(x))))


class BertStack(nn.Module):
    def __init__(self, layers=4, **kw):
        super().__init__()
        self.layers = nn.Sequential(*[BertLayer(**kw) for _ in range(layers)])

    def forward(self, x):
        return self.layers(x)


class GPT2Block(nn.Module):
    """Pre-norm causal block with GPT-2's fused c_attn projection and tanh-GELU MLP."""

    def __init__(self, d=256, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.c_attn(self.ln1(x)).split(d, dim=-1)
        q, k, v = (t.view(b, n, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(att.transpose(1, 2).reshape(b, n, d))
        return x + self.proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class MixerBlock(nn.Module):
    def __init__(self, tokens, d, token_hidden, channel_hidden):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.token_mlp = nn.Sequential(nn.Linear(tokens, token_hidden), nn.GELU(),
                                       nn.Linear(token_hidden, tokens))
        self.channel_mlp = nn.Sequential(nn.Linear(d, channel_hidden), nn.GELU(),
                                         nn.Linear(channel_hidden, d))

    def forward(self, x):
        x = x + self.token_mlp(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channel_mlp(self.norm2(x))


class MLPMixer(nn.Module):
    def __init__(self, image=64, patch=8, d=128, depth=4, classes=10):
        super().__init__()
        tokens = (image // patch) ** 2
        self.patches = nn.Conv2d(3, d, patch, patch)
        self.blocks = nn.Sequential(*[MixerBlock(tokens, d, 64, 256) for _ in range(depth)])
        self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, classes)

    def forward(self, x):
        x = self.patches(x).flatten(2).transpose(1, 2)
        return self.head(self.norm(self.blocks(x)).mean(1))


class RNNCell(nn.Module):
    """An Elman RNN unrolled over a sequence in Python: h = tanh(x_t W + h U + b)."""

    def __init__(self, d_in=128, d=256):
        super().__init__()
        self.w, self.u = nn.Linear(d_in, d), nn.Linear(d, d, bias=False)

    def forward(self, xs):
        h = torch.zeros(xs.shape[0], self.u.in_features)
        for t in range(xs.shape[1]):
            h = torch.tanh(self.w(xs[:, t]) + self.u(h))
        return h


class LowRankProjection(nn.Module):
    """Two linear layers with nothing between (a factored projection, as in low-rank
    adapters and bottleneck heads): x W1ᵀ W2ᵀ, whose weights' product is the smaller map."""

    def __init__(self, d=512, rank=512, out=32):
        super().__init__()
        self.down, self.up = nn.Linear(d, rank), nn.Linear(rank, out)

    def forward(self, x):
        return self.up(self.down(x))


# Fragments that carry a graph substitution (``ollie.capture.graph_rules``), two spellings each.
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


def _model(build, *shapes, stacked: bool = False):
    """``shapes``: one input's shape, or a tuple of shapes for several inputs; ``stacked``:
    the model's outputs (all of one shape) stacked into the one tensor the bench compares."""
    shapes = shapes if isinstance(shapes[0], tuple) else (shapes,)

    def make(scale: float):
        torch.manual_seed(0)
        model = build().eval()
        if stacked:
            return (lambda *x: torch.stack(model(*x))), _inputs(*shapes)
        return (lambda *x: model(*x)), _inputs(*shapes)
    return make


CASES = [
    Case("resnet18", "ResNet-18 with batch norm, 1×3×64×64", _model(ResNet18, 1, 3, 64, 64)),
    Case("mobilenet_v3", "MobileNet-v3-like, 1×3×96×96", _model(MobileNetV3Like, 1, 3, 96, 96)),
    Case("resnext_block", "ResNeXt bottleneck, 32 groups, 1×256×14×14",
         _model(ResNeXtBlock, 1, 256, 14, 14)),
    Case("bert_stack", "4 BERT layers, d=256, sequence 128", _model(BertStack, 1, 128, 256)),
    Case("gpt2_block", "GPT-2 block, d=256, sequence 128", _model(GPT2Block, 1, 128, 256)),
    Case("mlp_mixer", "MLP-Mixer, 4 blocks, 1×3×64×64", _model(MLPMixer, 1, 3, 64, 64)),
    Case("rnn_cell", "Elman RNN cell unrolled over 16 steps, batch 8",
         _model(RNNCell, 8, 16, 128)),
    Case("low_rank_projection", "Linear 512→512 then 512→32, nothing between, batch 256",
         _model(LowRankProjection, 256, 512)),
    Case("qkv_linears", "Q, K, V linear maps of one input, d=256, sequence 32",
         _model(QKVLinears, 1, 32, 256)),
    Case("gate_products", "an LSTM's four gate matmuls of one input, d=64, batch 4",
         _model(GateProducts, 4, 64)),
    Case("lstm_cell_linears", "an LSTM cell's input and state Linears, d=256, batch 16",
         _model(LSTMCellLinears, (16, 256), (16, 256), (16, 256), stacked=True)),
    Case("elman_cell_matmuls", "x @ W + h @ U + b of one RNN step, 256→512, batch 32",
         _model(ElmanCellMatmuls, (32, 256), (32, 512))),
    Case("parallel_linears", "relu(Linear_a(x) + Linear_b(x)), d=512, batch 64",
         _model(ParallelLinears, 64, 512)),
    Case("parallel_matmuls", "x @ W1 + x @ W2 + x @ W3 (parameters), d=256, batch 128",
         _model(ParallelMatmuls, 128, 256)),
    Case("weight_chain", "x @ A @ B @ C (parameters), d=256, batch 16",
         _model(WeightChain, 16, 256)),
    Case("inception_1x1", "four 1×1 convolutions of one input, 1×32×16×16",
         _model(Inception1x1, 1, 32, 16, 16)),
    Case("slices_one_weight", "one Linear on each of 16 slices (unbind), 16×8×64",
         _model(SlicesOneWeight, 16, 8, 64)),
    Case("split_one_weight", "one matmul on each of 16 row blocks (split), 64×64",
         _model(SplitOneWeight, 64, 64)),
    Case("group_conv_loop", "a loop of 8 convolutions over channel chunks, 1×64×16×16",
         _model(GroupConvLoop, 1, 64, 16, 16)),
    Case("group_conv_slices", "a loop of 8 convolutions over channel slices, 1×64×16×16",
         _model(GroupConvSlices, 1, 64, 16, 16)),
    Case("time_major_rnn", "Elman RNN over 16 time-major steps (unbind), batch 4",
         _model(TimeMajorRNN, 16, 4, 64)),
    Case("group_linears", "a Linear per column group (chunk), 8 groups of 32, batch 64",
         _model(GroupLinears, 64, 256)),
    Case("group_matmul_slices", "a matmul per column slice, 8 groups of 32, batch 64",
         _model(GroupMatmulSlices, 64, 256)),
]
BY_NAME = {c.name: c for c in CASES}
