"""The faster of eager and compiled, per Dynamo graph.

Inductor is not always faster than the library calls eager PyTorch makes: a transposed
convolution at batch 1 or a transposed matrix-vector product run 2–3× slower compiled on a
CPU. Users want the fastest correct program, so each inference graph is run both ways on
sample inputs of its shapes, interleaved (``measure.compare``), and the graph as Dynamo
captured it (what eager PyTorch runs, without the Python around it) replaces the compiled
artifact only when it is faster by the adoption margin. The choice is stored in the disk
cache: a second process neither measures nor, when eager won, compiles.

Training graphs keep the compiled artifact: their backward is compiled with the forward, and
one forward timing would not judge both.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch
import torch.fx as fx

from ollie import cache, cache_entry
from ollie.capture.samples import sample_like
from ollie.cost import measure

ADOPTION_MARGIN = cache_entry.ADOPTION_MARGIN
EAGER, COMPILED = "eager", "compiled"


@dataclass
class Choice:
    runs: str                      # EAGER or COMPILED
    compiled_s: float | None = None
    eager_s: float | None = None
    stored: bool = False           # taken from the disk cache, not measured now

    def describe(self, number: int) -> str:
        if self.compiled_s is None or self.eager_s is None:
            return f"graph {number}: {self.runs}"
        ratio = self.compiled_s / self.eager_s
        stored = ", stored in the disk cache" if self.stored else ""
        if self.runs == EAGER:
            return (f"graph {number} runs eagerly (library calls): {ratio:.2f}× faster than "
                    f"Inductor's compile ({self.eager_s * 1e3:.3f} ms vs "
                    f"{self.compiled_s * 1e3:.3f} ms{stored})")
        return (f"graph {number} runs Inductor's compile: eager {self.eager_s * 1e3:.3f} ms vs "
                f"compiled {self.compiled_s * 1e3:.3f} ms ({ratio:.2f}×{stored})")


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


def stored(store: cache.Cache | None, k: str) -> Choice | None:
    entry = store.get(k) if store is not None else None
    if not entry or entry.get("decision") not in (EAGER, COMPILED) \
            or cache_entry.needs_remeasure(entry):
        return None
    # the comparison's baseline is the compiled graph, its challenger the graph run eagerly
    return Choice(entry["decision"], compiled_s=entry.get("eager_s"),
                  eager_s=entry.get("ollie_s"), stored=True)


def choose(gm: fx.GraphModule, compiled, example_inputs, budget_s: float,
           store: cache.Cache | None, k: str) -> Choice:
    """Time ``gm`` itself against ``compiled`` (the baseline) on sample inputs; eager runs
    only when it is faster by the margin."""
    inputs = sample_like(example_inputs)
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        timing = measure.compare(lambda: compiled(*inputs), lambda: gm(*inputs),
                                 budget_s=budget_s)
    runs = EAGER if timing.faster(ADOPTION_MARGIN) else COMPILED
    if store is not None:
        store.put(k, {"decision": runs, "margin": ADOPTION_MARGIN, "remeasured": 0,
                      **timing.entry_fields()})
    return Choice(runs, compiled_s=timing.eager_best, eager_s=timing.ollie_best)
