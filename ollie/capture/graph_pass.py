"""One ATen graph through Ollie: roll unrolled loops up (``ollie.capture.rolling``), translate,
derive each worthwhile region, verify, measure, rewrite; then the graph substitutions
(``ollie.capture.graph_rules``) on what the regions left. (Substituting first would hide an
expression's own algebra from its region: merging ``a@b`` and ``c@b`` into one product loses
``(a+c)@b``. Rolling first shows it: n copies of a loop body summed are one reduction.)

The graph's example inputs are fake (shapes, no data), so Ollie samples real ones of the same
shapes, dtypes and layouts, runs the original graph once on them to get every value a region
reads and the value it must reproduce, and judges candidates on those. User code is never run
for this: only the ATen graph, with the RNG state saved and restored around it.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace

import torch
import torch.fx as fx

import codegen
import ir
from ollie import cache, decision as decisions, region as region_mod
from ollie.cost import measure
from ollie.decision import Outcome
from ollie.log import first_line
from ollie.capture import regions as regions_mod
from ollie.capture import contractions, eager_or_compiled, rewrite, size_range, substitution, \
    symbolic
from ollie.capture.samples import concrete, sample_like, sizes_at
from ollie.numerics import max_relative_error


@dataclass
class GraphReport:
    title: str                                   # "forward graph 1", "backward graph 1", …
    regions: list = field(default_factory=list)  # RegionReport of every derived region
    left: list = field(default_factory=list)     # (operator, where in the user's code, why)
    note: str | None = None                      # why nothing in the graph was rewritten
    timing: tuple[float, float] | None = None    # compiled original vs rewritten, seconds
    timing_cached: bool = False                  # the comparison came from the disk cache
    adopted: bool = False                        # the rewritten graph is what runs
    remeasured: int = 0                          # a stored comparison within noise, again
    substitutions: list = field(default_factory=list)  # graph substitutions applied
    rolled: list = field(default_factory=list)   # unrolled loops rolled up, before all else
    folded: int = 0                              # weight-only computations folded
    runs_eagerly: bool = False                   # the rewritten graph runs uncompiled
    eager_timing: tuple[float, float] | None = None  # rewritten: compiled vs uncompiled
    by_size: str | None = None                   # where the other of the two runs instead
    size_branch: tuple | None = None             # (symbol, low, high): rewritten only there
    alternative: fx.GraphModule | None = None    # the substitutions alone, without regions
    alternative_substitutions: list = field(default_factory=list)

    @property
    def adopted_regions(self) -> list:
        return [r for r in self.regions if r.kernel is not None]


class _Recorder(fx.Interpreter):
    def __init__(self, gm, wanted: set):
        super().__init__(gm)
        self.wanted, self.values = wanted, {}

    def run_node(self, n):
        value = super().run_node(n)
        if n in self.wanted:  # an input the graph updates in place is kept as it was read
            mutable = n.op == "placeholder" and isinstance(value, torch.Tensor)
            self.values[n] = value.clone() if mutable else value
        return value


def sample_values(gm: fx.GraphModule, inputs: list, wanted: set) -> dict:
    """The values of ``wanted`` nodes when ``gm`` runs on ``inputs`` (RNG state restored)."""
    recorder = _Recorder(gm, wanted)
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        recorder.run(*inputs)
    return recorder.values


def rewrite_graph(gm: fx.GraphModule, example_inputs, options, title: str,
                  decompositions: dict, show, guard_sizes: bool = False, portable: bool = False
                  ) -> tuple[fx.GraphModule | None, GraphReport]:
    """The rewritten copy of ``gm`` (None when no region was adopted) and the report
    (``portable``: for a program exported to run anywhere, without Inductor's hints). With
    ``guard_sizes``, a graph with symbolic sizes is kept to the size range where each
    region's choice holds: by a branch to the original graph (``report.size_branch``, which
    the backend builds) or by guards (``ollie.capture.size_range``)."""
    dynamic = symbolic.has_symbolic_sizes(example_inputs)
    at = symbolic.derivation_sizes(example_inputs, _shape_env(example_inputs)) if dynamic \
        else {}
    with sizes_at(at):
        return _rewrite_graph(gm, example_inputs, options, title, decompositions, show,
                              guard_sizes, portable, dynamic)


def _rewrite_graph(gm, example_inputs, options, title, decompositions, show, guard_sizes,
                   portable, dynamic):
    report = GraphReport(title)
    gm = symbolic.split_means(gm) if dynamic else gm
    original, rolled = gm, substitution.rolled(gm, example_inputs, report)
    gm = rolled if rolled is not None else gm  # what the regions and substitutions start from
    on_gpu = any(isinstance(x, torch.Tensor) and x.is_cuda for x in example_inputs)
    translation = regions_mod.translate(gm, cut_at_activations=options.inductor and not on_gpu)
    chosen = []
    for region in translation.regions:
        why_not = regions_mod.worth_deriving(region, on_gpu, options.inductor)
        if why_not:
            for m in region.members:
                translation.left[m] = f"translated, not derived: {why_not}"
        else:
            chosen.append(region)
    report.left = [(regions_mod.describe(n), regions_mod.source_line(n), why)
                   for n, why in translation.left.items()]
    if not chosen:
        substituted = substitution.substitute(gm, original, example_inputs, report,
                                              options.inductor, portable)
        if substituted is None and rolled is None:
            report.note = "no region worth deriving"
        return substitution.with_rolled(substituted, rolled, report), report
    inputs = sample_like(example_inputs)
    wanted = {n for r in chosen for n in [r.root, *r.inputs.values(), *_sizes_read(r)]}
    try:
        values = sample_values(gm, inputs, wanted)
    except Exception as e:  # the graph does not run on sampled data (data-dependent checks)
        report.note = f"could not run the graph on sample inputs: {first_line(e)}"
        return None, report
    derived = derive_within_budget(chosen, values, options, show, translation.left)
    report.regions = [rr for _, rr in derived]
    report.left = [(regions_mod.describe(n), regions_mod.source_line(n), why)
                   for n, why in translation.left.items()]
    adopted = [(r, rr) for r, rr in derived if rr.kernel is not None]
    traced_programs = {}  # region root -> the traced program spliced in
    if adopted:
        new = _splice(gm, adopted, values, decompositions, dynamic, example_inputs,
                      traced_programs, options.inductor)
    else:
        new = None
    if dynamic and guard_sizes:
        report.size_branch = _guard_size_ranges(derived, traced_programs, values,
                                                decompositions, options,
                                                _shape_env(example_inputs))
    substituted = substitution.substitute(new if new is not None else gm, original,
                                          example_inputs, report, options.inductor, portable)
    if new is not None:  # the regions' programs may have taken in contractions a merge needs
        substitution.substitutions_alone(gm, original, example_inputs, report,
                                         GraphReport(title), options.inductor, portable)
    return substitution.with_rolled(substituted if substituted is not None else new, rolled,
                                    report), report


def _splice(gm, adopted, values, decompositions, dynamic: bool, example_inputs,
            traced_programs: dict, inductor: bool) -> fx.GraphModule | None:
    """A copy of ``gm`` with the adopted regions' programs in place of their nodes (None when
    none passed its last checks). Under Inductor, a program that runs the original's
    contractions unchanged is not spliced: its measured gain was over the region run
    eagerly, which Inductor's fusion of the original earns as well (and judging it would
    take a second compile of the whole graph)."""
    new, mapping = rewrite.copy_graph(gm)
    spliced = 0
    for region, rr in adopted:
        kernel = rr.kernel
        operands = [values[region.inputs[name]] for name in kernel.input_names]
        try:
            traced = _trace(region, kernel, operands, decompositions, dynamic,
                            _shape_env(example_inputs) if dynamic else None)
        except symbolic.SizeSpecific as e:
            rr.kernel, rr.decision = None, rr.decision.overruled(Outcome.KEPT, str(e))
            continue
        if inductor and _same_contractions(region, traced):
            rr.kernel, rr.decision = None, rr.decision.overruled(Outcome.GLUE_ONLY)
            continue
        # What runs is the traced graph, so it is what is checked (a kernel whose work the
        # trace cannot see, such as a raw Triton launch, would leave its output unwritten).
        with torch.no_grad():
            error = max_relative_error(traced(*operands), values[region.root])
        if not error <= rr.allowed_error:
            rr.kernel = None
            rr.decision = rr.decision.overruled(
                Outcome.KEPT, f"the program traced into ATen differs (error {error:.2e})")
            continue
        rewrite.splice(new, mapping[region.root],
                       [mapping[region.inputs[name]] for name in kernel.input_names], traced)
        traced_programs[region.root] = traced
        spliced += 1
    if not spliced:
        return None
    rewrite.finish(new, example_inputs)
    return new


def _guard_size_ranges(derived, traced_programs: dict, values, decompositions, options,
                       shape_env, alternatives: int = 3) -> tuple | None:
    """Keep each region's choice (its program, or its original nodes) to the sizes where it
    does no more multiply-adds than its alternatives (the original nodes and the best few
    distinct derived programs). Where every such range ends where the original nodes take
    over, on one side of one size symbol, that is a branch: ``(symbol, low, high)``, the
    range where the rewritten graph runs (the original graph runs outside it, no size compiles
    again). Otherwise each range is a guard, and Dynamo compiles again outside it."""
    crossings = []  # (region report, (symbol, low, high), the sizes carrying it, vs original)
    for region, rr in derived:
        try:
            crossings += [(rr, *c) for c in _crossings(region, rr, traced_programs, values,
                                                         decompositions, options, shape_env,
                                                         alternatives)]
        except Exception:  # no range known: the choice holds where it was measured, unguarded
            continue
    branch = size_range.one_branch([(bounds, against) for _, bounds, _, against in crossings])
    held: dict = {}
    for rr, bounds, sizes, _ in crossings:
        if branch is not None or size_range.guard(*bounds, sizes):
            held.setdefault(id(rr), (rr, []))[1].append(size_range.describe(*bounds))
    for rr, ranges in held.values():
        rr.size_range, rr.size_branch = " and ".join(dict.fromkeys(ranges)), branch is not None
    return branch


def _crossings(region, rr, traced_programs, values, decompositions, options, shape_env,
               alternatives: int) -> list:
    """Where one region's choice stops doing the fewest multiply-adds: ``(bounds, the sizes
    carrying the symbol, whether the other form is the original nodes)`` per alternative."""
    def counted(program):  # the program's multiply-adds in the graph's size symbols
        kernel = codegen.lower(program, backend="torch", fused=options.inductor)
        operands = [values[region.inputs[name]] for name in kernel.input_names]
        traced = _trace(region, kernel, operands, decompositions, True)
        return _flops(region, traced, kernel.input_names)

    original = size_range.flops(region.members)
    if region.root in traced_programs:
        chosen, others = _flops(region, traced_programs[region.root],
                                rr.kernel.input_names), [original]
        taken = {ir.fingerprint(rr.chosen)}
    else:
        chosen, others, taken = original, [], {ir.fingerprint(rr.original)}
    for candidate in sorted(rr.candidates, key=lambda c: c.cost):
        if len(others) > alternatives or ir.fingerprint(candidate.program) in taken:
            continue
        taken.add(ir.fingerprint(candidate.program))
        try:
            others.append(counted(candidate.program))
        except Exception:  # a program that does not trace symbolically
            continue
    sizes = [d for m in (region.inputs[n].meta["val"] for n in sorted(region.inputs))
             if isinstance(m, torch.Tensor) for d in m.shape]
    found = []
    for other in others:
        bounds = size_range.bounds(chosen, other, shape_env)
        if bounds:
            found.append((bounds, sizes, other is original and region.root in traced_programs))
    return found


def _same_contractions(region, traced: fx.GraphModule) -> bool:
    return contractions.unchanged(contractions.signature(region.members),
                                  contractions.signature(traced.graph.nodes),
                                  1 - decisions.ADOPTION_MARGIN)


def _flops(region, traced: fx.GraphModule, input_names):
    metas = [region.inputs[n].meta["val"] for n in input_names]
    return size_range.flops(traced.graph.nodes, size_range.renaming(traced, metas))


MIN_REGION_S = 0.25  # the least share of the graph's budget a region's rules run with
EXTRACTION_S = 0.25  # what a region takes beyond its rules: encoding, extracting the
#                      candidates twice (learned and analytic cost), checks (0.1-0.35 s
#                      measured on a ResNet-18's conv blocks, 2-core CPU)


def derive_within_budget(chosen: list, values: dict, options, show, left: dict) -> list:
    """(region, report) for the regions derived, in order of expected gain, under one
    derivation budget for the whole graph (``options.budget_s``).

    A region's expected gain is the work of its reductions (what contraction orders and
    distributivity change). Each region costs its rules' share of the budget (its share of
    the work, at least ``MIN_REGION_S``) and ``EXTRACTION_S`` (the first region, its rules'
    share alone); regions that no longer fit keep their nodes (``explain`` says so). The
    plan depends on the graph alone, not on how long derivations took, so a second process
    with the decisions cached derives nothing new."""
    work = {id(r): regions_mod.reduction_work(r) for r in chosen}
    order = sorted(chosen, key=lambda r: work[id(r)], reverse=True)
    total = sum(work.values()) or 1
    seconds_left = options.budget_s
    derived = []
    for region in order:
        if seconds_left < MIN_REGION_S + (EXTRACTION_S if derived else 0):
            for m in region.members:
                left[m] = "translated, not derived: the graph's derivation budget was spent"
            continue
        share = max(MIN_REGION_S, options.budget_s * work[id(region)] / total)
        share = max(MIN_REGION_S, min(share, seconds_left - EXTRACTION_S))
        seconds_left -= share + EXTRACTION_S
        derived.append((region, region_mod.compile_region(
            region, values, replace(options, budget_s=share), show=show)))
    return derived


def _sizes_read(region) -> list[fx.Node]:
    """The symbolic sizes (SymInt inputs, ``sym_size`` nodes) the region's nodes read: the
    expression holds them at their hints, the original nodes read them when they run."""
    return [a for m in region.members for a in m.all_input_nodes
            if isinstance(a.meta.get("val"), torch.SymInt)]


def _trace(region, kernel, operands: list, decompositions: dict, dynamic: bool,
           shape_env=None):
    """The kernel's ATen graph, laid out like the value it replaces; symbolic in the sizes
    that are symbolic in the graph (``SizeSpecific`` when the kernel fixes one). A lowered
    program writes sizes as numbers at the hints: where a number is a symbolic size's hint,
    the program reading that size is tried first, and with ``shape_env`` (the graph's) each
    form is checked at a second size before it is taken."""
    like = meta = region.root.meta["val"]
    if not dynamic:
        return rewrite.trace_kernel(kernel, operands, like, decompositions)
    if kernel.index_arrays:
        raise symbolic.SizeSpecific("the derived program gathers by index tables built for "
                                    "these sizes")
    like = torch.empty_strided([concrete(d) for d in like.shape],
                               [concrete(d) for d in like.stride()], dtype=like.dtype)
    metas = [region.inputs[name].meta["val"] for name in kernel.input_names]
    try:
        read = symbolic.sizes_as_symbols(
            rewrite.trace_kernel(kernel, operands, like, decompositions),
            symbolic.fake_inputs(operands, metas)[0], meta)
    except Exception:  # (the kernel as it is, traced below, says what fails)
        read = None
    failure = None
    for program in ([read] if read is not None else []) + [kernel]:
        fakes, env = symbolic.fake_inputs(operands, metas)
        try:
            traced = rewrite.trace_kernel(program, operands, like, decompositions, fakes)
        except Exception as e:  # what the program does at these sizes does not trace for all
            failure = symbolic.SizeSpecific(f"the derived program does not trace with "
                                            f"symbolic sizes: {first_line(e)}")
            continue
        try:
            symbolic.refuse_specialised(env)
            if shape_env is not None:
                symbolic.check_other_size(region, traced, kernel.input_names, shape_env)
        except symbolic.SizeSpecific as e:
            failure = e
            continue
        return traced
    raise failure


def _shape_env(example_inputs):
    from torch._guards import detect_fake_mode
    return detect_fake_mode(example_inputs).shape_env


def stored_comparison(key: str, report: GraphReport, options) -> bool | None:
    """Whether the rewritten graph won when this comparison was last measured (None: never);
    the stored times go into the report, marked as stored. A decision within noise is kept
    too: a warm start measures nothing (``ollie tune`` measures such decisions again)."""
    stored = decisions.stored(cache.Cache(options.cache_dir).get(key) if options.cache
                              else None)
    if not stored or not stored.baseline_s or not stored.challenger_s:
        return None
    report.timing, report.timing_cached = (stored.baseline_s, stored.challenger_s), True
    return stored.adopted


def compare(original, rewritten, example_inputs, report: GraphReport, options,
            key: str, at: dict | None = None, eagerly: bool = False,
            frame: bool = False) -> bool:
    """Whether the compiled ``rewritten`` graph beats the compiled ``original`` (boxed
    callables) by the adoption margin, measured on sample inputs (at the size symbols'
    hints, or the sizes ``at`` gives them); stored under ``key``. ``eagerly``: ``rewritten``
    is a graph run as it is, whose lead need only clear the comparison's noise
    (``decision.noise_margin``); ``frame``: ``original`` is charged Dynamo's frame on each
    call, which ``rewritten`` would be called without."""
    inputs = sample_like(example_inputs, at)
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        timing = measure.compare(lambda: original(list(inputs)),
                                 lambda: rewritten(list(inputs)),
                                 budget_s=options.measure_cap_s)
    margin = decisions.noise_margin(timing.spread) if eagerly else decisions.ADOPTION_MARGIN
    charge = eager_or_compiled.frame_charge(timing, margin, example_inputs, True) \
        if eagerly and frame else 0.0
    decision = decisions.decide(timing, margin, charge)
    report.timing = (decision.baseline_s, decision.challenger_s)
    if options.cache:
        cache.Cache(options.cache_dir).put(key, {
            "program": None, "rule_chain": [], "cost_before": 0.0, "cost_after": 0.0,
            "error": None, "backend": "inductor", **decision.entry(),
            "remeasured": report.remeasured})
    return decision.adopted


def comparison_key(gm: fx.GraphModule, example_inputs, report: GraphReport) -> str:
    """What a whole-graph comparison depends on: the graph, its inputs' layouts, and the
    programs put in (the cache adds the versions of Ollie, torch and the compilers)."""
    h = hashlib.sha256(gm.code.encode())
    for x in example_inputs:
        if isinstance(x, torch.Tensor):
            h.update(repr((tuple(x.shape), tuple(x.stride()), str(x.dtype),
                           x.device.type)).encode())
    for r in report.adopted_regions:
        h.update(r.cache_entry()["program"].encode())
    h.update(repr(report.substitutions).encode())
    return "graph-" + h.hexdigest()
