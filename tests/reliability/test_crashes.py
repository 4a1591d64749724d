"""Fault injection through the public API: processes killed with SIGKILL while compiling,
and several processes compiling the same function into one cache folder at once. Whatever
they left behind, the next run is correct and the cache folder stays readable (dead
writers' temporary files are removed)."""
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from reliability_helpers import ROOT, WORKLOAD, dead_pid

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")

COMPILE = """
import inspect, os, sys
import torch, ollie
fast = {"inductor": False} if "inductor" in inspect.signature(ollie.optimize).parameters else {}

""" + WORKLOAD + """
print("ready", flush=True)
sys.stdin.readline()                            # "go": imports are done before the clock
f = ollie.optimize(fn, cache_dir=sys.argv[1], budget_s=1.0, progress=False, **fast)
with torch.no_grad():
    got, want = f(a, b, c), fn(a, b, c)
    big = [x * 100 for x in (a, b, c)]          # the same shapes, far larger values
    got_big, want_big = f(*big), fn(*big)
ok = torch.allclose(got, want, rtol=1e-4, atol=1e-3) and \\
    torch.allclose(got_big, want_big, rtol=1e-4, atol=1e-3 * want_big.abs().max().item())
print("correct" if ok else "WRONG", flush=True)
sys.exit(0 if ok else 3)
"""

TRIES = int(os.environ.get("OLLIE_KILL_TRIES", "20"))
KILL_BUDGET_S = float(os.environ.get("OLLIE_KILL_BUDGET_S", "25"))


def env(tmp_path) -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_WAIT_POLICY": "PASSIVE",
            "TORCHINDUCTOR_COMPILE_THREADS": "1",
            "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
            "OLLIE_CACHE_DIR": str(tmp_path / "default-cache")}


def start(cache_dir, tmp_path) -> subprocess.Popen:
    """A compiling process, stopped after its imports until ``go``."""
    return subprocess.Popen([sys.executable, "-c", COMPILE, str(cache_dir)], env=env(tmp_path),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=str(ROOT))


def go(p: subprocess.Popen) -> float:
    assert wait_ready(p), p.stderr.read()[-2000:] if p.poll() is not None else "not ready"
    p.stdin.write("go\n")
    p.stdin.flush()
    return time.perf_counter()


def finish(p: subprocess.Popen, timeout: float = 240) -> tuple[int, str, str]:
    try:
        out, err = p.communicate(timeout=timeout)
    except (BrokenPipeError, ValueError):  # killed before it read "go"
        p.wait(timeout)
        out, err = p.stdout.read(), p.stderr.read()
    return p.returncode, out, err


def wait_ready(p: subprocess.Popen, timeout: float = 60) -> bool:
    start_t = time.perf_counter()
    while time.perf_counter() - start_t < timeout:
        line = p.stdout.readline()
        if line.startswith("ready"):
            return True
        if not line and p.poll() is not None:
            return False
    return False


def test_sigkill_while_compiling_then_a_run_is_correct(tmp_path):
    from ollie.cache import Cache, compiler_digest
    cache_dir = tmp_path / "cache"
    rng = random.Random(int(os.environ.get("OLLIE_KILL_SEED", "10")))
    window = 3.0  # seconds after "go" to kill within; a run that ends first narrows it
    begun, tries, killed = time.perf_counter(), 0, 0
    nxt = start(cache_dir, tmp_path)
    while tries < TRIES and (tries < 5 or time.perf_counter() - begun < KILL_BUDGET_S):
        p, nxt = nxt, start(cache_dir, tmp_path)  # the next one imports meanwhile
        t0 = go(p)
        deadline = t0 + rng.uniform(0.0, window)
        while p.poll() is None and time.perf_counter() < deadline:
            time.sleep(0.01)
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
            killed += 1
        else:
            window = time.perf_counter() - t0
        code, out, err = finish(p)
        assert code in (0, -signal.SIGKILL), f"try {tries}: rc {code}: {err[-2000:]}"
        tries += 1
    assert killed >= 3, f"only {killed} of {tries} tries were killed while compiling"
    # A kill lands inside a write only now and then: plant what one leaves, in both folders.
    dead = dead_pid()
    planted = [cache_dir / "results" / f".{'ab' * 32}.{dead}.x1y2.tmp",
               cache_dir / f".tuned_model.{dead}.z3.tmp"]
    for f in planted:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b'{"format": 1, "key": "torn')

    go(nxt)
    code, out, err = finish(nxt)
    assert code == 0 and "correct" in out, err[-2000:]
    compiler_digest.cache_clear()
    cache = Cache(cache_dir)
    leftovers = [f for f in cache.entries_dir.glob("*.tmp")] + list(cache.dir.glob(".*.tmp"))
    assert not leftovers, f"dead writers' files left: {leftovers}"
    info = cache.info()  # every file is readable or ignored, none raises
    assert info.get("refused") is None and info["temporary"] == 0


def test_three_processes_compiling_the_same_function_at_once(tmp_path):
    from ollie.cache import Cache, compiler_digest
    cache_dir = tmp_path / "cache"
    procs = [start(cache_dir, tmp_path) for _ in range(3)]
    for p in procs:
        assert wait_ready(p)
    for p in procs:  # all three at once
        p.stdin.write("go\n")
        p.stdin.flush()
    results = [finish(p) for p in procs]
    for code, out, err in results:
        assert code == 0 and "correct" in out, err[-2000:]
    compiler_digest.cache_clear()  # the children's: this checkout may have changed meanwhile
    info = Cache(cache_dir).info()
    assert info["ignored"] == 0 and info["temporary"] == 0 and info["entries"] >= 1, info
    later = start(cache_dir, tmp_path)   # and a later one reuses them
    go(later)
    code, out, err = finish(later)
    assert code == 0 and "correct" in out, err[-2000:]
