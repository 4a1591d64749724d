"""``ollie bench --suite sizes``: one function called at many sizes, as real programs are.

Each case is one function called with a dozen sizes in turn. Four compiled variants follow
the whole sequence, each from its own code object: ``torch.compile``,
``torch.compile(backend="ollie")`` and ``@ollie.optimize``, with torch's defaults (the second
size makes Dynamo recompile with the size symbolic), and, at every size, a fresh compile of
each Ollie entry point with static sizes (``dynamic=False``): the speed-up a compile for
exactly that size gets through that entry point (``ollie.optimize`` calls a function itself
where eager PyTorch runs it faster; ``torch.compile``'s entry always runs Dynamo's frame).
Per size: the medians of interleaved rounds, each Ollie entry point's share of its static
compile's speed-up over eager, and the first call at that size (compile time included); per
case: the graphs each variant compiled, and Ollie's first calls at later sizes against its
first. Those totals come from fresh processes, one per variant with fresh caches, that call
the function once at each size in turn (in the timing process each variant's compile follows
torch.compile's of the same graphs, whose Inductor artifacts it may reuse):

    python -m ollie.cli.bench_sizes CASE VARIANT BUDGET_S

prints the first call's seconds at each size as one JSON line.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import torch

from ollie.cli.bench_suite import _randn


@dataclass
class SizeCase:
    name: str
    description: str
    fn: Callable
    inputs: Callable[[int], tuple]   # size -> arguments
    sizes: tuple[int, ...]
    params: Callable[[], list] | None = None  # a training step: fn is its loss

    def call(self, f: Callable, args: tuple) -> torch.Tensor:
        """``f`` at ``args`` without grad, or for a training step the gradients of its loss
        with respect to ``params()`` (forward and backward), flattened into one tensor."""
        if self.params is None:
            with torch.no_grad():
                return f(*args)
        with torch.enable_grad():
            grads = torch.autograd.grad(f(*args), self.params())
        return torch.cat([g.reshape(-1) for g in grads])


def chain_softmax(a, b, c):
    return torch.softmax((a @ b) @ c, dim=-1)


def rows_sum(x, w):
    return torch.tanh((x @ w).sum(0))


def chain(a, b, c):
    return (a @ b) @ c


def last_logits(h, w):
    return torch.log_softmax((h @ w)[-4:], dim=-1)


def last_token_logits(h, w):
    return torch.log_softmax(torch.nn.functional.linear(h, w)[:, -1], dim=-1)


def step_products(x, w):
    return torch.relu(torch.stack([torch.einsum("bd,de->be", x[:, t], w)
                                   for t in range(x.shape[1])], 1))


def token_mean(h, w, b):
    return torch.nn.functional.linear(h, w, b).mean(1)


_MODELS: dict = {}  # built on the first call of a case's inputs (not at import)


def bert_stack(x):
    return _MODELS["bert"](x)


def gpt2_block(x):
    return _MODELS["gpt2"](x)


class LowRank(torch.nn.Module):
    """A layer whose weight is a product of two thin factors, applied as research code often
    writes it: the weight formed first (d² work per call), then applied to the batch."""

    def __init__(self, d: int = 512, rank: int = 16):
        super().__init__()
        self.u = torch.nn.Parameter(torch.randn(d, rank) / d ** 0.5)
        self.v = torch.nn.Parameter(torch.randn(rank, d) / rank ** 0.5)

    def forward(self, x):
        return torch.tanh(x @ (self.u @ self.v))


def low_rank_loss(x):
    return _MODELS["low_rank"](x).pow(2).mean()


def _low_rank_inputs(n: int):
    if "low_rank" not in _MODELS:
        torch.manual_seed(0)
        _MODELS["low_rank"] = LowRank()
    return (_randn(n, 512, seed=n),)


def _sequence(name: str, d: int = 256):
    """Inputs (1, n, d) of a model in ``_MODELS``, the model made on first use."""
    def inputs(n: int):
        if name not in _MODELS:
            from ollie.cli.bench_models import BertStack, GPT2Block
            torch.manual_seed(0)
            _MODELS[name] = (BertStack(layers=2) if name == "bert" else GPT2Block()).eval()
        return (_randn(1, n, d, seed=n),)
    return inputs


_B1, _C1 = _randn(1024, 1024, seed=1), _randn(1024, 64, seed=2)
_W = _randn(512, 512, seed=3)
_B2, _C2 = _randn(512, 512, seed=4), _randn(512, 64, seed=5)
_VOCAB = _randn(256, 4096, seed=6)
_W_STEP = _randn(256, 256, seed=7)
_W_POOL, _B_POOL = _randn(512, 256, seed=8), _randn(512, seed=9)

CASES = [
    SizeCase("chain_softmax", "softmax((a @ b) @ c), a: rows × 1024, b: 1024², c: 1024 × 64",
             chain_softmax, lambda n: (_randn(n, 1024, seed=n), _B1, _C1),
             (256, 384, 512, 640, 200, 300, 450, 700, 800, 900, 1000, 1300)),
    SizeCase("rows_sum", "tanh((x @ w).sum(0)), x: rows × 512, w: 512²", rows_sum,
             lambda n: (_randn(n, 512, seed=n), _W),
             (256, 384, 512, 768, 1024, 1536, 2048, 300, 600, 900, 3000, 4096)),
    SizeCase("chain_flip", "(a @ b) @ c, a: rows × 512, b: 512², c: 512 × 64: the best "
             "order flips at 64 rows", chain, lambda n: (_randn(n, 512, seed=n), _B2, _C2),
             (512, 384, 256, 128, 96, 32, 24, 16, 48, 1024, 80, 40)),
    SizeCase("last_logits", "log_softmax((h @ w)[-4:]): the logits of a sequence's last 4 "
             "positions, h: length × 256, w: 256 × 4096", last_logits,
             lambda n: (_randn(n, 256, seed=n), _VOCAB),
             (256, 320, 384, 448, 512, 64, 96, 128, 160, 192, 224, 288)),
    SizeCase("lm_head_decode", "log_softmax(linear(h, w)[:, -1]): a language model's head "
             "while decoding, h: 1 × length × 256 (the length grows by one token), w: 4096 × "
             "256", last_token_logits, lambda n: (_randn(1, n, 256, seed=n), _VOCAB.t()),
             tuple(range(100, 112))),
    SizeCase("step_products", "relu(stack([einsum('bd,de->be', x[:, t], w) for t in range(8)], "
             "1)): one weight applied to each of 8 time steps, x: batch × 8 × 256, w: 256²",
             step_products,
             lambda n: (_randn(n, 8, 256, seed=n), _W_STEP),
             (64, 48, 32, 100, 128, 16, 200, 256, 24, 80, 96, 40)),
    SizeCase("token_mean", "linear(h, w, b).mean(1): a layer averaged over the tokens, h: 4 × "
             "length × 256, w: 512 × 256", token_mean,
             lambda n: (_randn(4, n, 256, seed=n), _W_POOL, _B_POOL),
             (128, 96, 64, 160, 200, 256, 32, 48, 300, 384, 80, 112)),
    SizeCase("token_mean_features", "token_mean whose second length is the features' 256: "
             "the graph for every length has a size hint equal to a fixed size", token_mean,
             lambda n: (_randn(4, n, 256, seed=n), _W_POOL, _B_POOL),
             (128, 256, 96, 64, 160, 200, 32, 48, 300, 384, 80, 112)),
    SizeCase("bert_seq", "2 BERT layers, d=256, sequence lengths 32 to 512", bert_stack,
             _sequence("bert"), (32, 64, 96, 128, 192, 256, 320, 384, 448, 512, 40, 200)),
    SizeCase("gpt2_decode", "GPT-2 block, d=256, decoding: the sequence grows by one token",
             gpt2_block, _sequence("gpt2"), tuple(range(16, 28))),
    SizeCase("train_partial", "training steps (forward and backward) of tanh(x @ (U @ V)), "
             "U: 512 × 16, V: 16 × 512, batches of 256 rows and the partial ones an epoch ends "
             "with", low_rank_loss, _low_rank_inputs, (256, 200, 100, 37),
             params=lambda: list(_MODELS["low_rank"].parameters())),
]
BY_NAME = {c.name: c for c in CASES}
OLLIE_VARIANTS = ("ollie", "optimize", "static", "static_entry")


def run_case(case: SizeCase, repeat: int, budget_s: float) -> dict:
    import ollie
    from ollie.capture.eager_or_compiled import own_code
    from ollie.cli.bench import max_relative_error, time_side_by_side, tolerance
    from torch._dynamo.utils import counters

    compiled = torch.compile(own_code(case.fn, f"sizes_{case.name}_compile"))
    backend = ollie.OllieBackend(ollie.Options(budget_s=budget_s))
    optimized = torch.compile(own_code(case.fn, f"sizes_{case.name}_ollie"), backend=backend)
    decorated = ollie.optimize(own_code(case.fn, f"sizes_{case.name}_optimize"),
                               budget_s=budget_s)
    graphs = {"compile": 0, "ollie": 0}
    rows = []
    for size in case.sizes:
        args = case.inputs(size)
        expected = case.call(case.fn, args)
        row = {"size": size, "first_call_s": {}}
        variants = {"eager": lambda: case.call(case.fn, args)}
        static = ollie.optimize(own_code(case.fn, f"sizes_{case.name}_static_{size}"),
                                budget_s=budget_s, dynamic=False)
        static_entry = torch.compile(
            own_code(case.fn, f"sizes_{case.name}_static_entry_{size}"), dynamic=False,
            backend=ollie.OllieBackend(ollie.Options(budget_s=budget_s)))
        for name, f in (("compile", compiled), ("ollie", optimized), ("optimize", decorated),
                        ("static", static), ("static_entry", static_entry)):
            before = counters["stats"]["unique_graphs"]
            t0 = time.perf_counter()
            out = case.call(f, args)
            row["first_call_s"][name] = time.perf_counter() - t0
            if name == "compile":
                graphs[name] += counters["stats"]["unique_graphs"] - before
            row[f"{name}_error"] = max_relative_error(out, expected)
            variants[name] = lambda f=f: case.call(f, args)
        row["allowed_error"] = tolerance(lambda *a: case.call(case.fn, a), args, expected)
        times = time_side_by_side(variants, repeat, grad=case.params is not None)
        row.update({f"{name}_ms": t * 1e3 for name, t in times.items()})
        row["share_of_static"] = times["static_entry"] / times["ollie"]
        row["optimize_share_of_static"] = times["static"] / times["optimize"]
        rows.append(row)
    graphs["ollie"] = backend.graphs  # (Dynamo's own count includes Ollie's calibration)
    # a fresh process can rebuild the suite's own cases only
    fresh = {v: _fresh_first_calls(case.name, v, budget_s) if case.name in BY_NAME else None
             for v in ("compile", "ollie")}
    firsts = fresh["ollie"] if isinstance(fresh["ollie"], list) else [math.nan]
    from ollie.capture.report import graph_line
    return {"case": case.name, "description": case.description, "sizes": rows,
            "graphs": graphs, "fresh_process_first_calls_s": fresh,
            "first_call_s": firsts[0], "later_first_calls_s": sum(firsts[1:]),
            "ollie_graphs": [graph_line(r) for r in backend.reports],  # rewrites per graph
            "match": all(r[f"{v}_error"] <= r["allowed_error"] for r in rows
                         for v in OLLIE_VARIANTS)}  # torch.compile's aside


def first_calls(case_name: str, variant: str, budget_s: float) -> list[float]:
    """Seconds of the first call at each of the case's sizes, in turn, in this process:
    ``torch.compile``'s (``variant`` "compile") or ``torch.compile(backend="ollie")``'s."""
    import ollie

    case = BY_NAME[case_name]
    f = torch.compile(case.fn) if variant == "compile" else \
        torch.compile(case.fn, backend=ollie.OllieBackend(ollie.Options(budget_s=budget_s)))
    seconds = []
    for size in case.sizes:
        args = case.inputs(size)
        t0 = time.perf_counter()
        case.call(f, args)
        seconds.append(time.perf_counter() - t0)
    return seconds


def _fresh_first_calls(case_name: str, variant: str, budget_s: float):
    import tempfile

    from ollie.cli.first_call import spawn
    with tempfile.TemporaryDirectory(prefix="ollie-sizes-") as caches:
        return spawn("ollie.cli.bench_sizes", [case_name, variant, str(budget_s)], caches)


def table(result: dict):
    from rich.table import Table

    g, fresh = result["graphs"], result["fresh_process_first_calls_s"]
    compile_firsts = fresh["compile"] if isinstance(fresh["compile"], list) else [math.nan]
    t = Table(title=f"{result['case']}: {result['description']}",
              caption=f"graphs compiled: torch.compile {g['compile']}, Ollie {g['ollie']}; "
                      f"in fresh processes, Ollie's first call {result['first_call_s']:.2f} s, "
                      f"later sizes' first calls together {result['later_first_calls_s']:.2f} "
                      f"s (torch.compile's {compile_firsts[0]:.2f} s, "
                      f"{sum(compile_firsts[1:]):.2f} s); " + "; ".join(result["ollie_graphs"]))
    for col in ("size", "eager ms", "compile ms", "ollie ms", "optimize ms",
                "static ms (ollie / optimize)", "share of static (ollie / optimize)",
                "first call s, this process (compile / ollie)",
                "max rel err"):
        t.add_column(col, justify="right")
    for r in result["sizes"]:
        first = r["first_call_s"]
        t.add_row(str(r["size"]), f"{r['eager_ms']:.3f}", f"{r['compile_ms']:.3f}",
                  f"{r['ollie_ms']:.3f}", f"{r['optimize_ms']:.3f}",
                  f"{r['static_entry_ms']:.3f} / {r['static_ms']:.3f}",
                  f"{r['share_of_static']:.2f} / {r['optimize_share_of_static']:.2f}",
                  f"{first['compile']:.2f} / {first['ollie']:.2f}",
                  f"{max(r[f'{v}_error'] for v in OLLIE_VARIANTS):.1e}")
    return t


def run(cases: list, args, out) -> int:
    import json

    from rich.console import Console

    results = [run_case(case, args.repeat, args.budget_s) for case in cases]
    if args.json:
        print(json.dumps(results, indent=2), file=out)
    else:
        console = Console(file=out, width=None if out.isatty() else 160)
        for result in results:
            console.print(table(result))
    return 0 if all(r["match"] for r in results) else 1


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(first_calls(sys.argv[1], sys.argv[2], float(sys.argv[3]))))
