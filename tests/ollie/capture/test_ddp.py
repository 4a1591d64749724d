"""Data-parallel training of a module compiled with ``backend="ollie"``, under DDP and under
FSDP2 (``fully_shard``): two processes (gloo, on the CPU) train three steps and get the eager
wrapper's losses and parameters; they share one cache folder, and each decision is derived by
one rank only.

The module is compiled inside the wrapper: with torch 2.13 on the CPU, ``torch.compile(DDP(m))``
and ``torch.compile(fully_shard(m))`` compile nothing (Dynamo breaks the graph at the wrapper's
own forward or hooks and skips the module they wrap: pytorch/pytorch#140416)."""
import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ollie.cache import Cache

ROOT = Path(__file__).resolve().parents[3]

WORKER = textwrap.dedent("""
    import json, os, sys, torch, torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel as DDP
    import ollie

    dist.init_process_group("gloo")
    rank = dist.get_rank()

    class Context(torch.nn.Module):  # each row plus the batch's mean, projected: a region
        def __init__(self):            # derived (the mean moves inside the product)
            super().__init__()
            self.u = torch.nn.Parameter(torch.randn(64, 8) / 8)
            self.v = torch.nn.Parameter(torch.randn(8, 64) / 3)
        def forward(self, x):
            return x + (x @ self.u).mean(0) @ self.v
    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), Context(),
                                   torch.nn.Linear(64, 4))

    def full(p):  # FSDP2 shards parameters as DTensors
        return p.full_tensor() if hasattr(p, "full_tensor") else p

    backend = ollie.OllieBackend(ollie.Options())
    if sys.argv[1] == "ddp":
        eager, compiled = DDP(model()), DDP(torch.compile(model(), backend=backend))
    else:
        eager, compiled = fully_shard(model()), fully_shard(torch.compile(model(), backend=backend))
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (eager, compiled)]
    torch.manual_seed(1 + rank)  # each rank its own data
    batches = [(torch.randn(256, 32), torch.randn(256, 4)) for _ in range(3)]
    losses = {"eager": [], "ollie": []}
    for x, y in batches:
        for name, m, opt in zip(losses, (eager, compiled), optimizers):
            opt.zero_grad()
            loss = ((m(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            losses[name].append(loss.item())
    gap = max((full(a) - full(b)).abs().max().item()
              for a, b in zip(eager.parameters(), compiled.parameters()))
    from torch._dynamo.utils import counters
    derived = sum(1 for report in backend.reports for r in report.regions if not r.cached)
    print(json.dumps({"rank": rank, "losses": losses, "parameter_gap": gap,
                      "graphs": counters["stats"]["unique_graphs"], "derived": derived}),
          flush=True)
    dist.barrier()
    # leave without torch's teardown: FSDP's and gloo's threads sometimes abort it
    # ("terminate called without an active exception") after all the work is done
    os._exit(0)
""")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("wrapper", ["ddp", "fsdp"])
def test_training_matches_the_eager_wrapper_on_two_ranks_sharing_one_cache(wrapper, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OLLIE_CACHE_DIR": str(tmp_path / "ollie"),
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": "2",
           "OMP_NUM_THREADS": "1"}
    ranks = [subprocess.Popen([sys.executable, "-c", WORKER, wrapper], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env={**env, "RANK": str(r)})
             for r in range(2)]
    results = []
    for p in ranks:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-2000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    for r in results:
        assert r["graphs"] >= 1, r  # the module really went through the backend
        for a, b in zip(r["losses"]["eager"], r["losses"]["ollie"]):
            assert abs(a - b) <= 1e-5 * max(1.0, abs(a)), r
        assert r["parameter_gap"] <= 1e-5, r
    # both ranks wrote their decisions into one cache folder: every entry is whole and valid,
    # and each region's decision was derived by one rank only (the other waited and reused it)
    cache = Cache(tmp_path / "ollie")
    regions = [k for k in cache.keys() if cache.get(k).get("original")]
    assert regions and all(cache.get(key) is not None for key in cache.keys())
    assert sum(r["derived"] for r in results) == len(regions), results
