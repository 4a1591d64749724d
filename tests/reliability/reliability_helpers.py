"""Running a child Python under a watchdog: wall time and resident memory capped.

A reliability case may hang or eat memory on a regression (a FIFO read forever, a link to
``/dev/zero``, an e-graph that grows without bound); the child is killed at the cap, so the
test fails instead of the machine. ``Result`` has what the report table needs: seconds, peak
resident memory of the child and its children, exit code, the last line of stderr.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Result:
    seconds: float
    peak_mb: float
    returncode: int | None
    stdout: str
    stderr: str
    killed: str = ""             # why the watchdog killed it ("" if it ended by itself)

    @property
    def last_line(self) -> str:
        lines = (self.stderr.strip() or self.stdout.strip()).splitlines()
        return lines[-1] if lines else ""


def _rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and its descendants (Linux ``/proc``; 0 elsewhere)."""
    try:
        kids: dict[int, list[int]] = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/stat") as f:
                        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                    kids.setdefault(ppid, []).append(int(name))
                except (OSError, ValueError, IndexError):
                    pass
    except OSError:
        return 0.0
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except (OSError, ValueError):
            pass
        stack.extend(kids.get(p, ()))
    return total / 1024


def run_python(code: str | None = None, args: list[str] = (), timeout: float = 60.0,
               max_mb: float = 3000.0, env: dict | None = None, module: str | None = None,
               stdin: str | None = None) -> Result:
    """Run ``python -c code`` (or ``-m module``) with ``args``; kill it past ``timeout``
    seconds or ``max_mb`` of resident memory."""
    cmd = [sys.executable] + (["-m", module] if module else ["-c", code]) + list(args)
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_WAIT_POLICY": "PASSIVE",
                **(env or {})}
    start = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                         env=full_env, cwd=str(ROOT), start_new_session=True)
    out: dict[str, bytes] = {}

    def read(name, stream):
        out[name] = stream.read()

    readers = [threading.Thread(target=read, args=(n, s), daemon=True)
               for n, s in (("out", p.stdout), ("err", p.stderr))]
    for r in readers:
        r.start()
    if stdin is not None:
        try:
            p.stdin.write(stdin.encode())
            p.stdin.close()
        except OSError:
            pass
    peak, killed = 0.0, ""
    while p.poll() is None:
        peak = max(peak, _rss_mb(p.pid))
        elapsed = time.perf_counter() - start
        if elapsed > timeout:
            killed = f"killed after {timeout:g} s"
        elif peak > max_mb:
            killed = f"killed at {peak:.0f} MB"
        if killed:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
            p.wait()
            break
        time.sleep(0.02)
    for r in readers:
        r.join(10)
    return Result(time.perf_counter() - start, peak, p.returncode,
                  out.get("out", b"").decode(errors="replace"),
                  out.get("err", b"").decode(errors="replace"), killed)


# The function and inputs the subprocess scenarios compile (a script's text, after its imports).
WORKLOAD = """
def fn(a, b, c):
    return torch.relu((a @ b) @ c) * 2.0

g = torch.Generator().manual_seed(0)
a, b, c = (torch.randn(64, 256, generator=g), torch.randn(256, 256, generator=g),
           torch.randn(256, 8, generator=g))
"""


def dead_pid() -> int:
    """A process id that no process has now (a writer killed with -9 leaves its id behind)."""
    pid = 2 ** 22 - 7
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except OSError:
            pass
        pid -= 1
