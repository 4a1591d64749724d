"""Which elementwise values are written to memory and which are computed again in each kernel
that reads them: Korch's orchestration (``derivations.orchestrate``) on an ATen graph.

Inductor inlines elementwise ops and views into the loops of the kernels that read them, and
writes to memory what reductions, library calls and the graph's outputs read. A value that
several kernels read is computed again in each, unless a heuristic realises it (on the CPU,
``StorageBox.should_realize_on_reuse``: a loop body with exp, log, sigmoid or tanh); inlined
into a broadcasting kernel, a value is computed for each element of that kernel. A cost can
settle both: ``sin(x)·cos(2x)`` read by a sum over rows and a sum over columns runs in less
than half the time written once than computed in both sums (2048×2048, 2-core CPU).

Every elementwise value read by two kernels, or broadcast into a larger one, is a choice
(where a loop reading it is large enough to matter). A tensor that must or may be written has
a candidate kernel for each choice of which values its loop reads from memory (the others it
computes); each candidate is compiled alone by Inductor and timed on sample data, as Korch
profiles its candidates (at most ``MAX_KERNELS`` a graph, about a second each). Where the
program's choice beats Inductor's by the adoption margin, the graph says it: a value to
write is wrapped in Inductor's ``force_stride_order`` (which realises it, at its own
strides), a value to compute again is copied for each reader. The rewritten graph is then
checked and timed whole against the original, like every substitution. A reader of a
written value reads it (Korch would also let it recompute).
"""
from __future__ import annotations

from itertools import chain, combinations

import torch
import torch.fx as fx

import torch._inductor.inductor_prims  # noqa: F401  (registers prims.inductor_force_stride_order)
from derivations.orchestrate import Kernel, orchestrate
from ollie.capture.aten import ALIASING_VIEWS
from ollie.capture.samples import concrete, sample_like
from ollie.cost import measure
from ollie.decision import ADOPTION_MARGIN

aten = torch.ops.aten
FORCE_WRITE = torch.ops.prims.inductor_force_stride_order.default
# the ops whose reuse Inductor realises on the CPU (``StorageBox.should_realize_on_reuse``)
REALISED_ON_REUSE = ("exp", "log", "log10", "log1p", "log2", "sigmoid", "tanh")
MAX_CHOICES = 4        # choices enumerated in one loop (2**4 candidates); beyond: all or none
MAX_KERNELS = 12       # candidate kernels compiled and timed for one graph (about 1 s each)
MIN_LOOP = 1 << 16     # a choice matters where a loop reading it has this many elements
MIN_BROADCAST = 1024   # and a value broadcast into a larger loop has this many
MIN_SAVING_S = 20e-6   # a saving under this does not pay for a second compile


def orchestrate_graph(graph: fx.Graph) -> list[str]:
    """Write the program's choice into ``graph`` where its kernels, timed alone, beat those of
    Inductor's choice by the adoption margin; a line per value written or computed again
    (none where not)."""
    loops = _Loops(graph)
    if not loops.choices or not all(t.device.type == "cpu" for t in loops.tensors()):
        return []
    loops_of = {root: loops.candidates(root) for root in loops.roots()}
    if sum(map(len, loops_of.values())) > MAX_KERNELS:
        return []
    costs = _Costs(loops)
    try:
        kernels = [Kernel(root, frozenset(reads), costs.kernel(root, computed, reads))
                   for root, found in loops_of.items() for computed, reads in found]
        chosen = orchestrate(kernels, loops.deciding)
        if chosen is None:
            return []
        written = {k.root for k in chosen} & loops.choices
        inductor = loops.inductor_writes()
        if written == inductor:
            return []
        ours, theirs = costs.plan(written), costs.plan(inductor)
    except Exception:  # a candidate Inductor cannot compile alone: Inductor's choice stands
        return []
    if ours > ADOPTION_MARGIN * theirs or theirs - ours < MIN_SAVING_S:
        return []
    saving = f"kernels timed alone: {theirs * 1e3:.3f} -> {ours * 1e3:.3f} ms"
    lines = []
    for d in sorted(written, key=loops.order.get):
        readers = len(d.users)
        _write(graph, d, min(d.users, key=loops.order.get))
        lines.append(f"orchestrate: {d.name} ({_op(d)}) written once, read by {readers} "
                     f"kernels; {saving}")
    for d in sorted(inductor - written, key=loops.order.get, reverse=True):
        copies = _copy_per_reader(graph, d)
        lines.append(f"orchestrate: {d.name} ({_op(d)}) computed in each of its {copies} "
                     f"readers, not written; {saving}")
    return lines


class _Loops:
    """The graph as Inductor's loops see it: what is always in memory, what must be written,
    which values are choices, and the loop each tensor's kernel runs."""

    def __init__(self, graph: fx.Graph):
        self.order = {n: i for i, n in enumerate(graph.nodes)}
        self.kind = {n: _kind(n) for n in graph.nodes}
        self.reductions = {n for n, k in self.kind.items() if k == "reduction"}
        self.required = set()  # elementwise values an output or a library call reads
        for n in graph.nodes:
            if self.kind[n] in ("call", "output"):
                for x in n.all_input_nodes:
                    self.required |= self._through_views(x)
        # the kernels every plan has, and the elementwise values each computes inlined
        inlined = {r: self.loop(r, set())[0] - {r}
                   for r in sorted(self.required | self.reductions, key=self.order.get)}
        self.choices = {n for n in graph.nodes if self.kind[n] == "pointwise" and
                        n not in self.required and self._is_choice(n, [
                            r for r, computed in inlined.items() if n in computed])}
        self.deciding = {r for r, computed in inlined.items() if computed & self.choices}

    def tensors(self):
        return (n.meta["val"] for n in self.order if self.kind[n] != "output" and
                isinstance(n.meta.get("val"), torch.Tensor))

    def roots(self) -> list[fx.Node]:
        """The tensors whose kernels depend on the choices: the choices' own, and those of
        the kernels every plan has that compute a choice inlined."""
        return sorted(self.deciding | self.choices, key=self.order.get)

    def loop(self, root: fx.Node, written: set) -> tuple[set, set]:
        """What ``root``'s kernel computes (its elementwise ops and views) and what it reads
        from memory, where ``written`` (and what is always in memory) is there to read."""
        computed, reads, todo = {root}, set(), list(root.all_input_nodes)
        while todo:
            n = todo.pop()
            if n in computed or n in reads:
                continue
            if n in written or n in self.required or n in self.reductions or \
                    self.kind[n] not in ("pointwise", "view"):
                reads.add(n)
            else:
                computed.add(n)
                todo.extend(n.all_input_nodes)
        return computed, reads

    def candidates(self, root: fx.Node) -> list[tuple[set, set]]:
        """``root``'s loop (what it computes, what it reads) for each choice of which
        values in it are read from memory (distinct loops only)."""
        computed, _ = self.loop(root, set())
        inside = sorted((computed - {root}) & self.choices, key=self.order.get)
        subsets = chain.from_iterable(combinations(inside, r) for r in range(len(inside) + 1)) \
            if len(inside) <= MAX_CHOICES else [(), tuple(inside)]
        loops = {}
        for written in subsets:
            computed, reads = self.loop(root, set(written))
            loops[frozenset(reads)] = (computed, reads)
        return list(loops.values())

    def inductor_writes(self) -> set:
        """The choices Inductor's CPU heuristic writes: read by several kernels, with an op
        it realises on reuse computed in its loop."""
        written = set()
        for d in sorted(self.choices, key=self.order.get):
            computed, _ = self.loop(d, written)
            if len(d.users) > 1 and any(_op(n) in REALISED_ON_REUSE for n in computed):
                written.add(d)
        return written

    def size(self, n: fx.Node) -> int:
        """The elements of ``n``'s loop: its own, or its input's for a reduction."""
        if self.kind[n] == "reduction":
            return max(_numel(x) for x in n.all_input_nodes)
        return _numel(n)

    def _through_views(self, n: fx.Node) -> set:
        """The elementwise value behind a chain of views ending at ``n`` (a view of a
        reduction or an input is in memory already)."""
        while self.kind.get(n) == "view":
            n = n.args[0]
        return {n} if self.kind.get(n) == "pointwise" else set()

    def _is_choice(self, n: fx.Node, kernels: list[fx.Node]) -> bool:
        """Whether ``n``, computed inlined in ``kernels``, is worth a choice: where its
        readers branch, two of the kernels compute it, or its reader loops over more
        elements than it has (a broadcast); and a loop is large enough to matter. A
        broadcast value must have some size too: a normalisation's per-channel scale costs a
        multiply per element, recomputed."""
        sizes = [self.size(k) for k in kernels]
        if max(sizes, default=0) < MIN_LOOP:
            return False
        if len(n.users) > 1 and len(kernels) > 1:
            return True
        return _numel(n) >= MIN_BROADCAST and any(
            self.kind[u] in ("pointwise", "reduction") and self.size(u) > _numel(n)
            for u in self._readers(n))

    def _readers(self, n: fx.Node) -> list[fx.Node]:
        """The nodes that read ``n``, through views."""
        readers, todo = [], list(n.users)
        while todo:
            u = todo.pop()
            if self.kind[u] == "view":
                todo.extend(u.users)
            else:
                readers.append(u)
        return readers


class _Costs:
    """Kernels and plans priced in seconds: each kernel compiled alone by Inductor and timed
    on sample data (once per distinct kernel)."""

    def __init__(self, loops: _Loops):
        self.loops, self.timed = loops, {}

    def kernel(self, root: fx.Node, computed: set, reads: set) -> float:
        key = (root, frozenset(reads))
        if key not in self.timed:
            self.timed[key] = _time_kernel(root, computed, reads, self.loops.order.get)
        return self.timed[key]

    def plan(self, written: set) -> float:
        """The time of the graph's kernels where the ``written`` choices are written."""
        return sum(self.kernel(root, *self.loops.loop(root, written - {root}))
                   for root in self.loops.deciding | written)


def _time_kernel(root: fx.Node, computed: set, reads: set, position) -> float:
    """The seconds Inductor's compile of ``root``'s loop (``computed`` from ``reads``)
    takes on sample data."""
    from torch._inductor.compile_fx import compile_fx_inner

    graph, env = fx.Graph(), {}
    for n in sorted(reads, key=position):
        env[n] = graph.placeholder(n.name)
        env[n].meta = dict(n.meta)
    for n in sorted(computed, key=position):
        env[n] = graph.node_copy(n, lambda a: env[a])
    graph.output((env[root],))
    inputs = sample_like([n.meta["val"] for n in sorted(reads, key=position)])
    # outside the tracing context of the graph being compiled: its fake mode would give
    # these real inputs size symbols its guards cannot name
    with torch.no_grad(), torch._guards.tracing(None):
        compiled = compile_fx_inner(fx.GraphModule({}, graph), inputs)
        return measure.measure(lambda: compiled(list(inputs)), repeat=15,
                               time_cap_s=0.2).median


def _kind(n: fx.Node) -> str:
    """"input" (in memory: a placeholder, a constant, anything not a tensor), "pointwise",
    "view", "reduction", "call" (a library call or anything else: what it reads must be in
    memory) or "output"."""
    if n.op == "output":
        return "output"
    if n.op != "call_function" or not isinstance(n.meta.get("val"), torch.Tensor):
        return "input"
    tags = getattr(n.target, "tags", ())
    if torch.Tag.nondeterministic_seeded in tags or torch.Tag.inplace in tags:
        return "call"  # a random draw or a write into a tensor is never done twice
    if torch.Tag.pointwise in tags or n.target is aten._to_copy.default:
        return "pointwise"
    if getattr(n.target, "overloadpacket", None) in ALIASING_VIEWS:
        return "view"
    return "reduction" if torch.Tag.reduction in tags else "call"


def _op(n: fx.Node) -> str:
    return getattr(getattr(n.target, "overloadpacket", None), "__name__", str(n.target))


def _numel(n: fx.Node) -> int:
    val = n.meta.get("val")
    return concrete(val.numel()) if isinstance(val, torch.Tensor) else 1


def _write(graph: fx.Graph, d: fx.Node, first_reader: fx.Node) -> None:
    """``d`` written to memory at its own strides: its readers read the written tensor."""
    readers = list(d.users)
    with graph.inserting_before(first_reader):
        strides = [s if isinstance(s, int) else graph.call_function(aten.sym_stride.int, (d, i))
                   for i, s in enumerate(d.meta["val"].stride())]
        written = graph.call_function(FORCE_WRITE, (d, strides))
    for r in readers:
        r.replace_input_with(d, written)


def _copy_per_reader(graph: fx.Graph, d: fx.Node) -> int:
    """``d`` computed again for each of its readers after the first; how many read it."""
    readers = list(d.users)
    for r in readers[1:]:
        with graph.inserting_after(d):
            copy = graph.node_copy(d)
        r.replace_input_with(d, copy)
    return len(readers)
