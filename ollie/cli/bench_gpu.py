"""The GPU benchmark suite (``ollie bench --suite gpu``): EinNet's operator cases, as data.

Each ``GpuCase`` is a name, a plain PyTorch function (the eager baseline Ollie starts from),
the shapes of its inputs and where the sizes come from. Nothing here depends on how Ollie
compiles; ``flops`` / ``bytes`` and ``roofline_seconds`` give each case a lower bound on its
time at a GPU's peak compute and memory bandwidth (``PEAKS``: H100 SXM, H200).

Sizes (NCHW; a conv-transpose weight is ``(C_in, C_out, k, k)``):

- InfoGAN / DCGAN generators, the five ``ConvTranspose2d`` layers at batch 1 and 16 --
  InfoGAN 228@1x1 -> 448 (k2 s1 p0) -> 256@4 -> 128@8 -> 64@16 -> 3@32 (k4 s2 p1);
  DCGAN 100@1x1 -> 512 (k4 s1 p0) -> 256@8 -> 128@16 -> 64@32 -> 3@64 (k4 s2 p1)
  [InfiniTensor/InfiniTensor src/nnet/App/test_models.cc, ``getGANConfigs``];
- conv 3x3, 512 -> 512 channels on 7x7, batch 1, pad 1
  [zhengly123/OSDI23-EinNet-AE 1_op/conv3x3.origin.sh];
- FSRCNN's 5x5 convs: the operator case N=16, 32 -> 1 channel on 224x224, pad 2
  [OSDI23-EinNet-AE 1_op/conv5x5.origin.sh], and the feature-extraction layer N=16,
  1 -> 56 on 32x32, pad 2 [test_models.cc, ``getFSRCNNGraph``];
- CSRNet's back end: six 3x3 convs, dilation 2, pad 2, on [16, 512, 14, 14], channels
  512 -> 512 -> 512 -> 512 -> 256 -> 128 -> 64 [OSDI23-EinNet-AE
  0_model/nimble/experiment/src/csrnet.py];
- Longformer's dilated banded attention: G2BMM ``q, k (8, 10000, 64) -> (8, 10000, 2001)``
  and GBMM ``p (8, 10000, 2001), v (8, 10000, 64) -> (8, 10000, 64)``: 8 heads x batch 1,
  sequence 10000, window w = 1000 (band 2w+1), dilation 4, 64 features per head
  [test_models.cc, ``getLongformer``].
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

# Dense peak throughput (no sparsity) and HBM bandwidth, SXM parts (NVIDIA data sheets).
PEAKS = {
    "h100": {"fp32": 67e12, "tf32": 494.7e12, "fp16": 989.4e12, "bf16": 989.4e12,
             "bandwidth": 3.35e12},
    "h200": {"fp32": 67e12, "tf32": 494.7e12, "fp16": 989.4e12, "bf16": 989.4e12,
             "bandwidth": 4.8e12},
}
SOURCES = {
    "gan": "InfiniTensor/InfiniTensor src/nnet/App/test_models.cc (getGANConfigs)",
    "conv3x3": "zhengly123/OSDI23-EinNet-AE 1_op/conv3x3.origin.sh",
    "conv5x5": "zhengly123/OSDI23-EinNet-AE 1_op/conv5x5.origin.sh",
    "fsrcnn": "InfiniTensor/InfiniTensor src/nnet/App/test_models.cc (getFSRCNNGraph)",
    "csrnet": "zhengly123/OSDI23-EinNet-AE 0_model/nimble/experiment/src/csrnet.py",
    "longformer": "InfiniTensor/InfiniTensor src/nnet/App/test_models.cc (getLongformer)",
}


def roofline_seconds(flops: float, bytes: float, peak_flops: float, peak_bw: float) -> float:
    """The least time a kernel doing ``flops`` and moving ``bytes`` can take on a device with
    ``peak_flops`` FLOP/s and ``peak_bw`` bytes/s: whichever limit binds."""
    if peak_flops <= 0 or peak_bw <= 0:
        raise ValueError(f"peaks must be positive, got {peak_flops} FLOP/s, {peak_bw} B/s")
    return max(flops / peak_flops, bytes / peak_bw)


@dataclass(frozen=True)
class GpuCase:
    name: str
    fn: Callable[..., torch.Tensor]    # the PyTorch program (eager baseline)
    shapes: tuple[tuple[int, ...], ...]  # of fn's inputs, in order
    flops: int                         # useful multiply-adds x 2
    source: str                        # where the sizes come from
    description: str = ""

    def inputs(self, device="cuda", dtype=torch.float32, seed: int = 0) -> tuple:
        g = torch.Generator().manual_seed(seed)
        return tuple(torch.randn(s, generator=g, dtype=torch.float32).to(device, dtype)
                     for s in self.shapes)

    def output_shape(self) -> tuple[int, ...]:
        """Computed on the ``meta`` device: no memory, no time."""
        meta = [torch.empty(s, device="meta") for s in self.shapes]
        return tuple(self.fn(*meta).shape)

    def bytes(self, element_size: int = 4) -> int:
        """Compulsory traffic: every input read once and the output written once."""
        elements = sum(math.prod(s) for s in self.shapes) + math.prod(self.output_shape())
        return elements * element_size

    def roofline(self, device: str = "h100", precision: str = "fp32") -> float:
        peaks = PEAKS[device]
        size = 2 if precision in ("fp16", "bf16") else 4
        return roofline_seconds(self.flops, self.bytes(size), peaks[precision],
                                peaks["bandwidth"])


# -- the PyTorch programs -------------------------------------------------------------------------
def conv_fn(stride: int = 1, padding: int = 0, dilation: int = 1):
    def conv(x, w):
        return F.conv2d(x, w, stride=stride, padding=padding, dilation=dilation)
    return conv


def conv_transpose_fn(stride: int, padding: int):
    def conv_transpose(x, w):
        return F.conv_transpose2d(x, w, stride=stride, padding=padding)
    return conv_transpose


def _band_windows(x: torch.Tensor, w: int, d: int, j0: int, count: int) -> torch.Tensor:
    """``win[b, i, j, c] = x[b, i + d*(j0 + j - w), c]`` (0 outside ``x``) as a strided view."""
    b, n, c = x.shape
    xp = F.pad(x, (0, 0, w * d, w * d)).contiguous()  # fresh storage: offset 0
    # (no xp.storage_offset(): Dynamo cannot trace it and would break the graph here)
    return xp.as_strided((b, n, count, c), (xp.stride(0), c, d * c, 1), j0 * d * c)


def g2bmm_fn(w: int, d: int, chunk: int = 64):
    """``out[b,i,j] = sum_c q[b,i,c] * k[b, i + d*(j-w), c]``, ``j < 2w+1``: windows of ``k``
    as strided views, ``chunk`` band offsets per einsum (memory stays ~ chunk x q)."""
    def g2bmm(q, k):
        outs = []
        for j0 in range(0, 2 * w + 1, chunk):
            count = min(chunk, 2 * w + 1 - j0)
            outs.append(torch.einsum("bic,bijc->bij", q, _band_windows(k, w, d, j0, count)))
        return torch.cat(outs, dim=-1)
    return g2bmm


def gbmm_fn(w: int, d: int, chunk: int = 64):
    """``out[b,i,c] = sum_j p[b,i,j] * v[b, i + d*(j-w), c]``, chunked like ``g2bmm_fn``."""
    def gbmm(p, v):
        out = None
        for j0 in range(0, 2 * w + 1, chunk):
            count = min(chunk, 2 * w + 1 - j0)
            part = torch.einsum("bij,bijc->bic", p[..., j0:j0 + count],
                                _band_windows(v, w, d, j0, count))
            out = part if out is None else out + part
        return out
    return gbmm


# -- the cases ------------------------------------------------------------------------------------
def _conv_flops(n, c, f, k, out_hw) -> int:
    return 2 * n * f * c * k * k * out_hw[0] * out_hw[1]


def _gan_cases(model: str, layers, batch: int) -> list[GpuCase]:
    out = []
    for k, (c_in, hw, c_out, ks, stride, pad) in enumerate(layers, 1):
        flops = 2 * batch * c_in * hw * hw * c_out * ks * ks  # each input pixel x kernel tap
        out.append(GpuCase(
            f"{model}_convT{k}_b{batch}", conv_transpose_fn(stride, pad),
            ((batch, c_in, hw, hw), (c_in, c_out, ks, ks)), flops, SOURCES["gan"],
            f"{model} ConvTranspose2d {c_in}->{c_out}, {ks}x{ks} s{stride} p{pad}, "
            f"{hw}x{hw} input"))
    return out


INFOGAN = [(228, 1, 448, 2, 1, 0), (448, 2, 256, 4, 2, 1), (256, 4, 128, 4, 2, 1),
           (128, 8, 64, 4, 2, 1), (64, 16, 3, 4, 2, 1)]
DCGAN = [(100, 1, 512, 4, 1, 0), (512, 4, 256, 4, 2, 1), (256, 8, 128, 4, 2, 1),
         (128, 16, 64, 4, 2, 1), (64, 32, 3, 4, 2, 1)]
CSRNET = [512, 512, 512, 512, 256, 128, 64]
LONGFORMER = {"heads": 8, "seq": 10000, "w": 1000, "d": 4, "features": 64}


def gpu_cases() -> list[GpuCase]:
    """Every case of the GPU suite (see the module docstring for sizes and sources)."""
    cases = []
    for batch in (1, 16):
        cases += _gan_cases("infogan", INFOGAN, batch)
        cases += _gan_cases("dcgan", DCGAN, batch)
    cases.append(GpuCase("conv3x3_512_7x7", conv_fn(padding=1),
                         ((1, 512, 7, 7), (512, 512, 3, 3)),
                         _conv_flops(1, 512, 512, 3, (7, 7)), SOURCES["conv3x3"],
                         "conv 3x3, 512->512 channels, 7x7, pad 1"))
    cases.append(GpuCase("fsrcnn_conv5x5_32to1", conv_fn(padding=2),
                         ((16, 32, 224, 224), (1, 32, 5, 5)),
                         _conv_flops(16, 32, 1, 5, (224, 224)), SOURCES["conv5x5"],
                         "FSRCNN conv 5x5, 32->1 channel, 224x224, pad 2"))
    cases.append(GpuCase("fsrcnn_conv5x5_1to56", conv_fn(padding=2),
                         ((16, 1, 32, 32), (56, 1, 5, 5)),
                         _conv_flops(16, 1, 56, 5, (32, 32)), SOURCES["fsrcnn"],
                         "FSRCNN feature extraction conv 5x5, 1->56 channels, 32x32, pad 2"))
    for k, (c_in, c_out) in enumerate(zip(CSRNET, CSRNET[1:]), 1):
        cases.append(GpuCase(f"csrnet_dilated{k}", conv_fn(padding=2, dilation=2),
                             ((16, c_in, 14, 14), (c_out, c_in, 3, 3)),
                             _conv_flops(16, c_in, c_out, 3, (14, 14)), SOURCES["csrnet"],
                             f"CSRNet conv 3x3 dilation 2, {c_in}->{c_out}, 14x14, batch 16"))
    lf = LONGFORMER
    rows, band, feats = lf["seq"], 2 * lf["w"] + 1, lf["features"]
    flops = 2 * lf["heads"] * rows * band * feats
    cases.append(GpuCase("longformer_g2bmm", g2bmm_fn(lf["w"], lf["d"]),
                         ((lf["heads"], rows, feats), (lf["heads"], rows, feats)), flops,
                         SOURCES["longformer"],
                         "Longformer dilated banded Q.K^T: window 1000, dilation 4"))
    cases.append(GpuCase("longformer_gbmm", gbmm_fn(lf["w"], lf["d"]),
                         ((lf["heads"], rows, band), (lf["heads"], rows, feats)), flops,
                         SOURCES["longformer"],
                         "Longformer dilated banded P.V: window 1000, dilation 4"))
    return cases
