"""``@ollie.optimize`` and ``ollie.explain``: a thin, documented layer over ``torch.compile``.

    @ollie.optimize                          # or @ollie.optimize(budget_s=1.0, inductor=False)
    def f(a, b, c):
        return (a @ b) @ c

is ``torch.compile(f, backend=OllieBackend(options))`` plus ``f.explain()``, with
torch.compile's defaults: the first call compiles for its shapes, and a size that changes makes
Dynamo recompile with that size symbolic (``dynamic=`` and ``torch._dynamo.mark_dynamic`` are
respected). Nothing is added to the call path: ``dynamic=False`` would wrap every call in a
configuration patch (about 14 µs a call here).
An ``nn.Module`` gives back the compiled module (``torch.compile``'s ``OptimizedModule``, as
``OptimizedModule`` here: a call eager PyTorch was measured to run faster calls the module
itself) with an ``explain`` attribute, so ``.parameters()``, ``.train()`` and state dicts keep
working.
"""
from __future__ import annotations

import functools
import types
from typing import Callable

import torch

from ollie.capture.backend import OllieBackend, register
from ollie.capture.direct_calls import EagerSizes, covered
from ollie.capture.eager_or_compiled import CallRace
from ollie.capture.report import Explanation
from ollie.options import Options


class _GraphBreaks:
    """Dynamo's reasons for splitting the function, seen while it compiled. Dynamo counts them
    globally (``graph_break``, and ``unimplemented`` for what it cannot trace, such as
    data-dependent branching). A call through ``OptimizedFunction._compiled_call`` is bracketed
    by two reads of Dynamo's frame counter; a compile during a direct call is counted from the
    start of that compile (Dynamo's compile-start callback), when the backend is handed a graph."""

    KINDS = ("graph_break", "unimplemented")
    _at_compile_start: list[dict] = []   # the counters when Dynamo last began compiling a frame

    def __init__(self):
        from torch._dynamo.utils import counters
        self.counters = [counters[k] for k in self.KINDS]
        self.frames = counters["frames"]   # "total": frames Dynamo has tried to compile
        self.seen: dict[str, int] = {}
        self._frames_seen = -1
        self._before: list[dict] = []
        if not _GraphBreaks._at_compile_start:  # once per process
            _GraphBreaks._compile_starts(None)
            torch._dynamo.callback_handler.register_start_callback(_GraphBreaks._compile_starts)

    @staticmethod
    def _compile_starts(_args) -> None:
        _GraphBreaks._at_compile_start = _GraphBreaks.snapshot()

    def before_call(self) -> int:
        frames = self.frames["total"]
        if frames != self._frames_seen:  # something compiled since: count from here
            self._before = self.snapshot()
        return frames

    def after_call(self, frames_before: int) -> bool:
        """Record the breaks of a call that compiled; whether it compiled."""
        self._frames_seen = frames = self.frames["total"]
        if frames == frames_before:
            return False
        self.record(self._before)
        self._before = self.snapshot()
        return True

    def compiled_unbracketed(self) -> None:
        """Record the breaks of the frame Dynamo is compiling now, outside ``before_call``."""
        self.record(_GraphBreaks._at_compile_start)
        _GraphBreaks._at_compile_start = self.snapshot()
        self._frames_seen = -1

    @staticmethod
    def snapshot() -> list[dict]:
        from torch._dynamo.utils import counters
        return [dict(counters[k]) for k in _GraphBreaks.KINDS]

    def record(self, before: list[dict]) -> None:
        for counter, old in zip(self.counters, before):
            for reason, n in counter.items():
                if n > old.get(reason, 0):
                    self.seen[reason] = self.seen.get(reason, 0) + n - old.get(reason, 0)


class OptimizedFunction(functools.partial):
    """``fn`` compiled by ``torch.compile`` with an Ollie backend of its own.

    A ``functools.partial`` whose target changes: while Dynamo compiles, a call goes through
    ``_compiled_call``. Once a call compiles nothing, the target is torch.compile's own
    function: nothing of Ollie's runs on the call path (every Python frame added 0.5-1 µs
    after a large kernel had left the caches cold) until the backend is handed another graph.
    Once eager PyTorch is known to run ``fn`` faster, the target is ``fn`` itself (0.1 µs a
    call, against 0.5 µs through a Python ``__call__``). Where the two differ by about Dynamo's
    frame, the first calls at the compiled sizes run one or the other (``CallRace``) until the
    faster is known (``racing``)."""

    def __new__(cls, fn: Callable, options: Options, dynamic: bool | None = None):
        return super().__new__(cls, fn)  # the call target is set in __init__

    def __init__(self, fn: Callable, options: Options, dynamic: bool | None = None):
        self.fn = fn
        self.options = options
        self.backend = OllieBackend(options)
        self.breaks = _GraphBreaks()
        self._dynamic = dynamic
        self._race: tuple[tuple, CallRace] | None = None  # (arguments' signature, race)
        self._compiled = torch.compile(fn, backend=self.backend, dynamic=dynamic)
        self.backend.on_graph = self._handed_a_graph
        self.backend.calls_skipped_directly = True
        functools.update_wrapper(self, fn, updated=())
        self.__name__ = _name(fn)
        self._call(self._compiled_call)

    def _call(self, target: Callable) -> None:
        # partial's own way to change its target (the pickle protocol); the dict is kept
        self.__setstate__((target, (), None, self.__dict__))

    def _compiled_call(self, *args, **kwargs):
        eager_sizes = self.backend.eager_sizes
        if covered(eager_sizes, args, kwargs):
            return self.fn(*args, **kwargs)  # eager runs these sizes faster: no Dynamo
        if self._race is not None and not torch.is_grad_enabled() and \
                self._race[0] == _signature(args, kwargs):
            return self._run_race(args, kwargs)
        if self._race is not None and self._race[1].passed_by():
            self._race = None
        frames = self.breaks.before_call()
        out = self._compiled(*args, **kwargs)
        compiled_now = self.breaks.after_call(frames)
        if self.backend.race is not None:  # eager or compiled: the next calls decide
            self._race, self.backend.race = (_signature(args, kwargs), self.backend.race), None
        elif not compiled_now:
            if not eager_sizes and self._race is None:
                self._call(self._compiled)  # settled: torch.compile's own call path
        elif 0 < self.backend.graphs == self.backend.skipped_functions:
            # every graph Dynamo made of fn was the whole of it, and eager runs it faster
            self._call(self.fn)
        return out

    def _run_race(self, args, kwargs):
        race = self._race[1]
        out = race.run(functools.partial(self.fn, *args, **kwargs),
                       functools.partial(self._compiled, *args, **kwargs))
        if race.decision is not None:
            self._race = None
            if race.decision.adopted and race.covers is None:  # (else: in eager_sizes)
                self._call(self.fn)
            elif not self.backend.eager_sizes:
                self._call(self._compiled)
        return out

    def _handed_a_graph(self) -> None:
        """The backend's hook: Dynamo is compiling ``fn`` again (a new size, a new guard)."""
        if self.func is self._compiled:
            self.breaks.compiled_unbracketed()
            self._call(self._compiled_call)  # watch the next call: it may need eager_sizes

    @property
    def racing(self) -> bool:
        """Whether calls still run eager or compiled by turns (``CallRace``)."""
        return self._race is not None

    @property
    def runs_eagerly(self) -> bool:
        """Whether calls now go straight to ``fn`` (eager PyTorch was measured faster)."""
        return self.func is self.fn

    def __repr__(self) -> str:
        return f"<ollie.optimize of {self.__name__}>"

    def __reduce__(self):  # a copy (or an unpickled one) is optimized afresh on its first call
        return OptimizedFunction, (self.fn, self.options, self._dynamic)

    def __get__(self, obj, objtype=None):  # a decorated method binds like a function
        return self if obj is None else types.MethodType(self, obj)

    def explain(self, *args, **kwargs) -> Explanation:
        """What Ollie did with every graph compiled so far: regions, derivations, rule chains,
        chosen programs, measured times, and what it left to Inductor and why. With arguments,
        and nothing compiled yet, the function is first called once on them."""
        if (args or kwargs) and not self.backend.graphs:
            self(*args, **kwargs)
        return Explanation(self.__name__, self.backend, dict(self.breaks.seen))


def optimize(fn: Callable | None = None, *, backend: str = "auto", inductor: bool = True,
             budget_s: float = 2.0, max_nodes: int = 20_000, candidates: int = 4,
             measure_top: int = 2, measure_cap_s: float = 0.5, cache: bool = True,
             cache_dir: str | None = None, freeze: bool = True,
             verbose: bool = False, progress: bool | str = "auto",
             dynamic: bool | None = None):
    """Optimize a torch function or ``nn.Module``; use bare (``@optimize``) or with options.

    backend: codegen for derived programs: "auto" (torch code; Triton measured too on a GPU),
      "torch", "triton".
    inductor: compile the rewritten graph with Inductor (default); False runs it as is.
    budget_s: derivation time per graph, shared by its regions in order of expected gain.
    max_nodes: e-graph size per region.
    candidates: how many derived programs are extracted per region.
    measure_top / measure_cap_s: how many of them are measured -- the candidate ranker's best
      ``measure_top``, more where its estimates are close -- and seconds of timing each.
    cache / cache_dir: the persistent decision cache (default $OLLIE_CACHE_DIR or per user).
    freeze: try Inductor's compile with the weights frozen in (inference, static sizes), kept
      where it measures faster; False skips that extra compile.
    progress: a progress line while deriving and measuring ("auto": if stderr is a terminal).
    verbose: print each region's decision (the ``ollie`` log, ``TORCH_LOGS="+ollie"``).
    dynamic: as torch.compile's (None: a size that varies becomes symbolic on recompile).
    """
    options = Options(backend=backend, inductor=inductor, budget_s=budget_s,
                      max_nodes=max_nodes, candidates=candidates, measure_top=measure_top,
                      measure_cap_s=measure_cap_s,
                      cache=cache, cache_dir=cache_dir, freeze=freeze, verbose=verbose,
                      progress=progress)
    register()
    if dynamic not in (None, True, False):
        raise ValueError(f"ollie: dynamic must be None, True or False, got {dynamic!r}")
    if fn is None:
        return functools.partial(_wrap, options=options, dynamic=dynamic)
    return _wrap(fn, options, dynamic)


def _wrap(fn, options: Options, dynamic: bool | None = None):
    if isinstance(fn, torch.nn.Module):
        return _optimize_module(fn, options, dynamic)
    if not callable(fn):
        raise TypeError(f"ollie.optimize expects a function or an nn.Module, "
                        f"got {type(fn).__name__}")
    return OptimizedFunction(fn, options, dynamic)


class OptimizedModule(torch._dynamo.eval_frame.OptimizedModule):
    """``torch.compile``'s module, whose calls that ``ollie_eager_won(args, kwargs)`` covers
    go to the module itself before torch's wrapper (its context and a second
    ``Module.__call__``: ~17 µs a call on a 2-core CPU), and so skip Dynamo's frame and
    guards too (20-50 µs): calls without grad with the sizes of a call whose graph (all of
    ``forward``) eager PyTorch ran faster, or in a range where it did
    (``backend.eager_sizes``)."""

    # declared on the class, so that setting them (``_optimize_module``) lands on this
    # wrapper: torch's wrapper sets any other attribute on the user's module
    ollie_backend = explain = None
    ollie_module = None  # the user's module, outside ``_modules``: found without __getattr__
    ollie_races: dict | None = None  # arguments' signature -> the race under way there

    def __call__(self, *args, **kwargs):
        if covered(self.ollie_backend.eager_sizes, args, kwargs):  # (one check: see covered)
            return self.ollie_module(*args, **kwargs)
        if self.ollie_races:
            if not torch.is_grad_enabled() and \
                    (signature := _signature(args, kwargs)) in self.ollie_races:
                return self._ollie_race(signature, args, kwargs)
            for signature in [s for s, race in self.ollie_races.items() if race.passed_by()]:
                del self.ollie_races[signature]
        return super().__call__(*args, **kwargs)

    def _ollie_race(self, signature: tuple, args: tuple, kwargs: dict):
        """The call, as the race of eager against the compile at its signature runs it."""
        race = self.ollie_races[signature]
        out = race.run(functools.partial(self.ollie_module, *args, **kwargs),
                       functools.partial(super().__call__, *args, **kwargs))
        if race.decision is not None:
            del self.ollie_races[signature]
            if race.decision.adopted and race.covers is None:  # (else: in eager_sizes)
                self.ollie_backend.eager_sizes.append(EagerSizes.of_module_call(args, kwargs))
        return out

    def ollie_eager_won(self, args: tuple, kwargs: dict) -> bool:
        """Whether the call goes to the module itself."""
        return covered(self.ollie_backend.eager_sizes, args, kwargs)


def _optimize_module(module: torch.nn.Module, options: Options,
                     dynamic: bool | None = None) -> torch.nn.Module:
    backend = OllieBackend(options)
    backend.calls_skipped_directly = True  # where eager won, the module is called itself
    compiled = torch.compile(module, backend=backend, dynamic=dynamic)
    through_dynamo = compiled.forward
    races: dict[tuple, CallRace] = {}  # (``OptimizedModule.ollie_races``)
    breaks = _GraphBreaks()

    def forward(*args, **kwargs):
        """Through Dynamo, bracketed to record its graph breaks and where eager won. (A
        wrapper, not module hooks: two hooks cost a call ~25 µs in ``Module._call_impl``'s
        slow path.)"""
        frames, graphs, skipped = breaks.before_call(), backend.graphs, backend.skipped_functions
        out = through_dynamo(*args, **kwargs)
        breaks.after_call(frames)
        if backend.graphs - graphs == backend.skipped_functions - skipped > 0:
            # each graph of the call was all of forward
            backend.eager_sizes.append(EagerSizes.of_module_call(args, kwargs))
        if backend.race is not None:
            races[_signature(args, kwargs)], backend.race = backend.race, None
        return out

    def explain(*args, **kwargs) -> Explanation:
        if (args or kwargs) and not backend.graphs:
            compiled(*args, **kwargs)
        return Explanation(type(module).__name__, backend, dict(breaks.seen))

    compiled.__class__ = OptimizedModule
    compiled.forward, compiled.ollie_races = forward, races
    compiled.explain, compiled.ollie_backend = explain, backend
    object.__setattr__(compiled, "ollie_module", module)  # not a second submodule
    return compiled


def _signature(args: tuple, kwargs: dict) -> tuple:
    """What Dynamo's guards would tell apart in a module's arguments, as far as an eager
    choice is concerned: each tensor's shape, dtype and device; the type of anything else.
    (Few objects made: Python allocations between two calls slowed a 0.3 ms call by 10-20 µs
    on this CPU, likely through the allocator's reuse of the call's large buffers.)"""
    values = args + tuple(kwargs[k] for k in sorted(kwargs)) if kwargs else args
    signature = tuple([(x.shape, x.dtype, x.device) if isinstance(x, torch.Tensor)
                       else type(x) for x in values])
    return signature + tuple(sorted(kwargs)) if kwargs else signature


def explain(fn: Callable, *args, **kwargs) -> Explanation:
    """``ollie.explain(f, *args)``: like ``f.explain(*args)``, optimizing ``f`` if needed."""
    if isinstance(fn, torch.nn.Module):
        kind = "module"
        by_torch = isinstance(fn, torch._dynamo.eval_frame.OptimizedModule) and \
            not isinstance(fn, OptimizedModule)
    else:
        kind = "function"
        by_torch = hasattr(fn, "_torchdynamo_orig_callable") and \
            not isinstance(fn, OptimizedFunction)
    if by_torch:
        raise TypeError(f"ollie.explain: this {kind} was compiled by torch.compile, whose "
                        "backend keeps no record Ollie can read; compile it with "
                        "ollie.optimize (the same compile, with a record) and explain that")
    if not isinstance(fn, (OptimizedFunction, OptimizedModule)):
        fn = optimize(fn)
    return fn.explain(*args, **kwargs)


def _name(fn) -> str:
    return (getattr(fn, "__qualname__", None) or getattr(getattr(fn, "func", None), "__name__",
                                                          None) or type(fn).__name__)
