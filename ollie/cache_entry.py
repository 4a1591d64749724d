"""What a cached decision holds, checked field by field, and whether its margin was noise.

A checksum only proves an entry was written whole; it says nothing about what was written.
An entry with a valid checksum but ``rule_chain=7`` or ``value=[1, 2, 3]`` must not reach
code that iterates it, so every value is checked against ``FIELDS`` when it is stored and
again when it is read; one that does not fit is ignored like a corrupt one. Fields not
listed are allowed (a newer Ollie may add some), as long as they are plain JSON.

Noise. A decision measured on a loaded machine would otherwise be kept forever. An entry
records the ratio the decision used (``speedup``: eager time over Ollie's, the median of the
per-round ratios) and the spread of that ratio over the interleaved rounds (``spread``,
relative: half the inter-quartile range of the per-round ratios over their median;
``measure.compare`` computes both). ``within_noise`` tells whether the adoption threshold lies within that spread, that
is whether the same machine might as well have decided the other way; such a decision is
measured again once (``remeasured`` counts it), by ``ollie tune`` or a later first call.
"""
from __future__ import annotations

import math
from typing import Any

from ollie.decision import ADOPTION_MARGIN, NOISE_FLOOR

_NUMBER = (int, float)


def _finite(v) -> bool:
    return isinstance(v, _NUMBER) and not isinstance(v, bool) and math.isfinite(v)


def _opt(check):
    return lambda v: v is None or check(v)


def _str_list(v) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


FIELDS: dict[str, tuple[Any, str]] = {  # name -> (check, what it must be)
    "program": (_opt(lambda v: isinstance(v, str)), "text or null"),
    "original": (_opt(lambda v: isinstance(v, str)), "text or null"),
    "rule_chain": (_str_list, "a list of rule names"),
    "cost_before": (_finite, "a finite number"),
    "cost_after": (_finite, "a finite number"),
    "eager_s": (_opt(lambda v: _finite(v) and v >= 0), "seconds or null"),
    "ollie_s": (_opt(lambda v: _finite(v) and v >= 0), "seconds or null"),
    "error": (_opt(lambda v: isinstance(v, _NUMBER) and not isinstance(v, bool)),
              "a number or null"),
    "decision": (lambda v: isinstance(v, str), "text"),
    "backend": (_opt(lambda v: isinstance(v, str)), "text or null"),
    "device": (_opt(lambda v: isinstance(v, str)), "text or null"),
    "speedup": (_opt(lambda v: _finite(v) and v > 0), "a positive ratio or null"),
    "spread": (_opt(lambda v: _finite(v) and v >= 0), "a relative spread >= 0 or null"),
    "margin": (_opt(lambda v: _finite(v) and 0 < v <= 1), "a margin in (0, 1] or null"),
    "remeasured": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
                   "a count >= 0"),
}
REQUIRED = ("decision",)


def problems(value) -> list[str]:
    """What is wrong with a cache value (empty: it fits the schema)."""
    if not isinstance(value, dict):
        return [f"the value is {type(value).__name__}, not an object"]
    out = [f"{name!r} is missing" for name in REQUIRED if name not in value]
    for name, v in value.items():
        if not isinstance(name, str):
            out.append(f"field name {name!r} is not text")
            continue
        spec = FIELDS.get(name)
        if spec is not None and not spec[0](v):
            out.append(f"{name!r} must be {spec[1]}, got {type(v).__name__}")
    return out


def valid(value) -> bool:
    return not problems(value)


# -- noise ---------------------------------------------------------------------------------------
def within_noise(entry: dict, margin: float | None = None) -> bool:
    """Whether the stored decision could have gone the other way by noise alone: the
    adoption threshold (``1 / margin`` as a speed-up) lies within the measured ratio's spread
    (or within ``NOISE_FLOOR`` of it). Entries without a measured ratio are not judged."""
    ratio, spread = entry.get("speedup"), entry.get("spread")
    if not _finite(ratio) or ratio <= 0:
        eager, ollie = entry.get("eager_s"), entry.get("ollie_s")
        if not (_finite(eager) and _finite(ollie) and eager > 0 and ollie > 0):
            return False
        ratio = eager / ollie
    spread = spread if _finite(spread) and spread >= 0 else 0.0
    m = margin if margin is not None else entry.get("margin") or ADOPTION_MARGIN
    threshold = 1.0 / m
    return abs(ratio - threshold) <= max(spread, NOISE_FLOOR) * ratio


def needs_remeasure(entry: dict) -> bool:
    """Within noise and not measured again yet: measure it once more, then keep it."""
    return within_noise(entry) and not entry.get("remeasured", 0)
