"""The faster of eager and compiled, per Dynamo graph.

Inductor is not always faster than the library calls eager PyTorch makes: a transposed
convolution at batch 1 or a transposed matrix-vector product run 2–3× slower compiled on a
CPU. Users want the fastest correct program, so each inference graph is run both ways on
sample inputs of its shapes, interleaved (``measure.compare``), and the graph as Dynamo
captured it (what eager PyTorch runs, without the Python around it) replaces the compiled
artifact only when it is faster beyond the comparison's noise (``decision.noise_margin``).
Where that graph is a whole function of the user's, Dynamo is asked to skip the function
(its frame and guards cost more than many a small kernel). Where ``ollie.optimize`` calls
the function and the two differ by about that frame, its first calls time both as they run
(``CallRace``): no probe prices a module's guards well. At symbolic sizes an eager win
covers the sizes near the measured ones (``EagerSizes``), which ``ollie.optimize`` then calls
directly. The choice is stored in the disk cache: a second process neither measures nor,
when eager won, compiles.

Training graphs keep the compiled artifact: their backward is compiled with the forward, and
one forward timing would not judge both.
"""
from __future__ import annotations

import functools
import hashlib
import statistics
import time
from typing import Any, Callable

import torch
import torch.fx as fx

from ollie import cache
from ollie.capture import frozen
from ollie.capture.direct_calls import EagerSizes, whole_user_function, \
    wraps_torch_function
from ollie.capture.samples import sample_like
from ollie.capture.symbolic import has_symbolic_sizes
from ollie.cost import measure
from ollie.decision import Decision, Outcome, decide, noise_margin
from ollie import decision as decisions


def describe(choice: Decision, number: int, compiled: str = "Inductor's compile") -> str:
    """One line for ``explain`` on the choice between graph ``number``'s compile (the
    baseline) and the graph run eagerly (the challenger); ``compiled`` names what the
    compiled artifact runs."""
    runs = "runs eagerly (library calls)" if choice.adopted else f"runs {compiled}"
    if choice.baseline_s is None or choice.challenger_s is None:
        return f"graph {number} {runs}"
    ratio = choice.ratio
    stored = ", stored in the disk cache" if choice.stored else ""
    if choice.adopted:
        return (f"graph {number} {runs}: {ratio:.2f}× faster than {compiled} "
                f"({choice.challenger_s * 1e3:.3f} ms vs {choice.baseline_s * 1e3:.3f} ms"
                f"{stored})")
    return (f"graph {number} {runs}: {1 / ratio:.2f}× eager's speed "
            f"({choice.baseline_s * 1e3:.3f} ms vs {choice.challenger_s * 1e3:.3f} ms eager"
            f"{stored})")


def calls_other_functions() -> bool:
    """Whether the function Dynamo is compiling calls Python functions it inlined (a
    module's ``forward``, a helper). Skipped, such a function runs under Dynamo's frame hook
    and each callee is intercepted and compiled again (a stack of four BERT layers became
    four graphs)."""
    from torch._dynamo.symbolic_convert import InstructionTranslator
    context = torch._guards.TracingContext.try_get()
    code = InstructionTranslator.current_tx().f_code
    return wraps_torch_function(code) or \
        context is not None and bool(set(context.traced_code) - {code})


def is_inference(example_inputs) -> bool:
    """Whether the graph runs without autograd (AOTAutograd then makes one inference graph)."""
    return not torch.is_grad_enabled() or not any(
        isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs)


def key(gm: fx.GraphModule, example_inputs) -> str:
    """What the choice depends on: the graph and its inputs' shapes, layouts, dtypes and
    device (the cache adds the versions of Ollie, torch and the compilers, and the machine's
    thread count through the device string)."""
    h = hashlib.sha256(gm.code.encode())
    for x in example_inputs:
        if isinstance(x, torch.Tensor):
            h.update(repr((tuple(x.shape), tuple(x.stride()), str(x.dtype),
                           x.device.type)).encode())
        else:
            h.update(repr(x).encode())
    h.update(measure.device_string().encode())
    return "runner-" + h.hexdigest()


def stored(store: cache.Cache | None, k: str) -> Decision | None:
    """The choice stored under ``k``: adopted where the graph runs eagerly."""
    choice = decisions.stored(store.get(k) if store is not None else None)
    return choice if choice and choice.outcome in (Outcome.ADOPTED, Outcome.NOT_FASTER) \
        else None


def choose(gm: fx.GraphModule, compiled, example_inputs, budget_s: float,
           store: cache.Cache | None, k: str, called_directly: bool = False,
           at: dict | None = None) -> Decision:
    """Time ``gm`` itself (the challenger) against ``compiled`` (the baseline) on sample
    inputs; eager runs only when it leads by more than the comparison's noise
    (``decision.noise_margin``). Where eager would let Dynamo skip the function (a whole
    function at static sizes that calls no other, or one ``ollie.optimize`` calls), each
    side is first charged the Python the timing leaves out: the compiled side Dynamo's
    frame and guards on every call (``called_directly``: ``ollie.optimize`` then calls the
    function itself, without torch.compile's wrapper either, at symbolic sizes where an
    ``EagerSizes`` covers the call), the eager side the calls of the modules it runs.
    Where ``ollie.optimize`` calls the function and the frame's cost could decide, or eager
    runs a fused kernel the graph does not show (``eager_runs_a_fast_path``), nothing is
    decided (``Outcome.MEASURED``): a ``CallRace`` times both at the user's calls.
    ``at``: sizes for the size symbols, instead of their hints."""
    inputs = sample_like(example_inputs, at)
    if isinstance(compiled, frozen.FrozenWeights):  # timed as it runs: on its weights
        inputs = compiled.with_weights(inputs)
    skippable = whole_user_function(gm) and (called_directly or not calls_other_functions()
                                             and not has_symbolic_sizes(example_inputs))
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        timing = measure.compare(lambda: compiled(*inputs), lambda: gm.forward(*inputs),
                                 budget_s=budget_s)
    margin = noise_margin(timing.spread)
    charges = (0.0, 0.0)
    if skippable:
        modules = module_calls(gm) * module_call_overhead()
        if called_directly and (frame_decides(timing, margin, example_inputs, modules) or
                                eager_runs_a_fast_path(gm) and
                                not decide(timing, margin, 0.0, modules).adopted):
            return Decision(Outcome.MEASURED, timing.eager_median, timing.ollie_median,
                            timing.speedup, timing.spread, margin)  # a ``CallRace`` decides
        charges = (frame_charge(timing, margin, example_inputs, called_directly, modules),
                   modules)
    choice = decide(timing, margin, *charges)
    if store is not None:
        store.put(k, choice.entry())
    return choice


# Torch modules whose eager inference runs one fused kernel (their "fast path") where the
# graph Dynamo captures runs the module's ops one by one: eager's speed there is not the
# captured graph's (nn.MultiheadAttention: 0.6 ms eager, 1.0-1.2 ms its graph run eagerly).
FAST_PATH_MODULES = (torch.nn.MultiheadAttention, torch.nn.TransformerEncoderLayer,
                     torch.nn.TransformerEncoder)


def eager_runs_a_fast_path(gm: fx.GraphModule) -> bool:
    """Whether the graph holds a module whose eager inference runs a fused kernel the graph
    does not show (``FAST_PATH_MODULES``): only the user's calls can time eager there."""
    return any(isinstance(cls, type) and issubclass(cls, FAST_PATH_MODULES)
               for node in gm.graph.nodes
               for _, cls in node.meta.get("nn_module_stack", {}).values())


def _probe(*xs):
    return torch._foreach_add(xs, 1)  # one library call: the guards are what it measures


def frame_charge(timing, margin: float, example_inputs, called_directly: bool,
                 challenger_charge_s: float = 0.0) -> float:
    """Dynamo's frame on each call of the baseline (``dynamo_call_overhead``), where the
    challenger would run without it; 0 where it cannot decide. Calibrating the frame costs a
    compile and thousands of calls, so it is done only where it can decide whether the
    challenger wins (runs within ``margin`` of the baseline): not where it wins without the
    charge, nor where it loses even against the charge's bound (``frame_bound``)."""
    if not frame_decides(timing, margin, example_inputs, challenger_charge_s):
        return 0.0
    return dynamo_call_overhead(example_inputs, called_directly)


def frame_decides(timing, margin: float, example_inputs, challenger_charge_s: float) -> bool:
    """Whether Dynamo's frame could decide for the challenger: it loses without the frame
    charged to the baseline, and wins against the frame's bound (``frame_bound``)."""
    return not decide(timing, margin, 0.0, challenger_charge_s).adopted and \
        decide(timing, margin, frame_bound(example_inputs), challenger_charge_s).adopted


def frame_bound(example_inputs) -> float:
    """An upper bound on ``dynamo_call_overhead``, free to compute: 50 µs and 1 µs per tensor
    input (measured: 29 µs for 3 tensors, 75 µs for 100, 214 µs for 300)."""
    return 50e-6 + 1e-6 * sum(isinstance(x, torch.Tensor) for x in example_inputs)


class CallRace:
    """Eager PyTorch against the compiled artifact at the user's own calls, as they run,
    where sample timings cannot tell: where Dynamo's frame decides between them (a probe's
    calibration misjudges it: the guards of a module's submodules and parameters cost a
    two-Linear module 15-25 µs more a call than a function's on as many tensors), and where
    eager runs a fused kernel the graph does not show (``eager_runs_a_fast_path``). The
    sides are then close, which bounds what the race costs. Each call runs one side only,
    in blocks of ``BLOCK`` calls, as a program calls them; each block's first call, which
    pays for what the other side left behind, is not counted. After ``BLOCKS`` blocks a
    side, eager wins (the decision is adopted) where its median leads by the noise of the
    calls' times (``noise_margin`` of the larger relative half inter-quartile range), and
    ``settled(decision)`` is told. A race waits through calls it cannot time (other sizes,
    or under grad) only ``PATIENCE`` in a row: a decoder's length, new at every call, never
    comes back to the raced one; then it is given up (``given_up()``), the compile kept."""
    BLOCK, BLOCKS = 4, 4
    PATIENCE = 2 * BLOCK * BLOCKS

    def __init__(self, settled: Callable[[Decision], None], clock=time.perf_counter,
                 covers: EagerSizes | None = None, given_up: Callable[[], None] = lambda: None):
        self.settled, self.clock, self.given_up = settled, clock, given_up
        self.covers = covers  # the calls an eager win covers (None: the raced signature's)
        self.calls = 0
        self.waited = 0  # calls in a row the race could not time
        self.times: tuple[list[float], list[float]] = ([], [])  # compiled's, eager's
        self.decision: Decision | None = None

    @classmethod
    def of_graph(cls, number: int, compiled: str, store: cache.Cache | None, key: str,
                 note: Callable[[str], None], covers: EagerSizes | None,
                 eager_sizes: list[EagerSizes]) -> CallRace:
        """The race of graph ``number`` (whose compiled artifact ``compiled`` names), noted
        now and when settled, its outcome stored under ``key``; an eager win adds what it
        ``covers`` (of a graph with symbolic sizes) to ``eager_sizes``."""
        def settled(choice: Decision) -> None:
            if store is not None:
                store.put(key, choice.entry())
            if choice.adopted and covers is not None:
                eager_sizes.append(covers)
            note(describe(choice, number, compiled) + ", timed at the user's calls" +
                 ("; ollie.optimize calls the function directly" if choice.adopted else ""))

        note(f"graph {number}: the sample timing cannot tell eager PyTorch from {compiled}: "
             f"the first {2 * cls.BLOCK * cls.BLOCKS} calls time both as they run, each "
             "running one")
        return cls(settled, covers=covers, given_up=lambda: note(
            f"graph {number}: the race of eager PyTorch and {compiled} was given up: "
            f"{cls.PATIENCE} calls in a row came with other sizes (or grad); it runs {compiled}"))

    def passed_by(self) -> bool:
        """A call the race cannot time; whether the race is now given up."""
        self.waited += 1
        if self.waited < self.PATIENCE:
            return False
        self.given_up()
        return True

    def run(self, eager: Callable[[], Any], compiled: Callable[[], Any]):
        self.waited = 0
        side = self.calls // self.BLOCK % 2  # compiled first: it has just run (compiling)
        start = self.clock()
        out = (eager if side else compiled)()
        if self.calls % self.BLOCK:
            self.times[side].append(self.clock() - start)
        self.calls += 1
        if self.calls == 2 * self.BLOCK * self.BLOCKS:
            compiled_s, eager_s = (statistics.median(t) for t in self.times)
            spread = max((q[2] - q[0]) / 2 / q[1]
                         for q in (statistics.quantiles(t, n=4) for t in self.times))
            self.decision = decide(measure.Comparison(compiled_s, eager_s, compiled_s / eager_s,
                                                      spread, len(self.times[0])),
                                   noise_margin(spread))
            self.settled(self.decision)
        return out


def dynamo_call_overhead(example_inputs, called_directly: bool = False) -> float:
    """Seconds a call of a compiled function with these inputs spends in Dynamo's frame and
    guards beyond a call Dynamo skips, or (``called_directly``) beyond a plain call (its
    guards check each tensor input, so the cost grows with their number and ranks: 15-20 µs
    beyond a skip, 25-35 µs beyond a plain call, for three tensors on a 2-core CPU VM)."""
    ranks = tuple(x.dim() for x in example_inputs if isinstance(x, torch.Tensor))
    return _calibrated_overhead(ranks or (0,), called_directly)


def module_calls(gm: fx.GraphModule) -> int:
    """How many module calls the graph inlined (the innermost module of each node)."""
    return len({next(reversed(n.meta["nn_module_stack"]))
                for n in gm.graph.nodes if n.meta.get("nn_module_stack")})


@functools.cache
def module_call_overhead() -> float:
    """Seconds eager PyTorch spends in ``nn.Module.__call__`` and a ``forward``, measured
    once per process on a module that does nothing."""
    identity = torch.nn.Identity()
    return max(0.0, _best_per_call(lambda: identity(None)) - _best_per_call(lambda: None))


@functools.cache
def _calibrated_overhead(ranks: tuple[int, ...], called_directly: bool) -> float:
    """Measured once per process and tensor ranks, on a function of tensors of those ranks
    that does next to nothing (two tiny compiles, or one and the function itself)."""
    def skip(gm, example_inputs):
        raise torch._dynamo.exc.SkipFrame("ollie: the skipped side of a calibration")

    xs = [torch.ones((1,) * r) for r in ranks]
    name = "ollie_probe_" + "_".join(map(str, ranks))
    traced = torch.compile(own_code(_probe, name), backend=lambda gm, example_inputs: gm.forward)
    baseline = _probe if called_directly else \
        torch.compile(own_code(_probe, name + "_skipped"), backend=skip)
    per_call = []
    for fn in (traced, baseline):
        fn(*xs), fn(*xs)
        per_call.append(_best_per_call(lambda: fn(*xs)))
    return max(0.0, per_call[0] - per_call[1])


def _best_per_call(call, number: int = 200) -> float:
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(number):
            call()
        best = min(best, (time.perf_counter() - t0) / number)
    return best


def own_code(fn, name: str | None = None):
    """``fn`` with a copy of its code object of its own. Dynamo keeps its caches and skips per
    code object: two backends compiling one function would make every call of either walk
    the other's guards first (tens of µs), so each compiled variant gets its own copy.
    Dynamo remembers the sizes a function was called with by its name and place, though:
    functions made by one ``def`` for different problems need different ``name``s, or the
    second is compiled with the sizes that differ from the first's made symbolic."""
    import types

    if not isinstance(fn, types.FunctionType):
        return fn
    code = fn.__code__.replace(co_name=name, co_qualname=name) if name else fn.__code__.replace()
    copy = types.FunctionType(code, fn.__globals__, name or fn.__name__,
                              fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__, copy.__qualname__ = fn.__kwdefaults__, name or fn.__qualname__
    return copy
