"""``ollie bench --suite models``: small real models, written here (no torchvision).

A ResNet-18 with batch norm, a MobileNet-v3-like network (depthwise convolutions,
squeeze-and-excitation, hard-swish), a ResNeXt block (grouped convolution), a stack of BERT
layers, a GPT-2 block, an MLP-Mixer, an unrolled RNN cell (each in eval mode at batch 1) and a
low-rank projection (two linear layers, batch 256), with random weights; and the fragments
of ``bench_fragments``, two spellings of each graph substitution family (and of the
materialisation Korch's program chooses). They show what
Ollie does on ordinary model code: its speed against eager and torch.compile, and
(``--first-call``) its compile time against torch.compile's, each in a fresh process with
fresh caches.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ollie.cli.bench_fragments import (
    QKVLinears, GateProducts, Inception1x1, ConvBranches, ConvDifference, ConvLayersDifference,
    RepVGGBlock, SlicesOneWeight, SplitOneWeight, GroupConvLoop, GroupConvSlices, GroupLinears,
    GroupMatmulSlices, TimeMajorRNN, LSTMCellLinears, ElmanCellMatmuls, LinearLayersDifference,
    ParallelLinears, ParallelMatmuls, WeightChain, LoRALinear, LowRankCorrection, RowColumnSums,
    DoublyNormalised, LastPositionsLogits, FirstOutputs)
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
    Case("linear_layers_difference", "tanh(a(x) - b(x)), two nn.Linear(512, 512), batch 64",
         _model(LinearLayersDifference, 64, 512)),
    Case("parallel_matmuls", "x @ W1 + x @ W2 + x @ W3 (parameters), d=256, batch 128",
         _model(ParallelMatmuls, 128, 256)),
    Case("weight_chain", "x @ A @ B @ C (parameters), d=256, batch 16",
         _model(WeightChain, 16, 256)),
    Case("lora_linear", "Linear(256, 256) plus a rank-16 adapter (peft's spelling), 4×64×256",
         _model(LoRALinear, 4, 64, 256)),
    Case("low_rank_correction", "x @ W - x @ U @ V (parameters, rank 8), d=256, batch 256",
         _model(LowRankCorrection, 256, 256)),
    Case("inception_1x1", "four 1×1 convolutions of one input, 1×32×16×16",
         _model(Inception1x1, 1, 32, 16, 16)),
    Case("conv_branches", "relu(conv3x3_a(x) + conv3x3_b(x)), 1×64×28×28",
         _model(ConvBranches, 1, 64, 28, 28)),
    Case("conv_difference", "tanh(conv5x5(x, a) - conv5x5(x, b)), no biases, 1×32×32×32",
         _model(ConvDifference, 1, 32, 32, 32)),
    Case("conv_layers_difference", "tanh(a(x) - b(x)), two nn.Conv2d(32, 32, 5) with biases, "
         "1×32×32×32", _model(ConvLayersDifference, 1, 32, 32, 32)),
    Case("repvgg_block", "RepVGG block: 3×3+BN, 1×1+BN and identity, 1×64×28×28",
         _model(RepVGGBlock, 1, 64, 28, 28)),
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
    Case("last_positions_logits", "(h @ W_vocab)[-4:] over a sequence of 256, d=256, "
         "vocabulary 2048", _model(LastPositionsLogits, 256, 256)),
    Case("first_outputs", "Linear(512→2048)(x)[:, :64], batch 256",
         _model(FirstOutputs, 256, 512)),
    Case("row_column_sums", "sin(x)·cos(2x) summed over rows and over columns, 2048×2048",
         _model(RowColumnSums, 2048, 2048)),
    Case("doubly_normalised", "cos(x)²+1 over its row sums plus over its column sums, "
         "2048×2048", _model(DoublyNormalised, 2048, 2048)),
]
BY_NAME = {c.name: c for c in CASES}
