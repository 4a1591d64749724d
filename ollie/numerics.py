"""Comparing a derived program's output with the original's (the second line of defence
behind the numerics contract in DESIGN.md: rules are proven, results are still checked)."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch


def tolerance(dtype: torch.dtype) -> float:
    """Relative tolerance for comparing a reordered computation with eager."""
    return {torch.float16: 1e-2, torch.bfloat16: 5e-2, torch.float64: 1e-9}.get(dtype, 1e-4)


# A reordered computation may differ from the original by a few times the original's own
# rounding error, but never by more than this many times the dtype's tolerance.
REASSOCIATION_SLACK = 4
MAX_SLACK = 100


def allowed_error(expected: torch.Tensor, exact: torch.Tensor | None,
                  resampled: Sequence[float] = ()) -> float:
    """How far a reordered computation may be from ``expected`` (the original's value).
    It may be as far from ``exact`` (the same computation in float64) as the dtype's
    tolerance, or a few times the original's own rounding error where that is larger; from
    ``expected``, then, that much plus the original's own error (the triangle inequality:
    the two round in different places). A sum with cancellation, read through a function that
    does not shrink its error (``tanh`` near zero), rounds as much in any order; its error is
    relative to the summands, which the output's scale does not show. An algebraic mistake is
    far larger than either.

    One run's error is one sample, and its maximum may rest on a few entries (the tanh of
    large sums shows its error only where a sum is near zero), so the rounding error is
    ``resampled`` too (``resampled_errors``): its scale is the largest sample."""
    base = tolerance(expected.dtype)
    if exact is None or expected.dtype == torch.float64:
        return base
    own = max_relative_error(expected, exact)
    scale = max([own, *resampled])
    return min(max(base, REASSOCIATION_SLACK * scale) + own, MAX_SLACK * base)


RESAMPLES = 2


def resampled_errors(run: Callable[[Callable[[Any], Any]], Any],
                     count: int = RESAMPLES) -> list[float]:
    """The original's rounding error sampled again: ``run(convert)`` computes it from its
    inputs, each ``convert``ed; each sample moves every entry of the floating inputs one ulp
    up or down at random (the same computation, rounding elsewhere) and compares the run with
    the same run in float64. Empty where float64 does not run."""
    generator = torch.Generator().manual_seed(0)
    errors = []
    for _ in range(count):
        nudged: dict[int, tuple] = {}  # id -> (input, its nudged copy), both runs read one

        def nudge(value):
            if not (isinstance(value, torch.Tensor) and value.dtype in LOW_PRECISION):
                return value
            if id(value) not in nudged:
                up = (torch.rand(value.shape, generator=generator) < 0.5).to(value.device)
                toward = torch.where(up, torch.inf, -torch.inf).to(value.dtype)
                nudged[id(value)] = (value, torch.nextafter(value, toward))
            return nudged[id(value)][1]

        try:
            with torch.no_grad():
                errors.append(max_relative_error(run(nudge), run(lambda v: widen(nudge(v)))))
        except Exception:  # an op without float64, a value that is not a tensor
            return []
    return errors


LOW_PRECISION = (torch.float32, torch.float16, torch.bfloat16)


def widen(value):
    """``value`` in float64 where it is a lower-precision float tensor, else as is."""
    low = isinstance(value, torch.Tensor) and value.dtype in LOW_PRECISION
    return value.double() if low else value


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
