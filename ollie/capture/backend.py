"""The ``torch.compile`` backend ``"ollie"``.

    torch.compile(model, backend="ollie", options={"budget_s": 1.0})

TorchDynamo captures the Python (guards, graph breaks) and calls the backend once per graph.
Ollie hands it to Inductor's ``compile_fx`` with its own ``inner_compile``: AOTAutograd makes
functional core-ATen graphs (the forward, the backward, or one inference graph), and each
reaches ``OllieBackend._inner`` before Inductor compiles it. There Ollie rewrites what it can
improve (``ollie.capture.graph_pass``), and the faster of the original and the rewritten
graph is kept, compiled or as it is, per size range (``ollie.capture.size_branches``). An
inference graph with weights is compiled once more with them frozen in, kept where faster
(``ollie.capture.frozen``); the artifact is then timed against the Dynamo graph run eagerly
(``ollie.capture.eager_or_compiled``). ``inductor=False`` runs the graphs through
AOTAutograd alone. Ollie's compile carries its own cache identity, so a warm start loads
Ollie's choice from AOTAutograd's cache without reaching ``_inner``.

Ollie never re-traces user code and never runs it: what it measures is the ATen graph, on
sample inputs. A graph Ollie fails on goes to Inductor untouched; one Inductor cannot
compile either runs eagerly; each with a one-line ``OllieWarning``. Dynamo's own control
exceptions pass through.
"""
from __future__ import annotations

import functools
import logging
import warnings
from typing import Callable

import torch

from ollie import cache, log, progress
from ollie.capture import compilers, direct_calls, eager_or_compiled, folding, frozen, \
    generated_rules, graph_pass, rewrite, second_compile, size_branches, size_range, substitution
from ollie.capture.samples import real_computation, unsupported
from ollie.capture.size_branches import DYNAMO_CONTROL, give_output_strides, take_output_strides
from ollie.capture.report import graph_line
from ollie.decision import Outcome
from ollie.log import first_line
from ollie.options import Options

# The cache key suffix of the regions' rewrite against the graph substitutions alone
ALTERNATIVE = "-substitutions-alone"

# A graph with symbolic sizes runs eagerly at sizes up to this factor of the measured ones
EAGER_RANGE = 2


class OllieWarning(UserWarning):
    """Ollie left (part of) a program to Inductor or to eager PyTorch; the message says why."""


class OllieBackend:
    """A backend with options and a memory of what it did (``reports``, for ``explain``)."""

    def __init__(self, options: Options | None = None):
        self.options = options or Options()
        self.reports: list[graph_pass.GraphReport] = []
        self.notes: list[str] = []      # what runs a whole Dynamo graph when not Ollie, and why
        self.graphs = 0                 # graphs Dynamo handed over
        self.skipped_functions = 0      # whole functions left to eager PyTorch
        self.eager_sizes: list[direct_calls.EagerSizes] = []  # ... at these sizes
        self.inner_calls = 0            # ATen graphs that reached Ollie's rewrite
        self.frozen_graphs: dict[int, bool] = {}  # weights frozen in: graph -> into a rewrite
        # graph -> Ollie's adopted rewrite of its inference graph (what freezing compiles)
        self.adopted: dict[int, torch.fx.GraphModule] = {}
        self.on_graph: Callable[[], None] | None = None  # told first whenever handed a graph
        self.calls_skipped_directly = False  # a skipped function is called without Dynamo
        self.race: eager_or_compiled.CallRace | None = None  # for the caller to run: this
        # compile's whole function, where the sample timing could not decide
        # this compile: is its graph a whole user function (callable without Dynamo); sizes
        # (symbol -> highest) it runs eagerly at; (symbol, low, high): the original outside
        self._whole_function, self._direct_bounds, self._uncompiled_outside = False, {}, None

    def __call__(self, gm: torch.fx.GraphModule, example_inputs):
        if self.on_graph is not None:
            self.on_graph()
        self.graphs += 1
        number = self.graphs
        self._direct_bounds, self._uncompiled_outside = {}, None
        self._whole_function = self.calls_skipped_directly and \
            direct_calls.whole_user_function(gm)
        if reason := unsupported(example_inputs):
            return self._eager(gm, f"graph {number} runs eagerly: {reason}")
        stored = self._stored_choice(gm, example_inputs) if self.options.inductor else None
        if stored is not None and stored.adopted and \
                size_branches.eager_everywhere(gm, example_inputs,
                                               cache.Cache(self.options.cache_dir),
                                               self._choice_key(gm, example_inputs)):
            return self._run_eagerly(gm, stored, number, example_inputs)  # won before
        try:
            if not self.options.inductor:
                return compilers.without_inductor(gm, example_inputs,
                                                 functools.partial(self._plain, number))
            inner_calls, traced = self.inner_calls, frozen.traced_metadata()
            compiled = compilers.with_inductor(gm, example_inputs,
                                              functools.partial(self._inner, number),
                                              self.options)
            if self.inner_calls == inner_calls:  # AOTAutograd's cache held Ollie's choice
                self._note(f"graph {number}: the artifact Ollie chose before, from "
                           "AOTAutograd's cache (no derivation, no measurement)")
        except DYNAMO_CONTROL:  # Dynamo's own control flow (restart the analysis, skip)
            raise
        except Exception as e:  # Ollie failed: Inductor's compile of the original graph
            return self._inductor_alone(gm, example_inputs, number, e, stored)
        compiled = self._frozen_or(gm, compiled, example_inputs, number,
                                   frozen.mutates_inputs(traced))
        if self._uncompiled_outside:  # a size branch runs the original graph as it is
            compiled = size_branches.eager_outside(gm, compiled, example_inputs,
                                                   self._uncompiled_outside)
        if self._direct_bounds:  # ... and ollie.optimize may call the function itself
            self._called_directly(gm, example_inputs, self._direct_bounds)
        return self._faster_of_eager(gm, compiled, example_inputs, number, stored)

    def _frozen_or(self, gm, compiled, example_inputs, number: int, mutates: bool | None):
        """``compiled``, or Inductor's compile with the graph's weights frozen in where that
        runs faster (``ollie.capture.frozen.frozen_or``)."""
        if not (self.options.inductor and self.options.freeze):
            return compiled
        store = cache.Cache(self.options.cache_dir) if self.options.cache else None
        # (a choice to freeze Ollie's rewrite is not one to freeze the original: a warm start
        # that took Ollie's artifact from AOTAutograd's cache has only the original)
        rewritten = self.adopted.pop(number, None)
        key = eager_or_compiled.key(gm, example_inputs) + frozen.SUFFIX + \
            ("-rewritten" if rewritten is not None else "")
        try:
            with real_computation():
                artifact, note = frozen.frozen_or(gm, compiled, example_inputs, mutates, store,
                                                  key, self.options.measure_cap_s,
                                                  compilers.INDUCTOR_CONFIG, rewritten)
        except DYNAMO_CONTROL:
            raise
        except Exception as e:  # freezing failed on this graph: the compile as it is
            self._note(f"graph {number}: its weights are not frozen in: {first_line(e)}")
            return compiled
        if note:
            self._note(f"graph {number} {note}")
        if artifact is not compiled:
            self.frozen_graphs[number] = artifact.of_rewrite
        return artifact

    def _inductor_alone(self, gm, example_inputs, number: int, error: Exception, stored):
        """Inductor's compile of the original graph, or eager where that runs faster."""
        try:
            compiled = compilers.with_inductor(gm, example_inputs, None)
        except DYNAMO_CONTROL:
            raise
        except Exception as e:  # a compiler failure must not break the user's program
            return self._eager(gm, f"graph {number} runs eagerly: compiling it failed: "
                                   f"{first_line(e)}")
        note = f"graph {number} runs Inductor's compile of the original: Ollie failed: " \
               f"{first_line(error)}"
        self._note(note, warn=True)
        return self._faster_of_eager(gm, compiled, example_inputs, number, stored)

    def _stored_choice(self, gm, example_inputs):
        if not (self.options.cache and eager_or_compiled.is_inference(example_inputs)):
            return None
        store = cache.Cache(self.options.cache_dir)
        return eager_or_compiled.stored(store, self._choice_key(gm, example_inputs))

    def _choice_key(self, gm, example_inputs) -> str:
        return eager_or_compiled.key(gm, example_inputs) + \
            ("-called-directly" if self.calls_skipped_directly else "")

    def _faster_of_eager(self, gm, compiled, example_inputs, number: int, stored):
        """``compiled``, or the graph itself where eager library calls run faster."""
        if stored is not None:
            choice = stored
        elif not eager_or_compiled.is_inference(example_inputs):
            return compiled
        else:
            store = cache.Cache(self.options.cache_dir) if self.options.cache else None
            directly, covers = direct_calls.direct_calls(gm, example_inputs, EAGER_RANGE) \
                if self.calls_skipped_directly else (False, None)
            try:
                with real_computation():
                    choice = eager_or_compiled.choose(
                        gm, compiled, example_inputs, self.options.measure_cap_s, store,
                        self._choice_key(gm, example_inputs), directly)
            except DYNAMO_CONTROL:
                raise
            except Exception:  # the graph does not run on sample data: keep the compile
                return compiled
        if choice.outcome is Outcome.MEASURED:  # the samples cannot decide: timed at calls
            self.race = eager_or_compiled.CallRace.of_graph(
                number, self._compiled_artifact(number), store,
                self._choice_key(gm, example_inputs), self._note, covers, self.eager_sizes)
            return compiled
        if choice.adopted:  # the graph run eagerly
            return self._eager_below(gm, compiled, choice, number, example_inputs) or \
                self._run_eagerly(gm, choice, number, example_inputs)
        self._note(eager_or_compiled.describe(choice, number, self._compiled_artifact(number)))
        return compiled

    def _eager_below(self, gm, compiled, choice, number: int, example_inputs):
        """``size_branches.eager_below``'s artifact (eager below a size, ``compiled`` above),
        noted; or None."""
        store = cache.Cache(self.options.cache_dir) if self.options.cache else None
        branch = size_branches.eager_below(gm, compiled, example_inputs, store,
                                           self._choice_key(gm, example_inputs),
                                           self.options.measure_cap_s)
        if branch is None:
            return None
        artifact, symbol, threshold, larger, there = branch
        covered = self._called_directly(gm, example_inputs, {symbol: threshold})
        self._note(eager_or_compiled.describe(choice, number) +
                   f" where {symbol} <= {threshold}; {self._compiled_artifact(number)} above "
                   f"(measured again at {larger}: {1 / there.ratio:.2f}× eager's speed)" +
                   ("; ollie.optimize calls the function directly below" if covered else ""))
        return artifact

    def _called_directly(self, gm, example_inputs, bounds: dict) -> bool:
        """Whether ``ollie.optimize`` (which calls skipped functions itself) may call the
        function of the user's that ``gm`` is all of, without Dynamo, at the sizes ``bounds``
        (symbol -> highest) where it runs eagerly."""
        covered = self.calls_skipped_directly and direct_calls.whole_user_function(gm) \
            and direct_calls.eager_sizes(gm, example_inputs, bounds)
        if covered:
            self.eager_sizes.append(covered)
        return bool(covered)

    def _compiled_artifact(self, number: int) -> str:
        """What graph ``number``'s compiled artifact runs, in words."""
        report = next((r for r in reversed(self.reports)
                       if r.title.endswith(f"graph {number}")), None)
        if number in self.frozen_graphs:
            rewrite = " of Ollie's rewritten graph" if self.frozen_graphs[number] else ""
            return f"Inductor's compile{rewrite} with frozen weights"
        if report is None or not report.adopted:
            return "Inductor's compile"
        return ("Ollie's rewritten graph, uncompiled" if report.runs_eagerly
                else "Inductor's compile of Ollie's rewritten graph")

    def _run_eagerly(self, gm, choice, number: int, example_inputs):
        """The graph as captured, run by eager PyTorch. A whole function of the user's with
        static sizes runs as plain Python from now on, without Dynamo's guards and frame
        (20–70 µs a call on a 2-core CPU): Dynamo skips it, or, where it calls other functions
        of the user's (which Dynamo would intercept one by one), ``ollie.optimize`` calls it
        directly. With symbolic sizes (and no larger size where the compile wins,
        ``_eager_below``) the graph is guarded to sizes up to ``EAGER_RANGE`` times the
        measured ones, where ``ollie.optimize`` calls a whole function directly."""
        told = eager_or_compiled.describe(choice, number)
        bounds = size_range.guard_near_hints(example_inputs, factor=EAGER_RANGE)
        if bounds:
            covered = self._called_directly(gm, example_inputs, bounds)
            held = " and ".join(size_range.describe(s, None, high) for s, high in bounds.items())
            self._note(told + f"; at sizes {held}" +
                       ("; ollie.optimize calls the function directly there" if covered else ""))
            return gm.forward
        if direct_calls.whole_user_function(gm):
            self.skipped_functions += 1
            if eager_or_compiled.calls_other_functions():
                self._note(told + "; the function runs eagerly from now on" +
                           (" (ollie.optimize calls it directly)"
                            if self.calls_skipped_directly else ""))
                return gm.forward
            self._note(told + "; Dynamo skips the function from now on")
            raise torch._dynamo.exc.SkipFrame("ollie: eager PyTorch runs this function faster")
        self._note(told)
        return gm.forward

    # -- AOTAutograd's compilers -------------------------------------------------------------
    def _inner(self, number: int, gm, example_inputs, **kwargs):
        """Inductor's inner compile, with Ollie's rewrite and the compiled A/B in front."""
        from torch._inductor.compile_fx import compile_fx_inner

        self.inner_calls += 1
        title = f"{_kind(kwargs)} graph {number}"
        decompositions = kwargs.get("get_decomp_fn", compilers.decompositions)()
        weights = list(kwargs.get("static_input_idxs") or [])
        if kwargs.get("is_inference"):  # what reads only weights is folded (``folding``)
            generated_rules.mark_weights(gm, weights)
        new, report = self._rewrite(gm, example_inputs, title, decompositions,
                                    guard_sizes=_kind(kwargs) == "inference")
        # folding that saves contraction work: a gain no region measured (asked before
        # Inductor's compile, whose passes change ``gm`` in place)
        folds_work = bool(weights) and kwargs.get("is_inference") and \
            folding.saves_work(gm, weights)
        if new is None and folds_work:  # folding alone is the rewrite
            new = rewrite.copy_graph(gm)[0]
        if new is None:
            self._announce(report)
            return compile_fx_inner(gm, example_inputs, **kwargs)
        if report.alternative is not None:
            new = self._regions_or_substitutions(gm, new, example_inputs, report, kwargs)
        key = graph_pass.comparison_key(gm, example_inputs, report)
        stored = graph_pass.stored_comparison(key, report, self.options)
        if weights and kwargs.get("is_inference") and self.options.freeze:
            self.adopted[number] = rewrite.copy_graph(new)[0]  # (Inductor's passes edit new)
        graph, inputs, wrap = folding.with_folded_weights(new, example_inputs, kwargs, report)
        if stored is not None:  # measured before: compile only the winner
            report.adopted = stored
            self._announce(report)
            if not stored:
                self.adopted.pop(number, None)
                return compile_fx_inner(gm, example_inputs, **kwargs)
            if _kind(kwargs) == "inference":
                chosen = size_branches.compiled_or_eager(graph, inputs, kwargs, wrap,
                                                         example_inputs, report, key,
                                                         self.options)
                return self._within_branch(gm, example_inputs, kwargs, chosen, report, key)
            return self._compile_rewritten(graph, inputs, kwargs, wrap, report) or \
                compile_fx_inner(gm, example_inputs, **kwargs)
        graphs = second_compile.uncompiled(gm, graph, wrap)  # (before Inductor edits gm)
        original = compile_fx_inner(gm, example_inputs, **kwargs)
        strides = take_output_strides()  # each compile reports its outputs' strides to AOT
        with real_computation():
            worth_compiling = folds_work or second_compile.can_pay_off(
                original, example_inputs, report, key, self.options, graphs)
        if not worth_compiling:
            give_output_strides(strides)
            self._announce(report)
            self.adopted.pop(number, None)
            return original
        rewritten = self._compile_rewritten(graph, inputs, kwargs, wrap, report)
        if rewritten is None:
            take_output_strides()
            give_output_strides(strides)
            self._announce(report)
            self.adopted.pop(number, None)
            return original
        with real_computation():
            report.adopted = graph_pass.compare(original, rewritten, example_inputs, report,
                                                self.options, key)
        if report.adopted and _kind(kwargs) == "inference":
            rewritten = size_branches.compiled_or_eager(graph, inputs, kwargs, wrap,
                                                        example_inputs, report, key,
                                                        self.options, rewritten)
            rewritten = self._within_branch(gm, example_inputs, kwargs, rewritten, report, key,
                                            original)
        self._announce(report)
        if report.adopted:
            return rewritten
        self.adopted.pop(number, None)
        take_output_strides()
        give_output_strides(strides)
        return original

    def _compile_rewritten(self, graph, inputs, kwargs, wrap, report):
        """Inductor's compile of the rewritten graph, or None where Inductor fails on it (a
        backward graph compiles inside the user's backward call: no failure may land there)."""
        from torch._inductor.compile_fx import compile_fx_inner
        try:
            return wrap(compile_fx_inner(graph, inputs, **kwargs))
        except DYNAMO_CONTROL:
            raise
        except Exception as e:
            report.adopted = False
            report.note = "Inductor failed on the rewritten graph: " + first_line(e)
            self._note(f"{report.title}: {report.note}", warn=True)
            return None

    def _regions_or_substitutions(self, gm, new, example_inputs, report, kwargs):
        """``new`` (the regions' programs, then the substitutions left to apply), or the
        substitutions alone on the original graph where their compile runs faster (each
        compiled as it would run, weights' products folded): a region's program can take in
        the contractions a merge would have joined."""
        key = graph_pass.comparison_key(gm, example_inputs, report) + ALTERNATIVE
        scratch = graph_pass.GraphReport(report.title)
        alone = graph_pass.stored_comparison(key, scratch, self.options)
        if alone is None:
            strides = take_output_strides()
            with_regions = folding.compiled(new, example_inputs, kwargs)
            take_output_strides()  # each compile reports its outputs' strides to AOT
            without = folding.compiled(report.alternative, example_inputs, kwargs)
            take_output_strides()
            give_output_strides(strides)
            with real_computation():
                alone = graph_pass.compare(with_regions, without, example_inputs, scratch,
                                           self.options, key)
        return substitution.take_alternative(report) if alone else new

    def _within_branch(self, gm, example_inputs, kwargs, chosen, report, key, original=None):
        artifact, self._direct_bounds, self._uncompiled_outside = size_branches.within_branch(
            gm, example_inputs, kwargs, chosen, report, key, self.options, self._whole_function,
            original)
        return artifact

    def _plain(self, number: int, kind: str, gm, example_inputs):
        """AOTAutograd's compiler without Inductor: the (rewritten) graph runs as it is."""
        from torch._functorch.aot_autograd import make_boxed_func

        new, report = self._rewrite(gm, example_inputs, f"{kind} graph {number}",
                                    compilers.decompositions())
        report.adopted = new is not None
        self._announce(report)
        return make_boxed_func((new if new is not None else gm).forward)

    def _rewrite(self, gm, example_inputs, title, decompositions, guard_sizes=False):
        try:
            with real_computation(), progress.progress(self.options.progress) as show:
                new, report = graph_pass.rewrite_graph(gm, example_inputs, self.options, title,
                                                       decompositions, show, guard_sizes)
        except DYNAMO_CONTROL:
            raise
        except Exception as e:  # an Ollie bug must not break the user's program
            new, report = None, graph_pass.GraphReport(
                title, note=f"Ollie failed on this graph, left as it is: {first_line(e)}")
            warnings.warn(f"ollie: {title}: {report.note}", OllieWarning, stacklevel=2)
        self.reports.append(report)
        return new, report

    def _announce(self, report) -> None:
        """One line per region (DEBUG) and per graph (INFO) to the ``ollie`` log; printed
        too with ``verbose``."""
        lines = [(logging.DEBUG, r.summary()) for r in report.regions]
        lines.append((logging.INFO, f"ollie: {graph_line(report)}"))
        for level, line in lines:
            log.log.log(level, "%s", line)
            if self.options.verbose:
                print(line)

    def _eager(self, gm, note: str):
        self._note(note, warn=True)
        return gm.forward

    def _note(self, note: str, warn: bool = False) -> None:
        """A whole Dynamo graph's fate: kept for ``explain``, logged, and (``warn``, when
        Ollie or a compiler failed) an ``OllieWarning``."""
        self.notes.append(note)
        log.log.info("ollie: %s", note)
        if self.options.verbose:
            print(f"ollie: {note}")
        if warn:
            warnings.warn(f"ollie: {note}", OllieWarning, stacklevel=4)


def _kind(kwargs) -> str:
    return "backward" if kwargs.get("is_backward") else \
        "inference" if kwargs.get("is_inference") else "forward"


def ollie(gm: torch.fx.GraphModule, example_inputs, options: dict | None = None):
    """The registered backend: ``torch.compile(f, backend="ollie", options={...})``."""
    return OllieBackend(Options.from_dict(options))(gm, example_inputs)


def register() -> None:
    """Make ``backend="ollie"`` known to torch.compile. An installed Ollie is also known
    through its entry point, which Dynamo loads itself (registering here as well would make
    Dynamo's own registration of it fail as a duplicate)."""
    from torch._dynamo.backends.registry import _BACKENDS, _COMPILER_FNS, register_backend

    if "ollie" not in _COMPILER_FNS and _BACKENDS.get("ollie") is None:
        register_backend(ollie, name="ollie")


log.register()
