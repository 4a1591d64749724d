"""Comparing a derived program's output with the original's (the second line of defence
behind the numerics contract in DESIGN.md: rules are proven, results are still checked)."""
from __future__ import annotations

import torch


def tolerance(dtype: torch.dtype) -> float:
    """Relative tolerance for comparing a reordered computation with eager."""
    return {torch.float16: 1e-2, torch.bfloat16: 5e-2, torch.float64: 1e-9}.get(dtype, 1e-4)


# A reordered computation may differ from the original by a few times the original's own
# rounding error, but never by more than this many times the dtype's tolerance.
REASSOCIATION_SLACK = 4
MAX_SLACK = 100


def allowed_error(expected: torch.Tensor, exact: torch.Tensor | None) -> float:
    """How far a reordered computation may be from ``expected`` (the original's value).
    It may be as far from ``exact`` (the same computation in float64) as the dtype's
    tolerance, or a few times the original's own rounding error where that is larger; from
    ``expected``, then, that much plus the original's own error (the triangle inequality:
    the two round in different places). A sum with cancellation, read through a function that
    does not shrink its error (``tanh`` near zero), rounds as much in any order; its error is
    relative to the summands, which the output's scale does not show. An algebraic mistake is
    far larger than either."""
    base = tolerance(expected.dtype)
    if exact is None or expected.dtype == torch.float64:
        return base
    own = max_relative_error(expected, exact)
    return min(max(base, REASSOCIATION_SLACK * own) + own, MAX_SLACK * base)


def max_relative_error(out, ref: torch.Tensor) -> float:
    """max |out - ref| / max(1, max |ref|) over the finite entries: robust to sign changes and
    near-zero entries. Non-finite entries must agree exactly (NaN where the reference is NaN,
    the same infinity where it is infinite): NaN in, NaN out. inf when they do not, or when
    ``out`` is not a tensor of ``ref``'s shape."""
    if not isinstance(out, torch.Tensor) or out.shape != ref.shape:
        return float("inf")
    if ref.numel() == 0:
        return 0.0
    out, ref = out.detach().double(), ref.detach().double()
    finite = torch.isfinite(ref)
    if not torch.equal(torch.isnan(out), torch.isnan(ref)) or \
            not torch.equal(out[torch.isinf(ref)], ref[torch.isinf(ref)]):
        return float("inf")
    if not finite.any():
        return 0.0
    diff = (out[finite] - ref[finite]).abs().max().item()
    scale = max(1.0, ref[finite].abs().max().item())
    return diff / scale if diff == diff else float("inf")
