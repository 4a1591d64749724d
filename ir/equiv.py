"""Numeric equivalence: run two expressions on the same random inputs and compare.

Small integers in [-3, 3] (as float64) make sums of products exact, so a wrong rewrite cannot
hide behind rounding (TASO's fingerprints do the same); a float trial then catches what
integers cannot (e.g. rules that only hold for integer-valued data).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ir.interpreter import evaluate
from ir.nodes import Scope, inputs

INT_TOL = dict(rtol=1e-12, atol=1e-9)
FLOAT_TOL = dict(rtol=1e-6, atol=1e-8)


@dataclass
class Comparison:
    ok: bool
    max_abs_error: float = 0.0
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


def random_inputs(scope: Scope, seed: int = 0, integer: bool = True) -> dict[str, np.ndarray]:
    """An array per input tensor of ``scope`` (by name, drawn in sorted-name order)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, t in sorted(inputs(scope).items()):
        if integer:
            out[name] = rng.integers(-3, 4, size=t.shape).astype(np.float64)
        else:
            out[name] = rng.standard_normal(t.shape)
    return out


def _signature(s: Scope) -> dict[str, tuple[int, ...]]:
    return {n: t.shape for n, t in sorted(inputs(s).items())}


def compare(a: Scope, b: Scope, trials: int = 2, seed: int = 0) -> Comparison:
    """Evaluate both on ``trials`` input sets (even trials integer, odd ones float) and compare."""
    sa, sb = _signature(a), _signature(b)
    if sa != sb:
        return Comparison(False, float("inf"), f"different inputs: {sa} vs {sb}")
    if a.shape != b.shape:
        return Comparison(False, float("inf"), f"different output shapes: {a.shape} vs {b.shape}")
    worst = 0.0
    for t in range(trials):
        integer = t % 2 == 0
        kind = "integer" if integer else "float"
        env = random_inputs(a, seed=seed + t, integer=integer)
        try:
            with np.errstate(all="ignore"):
                x, y = evaluate(a, env), evaluate(b, env)
        except Exception as e:  # an expression that cannot run is not equivalent to anything
            return Comparison(False, float("inf"), f"trial {t} ({kind}): {type(e).__name__}: {e}")
        finite = np.isfinite(x) & np.isfinite(y)
        err = float(np.max(np.abs(x[finite] - y[finite]), initial=0.0))
        worst = max(worst, err)
        close = np.isclose(x, y, equal_nan=True, **(INT_TOL if integer else FLOAT_TOL))
        if not close.all():
            at = tuple(int(i) for i in np.argwhere(~close)[0])
            return Comparison(False, max(worst, err), f"trial {t} ({kind} inputs): values differ "
                              f"at {at}: {float(x[at])!r} vs {float(y[at])!r} (max abs error {err:.3g})")
    return Comparison(True, worst, "")


def equivalent(a: Scope, b: Scope, **kw) -> bool:
    """True if ``a`` and ``b`` agree numerically on random inputs (see ``compare``)."""
    return compare(a, b, **kw).ok


def contract(original: Scope, derived: Scope, env: dict[str, np.ndarray],
             rtol: float = 1e-6, atol: float = 1e-8) -> Comparison:
    """``derived`` against ``original`` on inputs ``env`` (NaN and ±inf allowed) under the
    numerics contract (docs/language.md): where the original is NaN the derived program is
    NaN (NaN in, NaN out); where it is ±inf the derived one is the same inf or NaN (``inf -
    inf`` after distributing a square, never a number); where it is finite the derived one
    is finite and close (up to reassociation)."""
    with np.errstate(all="ignore"):
        x, y = evaluate(original, env), evaluate(derived, env)
    if x.shape != y.shape:
        return Comparison(False, float("inf"), f"shapes {x.shape} vs {y.shape}")
    checks = (
        ("NaN in the original is not NaN", np.isnan(x) & ~np.isnan(y)),
        ("inf in the original is a number or the other inf",
         np.isinf(x) & ~np.isnan(y) & (y != x)),
        ("finite in the original is not finite or not close",
         np.isfinite(x) & ~(np.isfinite(y) & np.isclose(x, y, rtol=rtol, atol=atol))),
    )
    for why, bad in checks:
        if bad.any():
            at = tuple(int(i) for i in np.argwhere(bad)[0])
            return Comparison(False, float("inf"), f"{why} at {at}: {float(x[at])!r} vs "
                                                   f"{float(y[at])!r}")
    finite = np.isfinite(x) & np.isfinite(y)
    return Comparison(True, float(np.max(np.abs(x[finite] - y[finite]), initial=0.0)), "")