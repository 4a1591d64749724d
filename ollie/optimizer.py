"""``@ollie.optimize``: capture, derive, verify, measure, and cache per input signature.

The first call with a new (shapes, dtypes, devices) signature traces the function, composes
its supported operators into expressions, derives equivalent forms on the e-graph, lowers the
cheapest candidate, checks it against eager on the real arguments and times both; a region
is replaced only if it is correct AND faster. Later calls with that signature pay one
dictionary lookup. Anything that fails falls back to eager with a one-line warning.
"""
from __future__ import annotations

import functools
import inspect
import warnings
from dataclasses import dataclass, field
from typing import Callable

import torch

from ollie import region as compile_region
from ollie.capture import CaptureError, propagate_shapes, trace, uses_layout
from ollie.frontend import translate
from ollie.plan import KernelStep, Plan, record_values

BACKENDS = ("auto", "torch", "triton")


class OllieWarning(UserWarning):
    """Ollie ran (part of) a function eagerly; the message says why."""


@dataclass(frozen=True)
class Options:
    backend: str = "auto"
    budget_s: float = 2.0          # derivation time per region
    max_nodes: int = 20_000        # e-graph node budget per region
    candidates: int = 4            # distinct candidates extracted per region
    measure_cap_s: float = 0.5     # seconds of timing per candidate
    cache: bool = True             # persistent disk cache of decisions
    cache_dir: str | None = None   # default: $OLLIE_CACHE_DIR or the per-user cache folder
    verbose: bool = False
    progress: bool | str = "auto"  # progress line on stderr; "auto": when it is a terminal


@dataclass
class Compiled:
    """What one signature compiled to: a plan (or the eager function) and its report."""

    run: Callable
    regions: list = field(default_factory=list)       # compile_region.RegionReport
    eager_nodes: dict = field(default_factory=dict)   # node description -> reason
    fallback: str | None = None                       # why the whole function is eager


class OptimizedFunction:
    def __init__(self, fn: Callable, options: Options):
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.options = options
        self._cache: dict[tuple, Compiled] = {}
        self._uses_layout: bool | None = None  # known after the first trace
        try:
            self._signature = inspect.signature(fn)
        except (TypeError, ValueError):
            self._signature = None

    def __call__(self, *args, **kwargs):
        if kwargs:
            args = self._positional(args, kwargs)
        key = self._key(args)
        compiled = self._cache.get(key)
        if compiled is None:
            compiled = self._cache[key] = self._compile(args)
        return compiled.run(*args)

    def explain(self, *args, **kwargs) -> "Explanation":
        """What was captured, the rule chain applied, the chosen programs and their costs."""
        if kwargs:
            args = self._positional(args, kwargs)
        key = self._key(args)
        if key not in self._cache:
            self._cache[key] = self._compile(args)
        return Explanation(self.__name__, self._cache[key])

    # -- compilation ---------------------------------------------------------------------
    def _key(self, args: tuple) -> tuple:
        if self._uses_layout is None:
            try:
                self._uses_layout = uses_layout(trace(self.fn))
            except CaptureError:
                self._uses_layout = False  # it will run eagerly anyway
        return signature_key(args, layout=self._uses_layout)

    def _positional(self, args, kwargs) -> tuple:
        if self._signature is None:
            raise TypeError(f"{self.__name__}: keyword arguments need an inspectable signature")
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return tuple(bound.arguments.values())

    def _compile(self, args: tuple) -> Compiled:
        why_eager = _eager_reason(args)
        if why_eager:
            return self._fallback(why_eager)
        try:
            gm = trace(self.fn)
            propagate_shapes(gm, args)
        except CaptureError as e:
            return self._fallback(str(e))
        except Exception as e:  # the traced graph itself failed to run on these inputs
            return self._fallback(f"tracing {self.__name__} failed: {_first_line(e)}")
        translation = translate(gm)
        reference = record_values(gm, args)
        reports, kernels, skipped = [], {}, set()
        for region in translation.regions:
            report = compile_region.compile_region(region, reference, self.options)
            reports.append(report)
            if report.kernel is not None:
                kernels[region.root] = KernelStep(
                    region.root, report.kernel, tuple(region.inputs[n] for n in report.input_names))
                skipped.update(m for m in region.members if m is not region.root)
            if self.options.verbose:
                print(report.summary())
        eager = {_node_label(n): r for n, r in translation.eager_reasons.items()}
        if not kernels:
            return Compiled(self.fn, reports, eager)
        return Compiled(Plan(gm, kernels, skipped), reports, eager)

    def _fallback(self, reason: str) -> Compiled:
        warnings.warn(f"ollie: running {self.__name__} eagerly: {reason}", OllieWarning,
                      stacklevel=4)
        return Compiled(self.fn, fallback=reason)


def optimize(fn: Callable | None = None, *, backend: str = "auto", budget_s: float = 2.0,
             max_nodes: int = 20_000, candidates: int = 4, measure_cap_s: float = 0.5,
             cache: bool = True, cache_dir: str | None = None, verbose: bool = False,
             progress: bool | str = "auto"):
    """Optimize a torch function; use bare (``@optimize``) or with options.

    backend: "auto" (torch code on CPU; Triton where it applies on a GPU), "torch", "triton".
    budget_s / max_nodes: derivation time and e-graph size per region.
    candidates / measure_cap_s: how many derived programs are measured, seconds each.
    cache / cache_dir: the persistent decision cache (default $OLLIE_CACHE_DIR or per user).
    progress: a progress line while deriving and measuring ("auto": if stderr is a terminal).
    verbose: print each region's decision.
    """
    if backend not in BACKENDS:
        raise ValueError(f"ollie.optimize: unknown backend {backend!r}; choose one of {BACKENDS}")
    if budget_s <= 0 or max_nodes <= 0 or candidates <= 0 or measure_cap_s <= 0:
        raise ValueError("ollie.optimize: budget_s, max_nodes, candidates and measure_cap_s "
                         "must be positive")
    options = Options(backend, budget_s, max_nodes, candidates, measure_cap_s, cache,
                      cache_dir, verbose, progress)
    if fn is None:
        return lambda f: OptimizedFunction(f, options)
    if not callable(fn):
        raise TypeError(f"ollie.optimize expects a callable, got {type(fn).__name__}")
    return OptimizedFunction(fn, options)


def explain(fn: Callable, *args, **kwargs) -> "Explanation":
    """``ollie.explain(f, *args)``: like ``f.explain(*args)``, optimizing ``f`` if needed."""
    if not isinstance(fn, OptimizedFunction):
        fn = optimize(fn)
    return fn.explain(*args, **kwargs)


@dataclass
class Explanation:
    name: str
    compiled: Compiled

    def __str__(self) -> str:
        c = self.compiled
        lines = [f"ollie.explain({self.name})"]
        if c.fallback:
            return "\n".join(lines + [f"  runs eagerly: {c.fallback}"])
        lines.append(f"  captured {len(c.regions)} region(s); "
                     f"{len(c.eager_nodes)} op(s) left to eager torch")
        for label, reason in c.eager_nodes.items():
            lines.append(f"    eager {label}: {reason}")
        for r in c.regions:
            lines.append("")
            lines.extend("  " + line for line in r.describe().splitlines())
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_pretty_(self, p, cycle):  # IPython
        p.text(str(self))


def signature_key(args: tuple, layout: bool = False) -> tuple:
    """What a plan depends on: shapes, dtypes, devices (and strides and storage offsets, for a
    function that reads its inputs' layout); other arguments by value."""
    key = []
    for a in args:
        if isinstance(a, torch.Tensor):
            key.append(("T", tuple(a.shape), a.dtype, a.device.type, a.requires_grad)
                       + ((a.stride(), a.storage_offset()) if layout else ()))
        else:
            try:
                hash(a)
                key.append(("V", type(a).__name__, a))
            except TypeError:
                key.append(("O", type(a).__name__, id(a)))
    return tuple(key)


def _eager_reason(args: tuple) -> str | None:
    if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad
                                       for a in args):
        return "inputs require grad (Ollie optimizes inference only for now)"
    if not any(isinstance(a, torch.Tensor) for a in args):
        return "no tensor arguments"
    return None


def _node_label(node) -> str:
    return f"{node.name} = {node.format_node().split('=', 1)[-1].strip()}" if hasattr(
        node, "format_node") else str(node)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
