"""Ollie's options: one validated record shared by the backend, ``@ollie.optimize`` and the CLI.

``torch.compile(f, backend="ollie", options={"budget_s": 1.0})`` and
``@ollie.optimize(budget_s=1.0)`` both end here, so a bad value is refused the same way
everywhere, with one line naming the option.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

BACKENDS = ("auto", "torch", "triton")


@dataclass(frozen=True)
class Options:
    backend: str = "auto"          # codegen for derived programs: "auto", "torch", "triton"
    inductor: bool = True          # compile the rewritten graph with Inductor (else run it as is)
    freeze: bool = True            # try Inductor's freezing of inference weights (one more compile)
    budget_s: float = 2.0          # derivation time per graph, shared by its regions
    max_nodes: int = 20_000        # e-graph node budget per region
    candidates: int = 4            # distinct candidates extracted per region
    measure_top: int = 2           # the ranker's best candidates measured (more where it is unsure)
    measure_cap_s: float = 0.5     # seconds of timing per candidate
    cache: bool = True             # persistent disk cache of decisions
    cache_dir: str | None = None   # default: $OLLIE_CACHE_DIR or the per-user cache folder
    verbose: bool = False          # print each region's decision
    progress: bool | str = "auto"  # progress line on stderr; "auto": when it is a terminal

    def __post_init__(self):
        if self.backend not in BACKENDS:
            raise ValueError(f"ollie: unknown backend {self.backend!r}; choose one of {BACKENDS}")
        for name in ("budget_s", "measure_cap_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or value <= 0:
                raise ValueError(f"ollie: {name} must be a finite number > 0, got {value!r}")
        for name in ("max_nodes", "candidates", "measure_top"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"ollie: {name} must be a positive integer, got {value!r}")
        if self.progress not in (True, False, "auto"):
            raise ValueError(f"ollie: progress must be True, False or 'auto', got {self.progress!r}")

    @classmethod
    def from_dict(cls, options: dict | None) -> "Options":
        """``Options`` from ``torch.compile(..., options={...})``; unknown keys are refused."""
        options = dict(options or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(f"ollie: unknown option(s) {', '.join(map(repr, unknown))}; "
                             f"known: {', '.join(sorted(known))}")
        return cls(**options)
