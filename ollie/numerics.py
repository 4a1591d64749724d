"""Comparing a derived program's output with the original's (the second line of defence
behind the numerics contract in DESIGN.md: rules are proven, results are still checked)."""
from __future__ import annotations

import torch


def tolerance(dtype: torch.dtype) -> float:
    """Relative tolerance for comparing a reordered computation with eager."""
    return {torch.float16: 1e-2, torch.bfloat16: 5e-2, torch.float64: 1e-9}.get(dtype, 1e-4)


def max_relative_error(out, ref: torch.Tensor) -> float:
    """max |out - ref| / max(1, max |ref|): robust to sign changes and near-zero entries
    (inf when ``out`` is not a tensor of ``ref``'s shape)."""
    if not isinstance(out, torch.Tensor) or out.shape != ref.shape:
        return float("inf")
    if ref.numel() == 0:
        return 0.0
    diff = (out.double() - ref.double()).abs().max().item()
    scale = max(1.0, ref.double().abs().max().item())
    return diff / scale if diff == diff else float("inf")  # NaN counts as a failure
