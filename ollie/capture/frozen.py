"""Weights as constants of the compile: Inductor's freezing, kept where it runs faster and
only while the weights are the ones it froze.

In an inference graph the parameters and buffers Dynamo passes in are the same tensors on
every call until the user changes them. Inductor's freezing compiles them in as constants:
it folds what reads only weights (a batch norm into the convolution before it), lays out
convolution and linear weights for the CPU's libraries once (oneDNN's packed formats) and
fuses an activation into a convolution. On a 2-core CPU that ran a ResNet-18 1.1–1.5× as
fast as Inductor's default compile, and a MobileNet 0.8× as fast: so the
frozen compile is timed against the other and kept only where it wins (the choice is stored
in the disk cache). That compile is a second one, as long as the first or longer (18 s of an
unrolled RNN cell's first call), so it is tried only where the graph's freezing passes, run
uncompiled, do not slow the graph down (``compiled_where_not_slower``): on the models bench
that told the five graphs freezing slowed (0.23–0.85× uncompiled; 0.73–0.99× compiled) from
the two it sped up (1.11–1.18× compiled). Where Ollie's rewrite of the graph was adopted,
the rewrite is what is frozen (its merges and folds, then Inductor's packing: two 3×3
convolutions summed ran 1.79× ``torch.compile`` rewritten and 1.95× rewritten and frozen).
torch.compile does not freeze by default because a frozen artifact goes stale when a weight
changes; here each call checks that every weight is the tensor that was frozen, at the
version it had (an in-place update -- an optimizer step, ``load_state_dict`` -- moves the
version counter), and a call that finds one changed runs the unfrozen compile.
(An update through ``.data`` bypasses the counter, as it does for Inductor's freezing.)

On the CPU, what freezing gains is in convolutions (their weights packed, batch norms folded
in); a graph without one is not frozen. The uncompiled probe found freezing slower on each
such graph of the benches (0.39–0.82×: BERT and GPT-2 layers, an MLP-Mixer, SwiGLU, attention,
RNN cells; linear weights packed for oneDNN), and the probe cost 1–2.3 s of a first call.

A graph with symbolic sizes is not frozen: Inductor packs a linear layer's weight for MKL
only for a fixed batch size, so with a symbolic one its frozen compile runs oneDNN's
unpacked path, and measured 0.3–1.0× the unfrozen compile's speed (a BERT stack, a GPT-2
block, an unrolled GRU, an MLP): a compile and a timing that would not pay.
"""
from __future__ import annotations

import operator

import torch
import torch.fx as fx

from ollie import cache, decision as decisions
from ollie.capture.samples import real_computation, sample_like
from ollie.capture.symbolic import has_symbolic_sizes
from ollie.cost import measure
from ollie.decision import Outcome

# the cache key suffix of a graph's frozen-or-not choice, next to its eager-or-compiled one
SUFFIX = "-frozen"


def weights(gm: fx.GraphModule) -> dict[int, torch.Tensor]:
    """The graph's inputs that are a module's parameters or buffers (Dynamo marks them
    static inputs), by position, as the real tensors Dynamo traced with."""
    found = {}
    for i, node in enumerate(gm.graph.find_nodes(op="placeholder")):
        arg = node.meta.get("grapharg")
        example = getattr(arg, "example", None) if arg is not None else None
        if isinstance(example, torch.Tensor) and \
                getattr(example, "_dynamo_static_input_type", None) is not None:
            found[i] = example
    return found


def traced_metadata():
    """What AOTAutograd last recorded of a graph it traced in this Dynamo compile (None
    before any): taken before a compile, so that ``mutates_inputs`` knows whether the
    compile traced anew (a hit in AOTAutograd's cache traces nothing)."""
    return getattr(torch._guards.TracingContext.try_get(), "fw_metadata", None)


def mutates_inputs(before) -> bool | None:
    """Whether the graph AOTAutograd traced since ``before`` (``traced_metadata``) writes to
    one of its inputs (a training batch norm's running statistics, a cache updated in
    place); None where nothing was traced. Such a graph is not frozen: its timing would run
    on the real weights, and write to them."""
    meta = traced_metadata()
    if meta is None or meta is before:
        return None
    return any(info.mutates_data or info.mutates_metadata for info in meta.input_info)


def frozen_or(gm: fx.GraphModule, compiled, example_inputs, mutates: bool | None,
              store: cache.Cache | None, key: str, budget_s: float, config: dict,
              rewritten: fx.GraphModule | None = None):
    """``(artifact, note)``: ``compiled``, or a ``FrozenWeights`` of Inductor's compile with
    the graph's weights frozen in where that ran faster by the adoption margin, timed on
    sample inputs carrying the real weights (under no grad only); the choice stored under
    ``key``. ``mutates``: whether the graph writes to its inputs (None: not known, as after a
    hit in AOTAutograd's cache; a stored choice to freeze was made where it did not).
    ``rewritten``: Ollie's adopted rewrite of the graph (an ATen graph of the same inputs),
    which is frozen instead of ``gm`` where given, so that the artifact keeps the rewrite.
    The note (for ``explain``, or None) follows "graph N"."""
    held = weights(gm) if not torch.is_grad_enabled() else {}
    if held and has_symbolic_sizes(example_inputs):
        return compiled, "keeps its weights out of Inductor's compile: its sizes are " \
                         "symbolic, and freezing packs weights for fixed sizes only"
    if held and not _convolves_on_cpu(gm, held):
        return compiled, None
    decided = decisions.stored(store.get(key) if held and store is not None else None)
    decided = decided.outcome if decided else None
    if not held or decided is Outcome.NOT_FASTER or \
            (decided is not Outcome.ADOPTED and mutates is not False):
        return compiled, None
    source = rewritten if rewritten is not None and _same_inputs(rewritten, example_inputs) \
        else gm
    probed = None if decided is not None else \
        compiled_where_not_slower(source, example_inputs, held, budget_s)
    try:
        frozen_compile = compile_frozen(source, example_inputs, held, config, probed)
    except SlowerUncompiled as slower:
        if store is not None:
            store.put(key, decisions.decide(slower.timing).entry())
        return compiled, (f"keeps its weights out of Inductor's compile: frozen in, it ran "
                          f"{slower.timing.speedup:.2f}× as fast uncompiled, so its compile "
                          "was not tried")
    artifact = FrozenWeights(frozen_compile, compiled, held, len(example_inputs),
                             of_rewrite=source is rewritten)
    if decided is Outcome.ADOPTED:
        return artifact, (f"freezes its {len(held)} weights into Inductor's compile, stored "
                          "in the disk cache; a call whose weights changed runs the unfrozen "
                          "compile")
    inputs = artifact.with_weights(sample_like(example_inputs))
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        timing = measure.compare(lambda: compiled(*inputs), lambda: artifact(*inputs),
                                 budget_s=budget_s)
    decision = decisions.decide(timing)
    if store is not None:
        store.put(key, decision.entry())
    if not decision.adopted:
        return compiled, (f"keeps its weights out of Inductor's compile: frozen in, it ran "
                          f"{timing.speedup:.2f}× the unfrozen compile's speed")
    return artifact, (f"freezes its {len(held)} weights into Inductor's compile: "
                      f"{timing.speedup:.2f}× the unfrozen compile's speed "
                      f"({timing.ollie_median * 1e3:.3f} ms vs {timing.eager_median * 1e3:.3f} "
                      "ms); a call whose weights changed runs the unfrozen compile")


def _convolves_on_cpu(gm: fx.GraphModule, held: dict[int, torch.Tensor]) -> bool:
    """Whether freezing could pay on this graph (Dynamo's, of torch functions and modules):
    on a GPU, any graph; on the CPU, one with a convolution (see the module's docstring)."""
    def convolves(node: fx.Node) -> bool:  # (conv2d, conv_transpose1d, Conv3d, ...)
        if node.op == "call_module":
            return "conv" in type(gm.get_submodule(node.target)).__name__.lower()
        return node.op == "call_function" and \
            "conv" in getattr(node.target, "__name__", "").lower()
    return any(w.device.type != "cpu" for w in held.values()) or \
        any(convolves(n) for n in gm.graph.nodes)


def _same_inputs(graph: fx.GraphModule, example_inputs) -> bool:
    """Whether ``graph`` takes ``example_inputs`` in order (AOTAutograd keeps a graph's inputs
    as they are unless it dedupes or lifts one)."""
    placeholders = list(graph.graph.find_nodes(op="placeholder"))
    return len(placeholders) == len(example_inputs) and all(
        isinstance(x, torch.Tensor) and isinstance(n.meta.get("val"), torch.Tensor) and
        n.meta["val"].shape == x.shape and n.meta["val"].dtype == x.dtype
        for n, x in zip(placeholders, example_inputs))


def compile_frozen(gm: fx.GraphModule, example_inputs, frozen: dict[int, torch.Tensor],
                   config: dict, inner_compile=None):
    """Inductor's compile of ``gm`` with the inputs at ``frozen``'s positions made constants
    (attributes of the graph, which Inductor's freezing folds); it takes the other inputs.
    ``inner_compile``: what compiles the frozen ATen graph (default Inductor's own)."""
    from torch._inductor.compile_fx import compile_fx

    holder = torch.nn.Module()
    for name, child in gm.named_children():
        holder.add_module(name, child)
    for name, tensor in gm.named_buffers(recurse=False):  # constants a rewrite spliced in
        holder.register_buffer(name, tensor, persistent=False)
    for name, tensor in gm.named_parameters(recurse=False):
        holder.register_parameter(name, tensor)
    graph, mapping = fx.Graph(), {}
    for i, node in enumerate(gm.graph.find_nodes(op="placeholder")):
        if i in frozen:
            name = f"_ollie_frozen{i}"
            if isinstance(frozen[i], torch.nn.Parameter):
                holder.register_parameter(name, frozen[i])
            else:
                holder.register_buffer(name, frozen[i])
            mapping[node] = graph.get_attr(name)
        else:
            mapping[node] = graph.placeholder(node.name)
        mapping[node].meta = dict(node.meta)
    for node in gm.graph.nodes:
        if node.op == "output":
            graph.output(fx.node.map_arg(node.args[0], mapping.__getitem__))
        elif node.op != "placeholder":
            mapping[node] = graph.node_copy(node, mapping.__getitem__)
    rest = [x for i, x in enumerate(example_inputs) if i not in frozen]
    extra = {} if inner_compile is None else {"inner_compile": inner_compile}
    with torch.no_grad():
        return compile_fx(fx.GraphModule(holder, graph), rest,
                          config_patches=dict(config, freezing=True), **extra)


class SlowerUncompiled(Exception):
    """The freezing passes made the graph slower, run uncompiled: Inductor's compile of the
    frozen graph is not worth a try. ``timing``: the ``measure.Comparison``."""

    def __init__(self, timing):
        super().__init__(f"frozen, uncompiled: {timing.speedup:.2f}× as fast")
        self.timing = timing


def compiled_where_not_slower(gm: fx.GraphModule, example_inputs,
                              frozen: dict[int, torch.Tensor], budget_s: float):
    """An inner compile for ``compile_frozen``: Inductor's, once the frozen ATen graph it is
    handed (the weights folded, packed for the CPU's libraries, activations fused into
    convolutions), run uncompiled on sample inputs, is timed against ``gm`` uncompiled (its
    weights the real ones); it raises ``SlowerUncompiled`` where the frozen graph is slower
    by the adoption margin. Inductor compiles the pointwise work around the library calls
    alike in either form, so what freezing does to them shows uncompiled, in about a second,
    and the compile (as long as the first one) is not spent where it would lose."""
    from torch._inductor.compile_fx import compile_fx_inner

    def inner(frozen_gm, frozen_inputs, **kwargs):
        with real_computation(), torch.no_grad(), torch.random.fork_rng(devices=[]):
            inputs = sample_like(example_inputs)
            for i, weight in frozen.items():
                inputs[i] = weight
            rest = sample_like(frozen_inputs)
            timing = measure.compare(lambda: gm(*inputs), lambda: frozen_gm(*rest),
                                     budget_s=budget_s)
        if timing.speedup < decisions.ADOPTION_MARGIN:
            raise SlowerUncompiled(timing)
        return compile_fx_inner(frozen_gm, frozen_inputs, **kwargs)
    return inner


class FrozenWeights:
    """``frozen`` (a compile with the weights as constants, taking the other inputs) while
    every weight is the tensor it froze, at its version then; else ``unfrozen`` (taking
    every input). The check costs ~0.2 µs a weight (a ResNet-18 has 102: 0.4 % of its call);
    the comparison that chose this artifact timed it too. ``of_rewrite``: ``frozen``
    compiles Ollie's rewrite of the graph."""

    def __init__(self, frozen, unfrozen, weights_at: dict[int, torch.Tensor], inputs: int,
                 of_rewrite: bool = False):
        self.frozen, self.unfrozen, self.of_rewrite = frozen, unfrozen, of_rewrite
        self.tensors = tuple(weights_at.values())
        self.versions = tuple(t._version for t in self.tensors)
        self.positions = tuple(weights_at)
        self.others = tuple(i for i in range(inputs) if i not in weights_at)

    def with_weights(self, inputs: list) -> list:
        """``inputs`` (sample inputs of the graph) with the frozen weights in their places:
        what a timing of this artifact runs on."""
        inputs = list(inputs)
        for i, t in zip(self.positions, self.tensors):
            inputs[i] = t
        return inputs

    def current(self, args) -> bool:
        """Whether ``args`` carry the frozen weights, unchanged."""
        given = [args[i] for i in self.positions]
        return all(map(operator.is_, given, self.tensors)) and \
            tuple(map(_VERSION, given)) == self.versions

    def __call__(self, *args):
        if not self.current(args):
            return self.unfrozen(*args)
        return self.frozen(*[args[i] for i in self.others])


_VERSION = operator.attrgetter("_version")
