"""Which artifact of an inference graph runs at which size.

A rewritten graph runs compiled or as it is (library calls), whichever was measured faster;
with one size symbol the choice is measured again at a larger size and, where it flips, each
call picks by its size. Where a region's rewrite does more multiply-adds than the original on
one side of a size (``size_range.one_branch``), the original graph runs there, compiled or as
it is, again by measurement: a branch on the size, so that no size compiles again. Plus the
plumbing for compiling and timing inside AOTAutograd's compilers.
"""
from __future__ import annotations

import torch

from ollie import cache
from ollie.capture import eager_or_compiled, graph_pass, size_range
from ollie.capture.aten import nothing_to_fuse
from ollie.capture.samples import real_computation, sample_like
from ollie.cost import measure
from ollie.decision import Outcome

# The cache key suffixes of a rewritten graph's eager-vs-compiled comparison, and of the
# original graph's outside a size branch
EAGERLY = "-eagerly"
OUTSIDE = "-outside-branch"
UP_TO = "-up-to"  # the sizes where the original (run by Ollie, or called directly) wins

# Dynamo's own control flow, raised through a backend on purpose: it restarts the analysis
# (a scalar to tensorify, a speculation to undo) or skips the frame. Never caught by Ollie.
DYNAMO_CONTROL = (torch._dynamo.exc.RestartAnalysis, torch._dynamo.exc.SkipFrame)


def compiled_or_eager(graph, inputs, kwargs, wrap, example_inputs, report, key: str, options,
                      compiled=None):
    """The rewritten graph compiled, or run as it is (library calls), whichever ran
    faster (measured, or stored from an earlier measurement): after a rewrite that leaves
    few, large contractions (four convolutions merged into one), Inductor's kernels around
    them may cost more than they fuse. With one size symbol the choice is made again at a
    larger size; where it flips, each call picks by its size (``size_range.by_size``)."""
    from torch._functorch.aot_autograd import make_boxed_func
    from torch._inductor.compile_fx import compile_fx_inner

    def compiled_once():
        nonlocal compiled
        if compiled is None:
            compiled = wrap(compile_fx_inner(graph, inputs, **kwargs))
        return compiled
    eager = wrap(make_boxed_func(graph.forward))
    # not compiled yet, and only library calls: Inductor's wrapper would add its own cost;
    # where it is compiled already, measured (Inductor's call of a small product can win)
    assumed = compiled is None and nothing_to_fuse(graph.graph)
    lone = size_range.lone_symbol(example_inputs)
    larger = size_range.larger_size(example_inputs, lone[0]) if lone else None
    eagerly = []
    for at in [None] + ([{lone[0]: larger}] if larger else []):
        suffix = EAGERLY + (f"-at-{larger}" if at else "")
        timing = graph_pass.GraphReport(report.title)
        won = graph_pass.stored_comparison(key + suffix, timing, options)
        if won is None and assumed:
            won = True
        elif won is None:
            with real_computation():
                won = graph_pass.compare(compiled_once(), eager, example_inputs, timing,
                                         options, key + suffix, at, eagerly=True)
        if at is None:
            report.eager_timing = timing.timing
        eagerly.append(won)
    report.runs_eagerly = eagerly[0]
    if len(set(eagerly)) == 1:
        return eager if eagerly[0] else compiled_once()
    symbol, where = lone
    threshold = size_range.crossover(example_inputs, symbol, larger)
    report.by_size = f"{'uncompiled' if eagerly[1] else 'compiled'} where {symbol} > " \
                     f"{threshold} (measured again at {larger})"
    small, large = (eager, compiled_once()) if eagerly[0] else (compiled_once(), eager)
    return size_range.by_size(small, large, where, threshold)


def eager_below(gm, compiled, example_inputs, store, key: str, budget_s: float):
    """For a Dynamo graph with one size symbol that ran faster eagerly at its hint, the
    eager-or-compiled choice measured again at a larger size. Where ``compiled`` wins there:
    ``(artifact, symbol, threshold, larger, there)``, the artifact picking per call by the size,
    eager up to ``threshold`` (``size_range.crossover``), so that no size compiles again (a
    guard near the hint would make larger calls compile, derive and measure anew); ``there``
    is the choice at the size ``larger``. None where eager wins there too, or no larger size can
    be measured."""
    at_larger = _larger(gm, example_inputs)
    if at_larger is None:
        return None
    symbol, where, larger, fakes = at_larger
    k = f"{key}-at-{larger}"
    try:
        with real_computation():
            there = eager_or_compiled.stored(store, k) or eager_or_compiled.choose(
                gm, compiled, fakes, budget_s, store, k, at={symbol: larger})
    except DYNAMO_CONTROL:
        raise
    except Exception:  # the graph does not run at that size on sample data
        return None
    if there.adopted:  # eager there too
        return None
    threshold = size_range.crossover(example_inputs, symbol, larger)
    return size_range.by_size(gm.forward, compiled, where, threshold, boxed=False), symbol, \
        threshold, larger, there


def eager_everywhere(gm, example_inputs, store, key: str) -> bool:
    """Whether a Dynamo graph whose stored choice at its hint is eager runs eagerly at every
    size without compiling: it has no lone size symbol, no larger size to measure at, or the
    choice stored at the larger size (``eager_below``) is eager too."""
    at_larger = _larger(gm, example_inputs)
    if at_larger is None:
        return True
    there = eager_or_compiled.stored(store, f"{key}-at-{at_larger[2]}")
    return there is not None and there.adopted


def _larger(gm, example_inputs) -> tuple | None:
    """``(symbol, where, larger size, fake inputs)`` for a graph with one size symbol and a
    larger size to sample at (the fake inputs carry the size symbols, to sample at others)."""
    lone = size_range.lone_symbol(example_inputs)
    if lone is None:
        return None
    fakes = _fakes(gm, example_inputs)
    larger = size_range.larger_size(fakes, lone[0])
    return (*lone, larger, fakes) if larger else None


def within_branch(gm, example_inputs, kwargs, chosen, report, key: str, options,
                  whole_function: bool, original=None) -> tuple:
    """``(artifact, direct, uncompiled)``: ``chosen`` (the rewritten graph's artifact) at the
    sizes of the report's branch; outside them, the original graph, compiled or as it is,
    whichever ran faster at a size there (``size_range.outside``). A branch on the size: no
    size compiles again. ``direct``: the sizes (symbol -> highest) where the original runs as
    it is and ``ollie.optimize`` may call the function itself (``whole_function``), or {};
    ``uncompiled``: ``(symbol, low, high)`` where the original runs as it is outside ``low
    <= symbol <= high`` (``eager_outside``), or None."""
    from torch._functorch.aot_autograd import make_boxed_func
    from torch._inductor.compile_fx import compile_fx_inner

    if report.size_branch is None:
        return chosen, {}, None
    symbol, low, high = report.size_branch
    where = size_range.carrier(example_inputs, symbol)
    if where is None:  # no argument carries the size: Dynamo's guard keeps the range
        size_range.guard(symbol, low, high, size_range.sizes(example_inputs))
        return chosen, {}, None
    eager = make_boxed_func(gm.forward)
    uncompiled = nothing_to_fuse(gm.graph)  # no measurement: Inductor would add only its wrapper
    if original is None and not uncompiled:
        strides = take_output_strides()  # the rewritten graph's are the ones reported
        original = compile_fx_inner(gm, example_inputs, **kwargs)
        take_output_strides()
        give_output_strides(strides)
    other, at = (eager if uncompiled else original), \
        size_range.outside(example_inputs, symbol, low, high)
    direct_sizes = {}
    # below the branch, ollie.optimize can call a whole function itself, without Dynamo
    direct = whole_function and low is not None
    if at is not None:
        suffix = f"{OUTSIDE}-at-{at}" + ("-called-directly" if direct else "")
        timing = graph_pass.GraphReport(report.title)
        won = True if uncompiled else graph_pass.stored_comparison(key + suffix, timing, options)
        if won is None:
            with real_computation():
                won = graph_pass.compare(original, eager, example_inputs, timing,
                                         options, key + suffix, {symbol: at}, eagerly=True,
                                         frame=direct)
        other = eager if won else original
        if low is not None:  # the multiply-adds cross at low; the times may cross later
            low = measured_up_to(chosen, other, example_inputs, symbol, low, key + suffix,
                                 options) + 1
        if won and direct:
            frame = eager_or_compiled.dynamo_call_overhead(example_inputs, called_directly=True)
            direct_sizes = {symbol: measured_up_to(chosen, eager, example_inputs, symbol, low,
                                                   key + suffix + "-directly", options, frame)}
    runs = "the original graph" + (", uncompiled," if other is not original else "") + \
        f" where {symbol} " + (f"< {low}" if low is not None else f"> {high}") + \
        " (fewer multiply-adds there, or measured faster)" + \
        (f"; ollie.optimize calls the function itself where {symbol} <= "
         f"{direct_sizes[symbol]}" if direct_sizes else "")
    report.by_size = "; ".join(filter(None, [report.by_size, runs]))
    uncompiled = (symbol, low, high) if other is eager else None
    if low is not None:
        return size_range.by_size(other, chosen, where, low - 1), direct_sizes, uncompiled
    return size_range.by_size(chosen, other, where, high), direct_sizes, uncompiled


def eager_outside(gm, compiled, example_inputs, branch: tuple):
    """``compiled`` (a Dynamo graph's artifact), with the graph run by eager PyTorch at the
    sizes outside ``branch`` (``(symbol, low, high)``, ``within_branch``'s): the artifact runs
    the original graph as it is there too, but through AOTAutograd's runtime wrappers and
    Ollie's, whose Python slows small calls (``(a @ b) @ c`` at 32 × 512 × 512 × 64 through
    ``torch.compile``: 0.28 ms this way, 0.42 ms through them)."""
    symbol, low, high = branch
    where = size_range.carrier(_fakes(gm, example_inputs), symbol)
    if where is None:
        return compiled
    if low is not None:
        return size_range.by_size(gm.forward, compiled, where, low - 1, boxed=False)
    return size_range.by_size(compiled, gm.forward, where, high, boxed=False)


def _fakes(gm, example_inputs) -> list:
    """Dynamo's example inputs are real tensors of the hint's sizes; the placeholders' fake
    values carry the size symbols."""
    return [n.meta.get("example_value", x) for n, x in
            zip(gm.graph.find_nodes(op="placeholder"), example_inputs)]


def measured_up_to(chosen, original, example_inputs, symbol, low: int, key: str, options,
                   frame: float = 0.0) -> int:
    """The largest size where ``original`` (the original graph, compiled or as it is) beats
    ``chosen``: ``low - 1`` at least (there the original does fewer multiply-adds), further
    where it still leads at ``low``: the library's speed per multiply-add differs between
    the two (a product by a thin matrix runs slower per multiply-add), and Dynamo's frame
    (``frame`` seconds, which ``ollie.optimize`` saves calling the function itself) costs a
    constant they leave out. The lead ends where lines through the two sides' times at
    ``low`` and ``2 low`` cross. Stored under ``key``."""
    stored = cache.Cache(options.cache_dir).get(key + UP_TO) if options.cache else None
    if stored and isinstance(stored.get("up_to"), int):
        return stored["up_to"]
    up_to = low - 1
    if 2 * low <= (size_range.larger_size(example_inputs, symbol) or 0):
        times = []
        with real_computation():
            for n in (low, 2 * low):
                inputs = sample_like(example_inputs, {symbol: n})
                with torch.no_grad(), torch.random.fork_rng(devices=[]):
                    timing = measure.compare(lambda: chosen(list(inputs)),
                                             lambda: original(list(inputs)),
                                             budget_s=options.measure_cap_s)
                times.append(timing.eager_median + frame - timing.ollie_median)  # its lead
        lead_at_low, lead_at_twice = times
        if lead_at_low > 0:
            up_to = 2 * low if lead_at_twice > 0 else \
                low + int(low * lead_at_low / (lead_at_low - lead_at_twice))
    if options.cache:
        cache.Cache(options.cache_dir).put(key + UP_TO, {"decision": Outcome.MEASURED.value,
                                                         "up_to": up_to, "remeasured": 0})
    return up_to


def take_output_strides() -> list | None:
    """Empty the tracing context's record of output strides and return what it held."""
    context = torch._guards.TracingContext.try_get()
    if context is None or context.output_strides is None:
        return None
    taken = list(context.output_strides)
    context.output_strides.clear()
    return taken


def give_output_strides(strides: list | None) -> None:
    context = torch._guards.TracingContext.try_get()
    if strides is not None and context is not None and context.output_strides is not None:
        context.output_strides.extend(strides)
