"""Launch configurations of generated kernels: block sizes, ``num_warps``, ``num_stages``.

On a GPU the first launch of a kernel for a dtype and device measures a small candidate set
(per kernel kind, capped to the problem's sizes) with ``triton.testing.do_bench`` and keeps
the fastest; the choice is remembered in memory, keyed by the kernel's source (which bakes in
its shapes), the dtype and the device name, and -- when a path is set
(``set_tuning_file`` or ``OLLIE_TRITON_TUNING``) -- in a JSON file shared across processes.
On the CPU (``TRITON_INTERPRET=1``) or with ``OLLIE_TRITON_TUNE=0`` there is no measuring:
a fixed default per kind.

Generated launchers call ``launch(kernel, grid, kind, problem, *args, **constexprs)``; a
config is a dict of the kind's block sizes plus ``num_warps`` and ``num_stages``.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import os
import pathlib
import tempfile
import threading

import torch

BLOCKS = {
    "map": ("BLOCK",),
    "reduce": ("BLOCK_OUT", "BLOCK_RED"),
    "row": (),
    "dot": ("BLOCK_M", "BLOCK_N", "BLOCK_K"),
    "banded": ("BLOCK_M", "BLOCK_N", "BLOCK_K"),
}
# GPU candidates per kind: block sizes, then (num_warps, num_stages)
CANDIDATES = {
    "map": [(256, 4, 2), (1024, 4, 2), (1024, 8, 2), (4096, 8, 2)],
    "reduce": [(1, 1024, 4, 2), (8, 256, 4, 2), (32, 64, 4, 2), (64, 16, 4, 2),
               (128, 8, 4, 2), (256, 1, 4, 2)],
    "row": [(1,), (2,), (4,), (8,), (16,)],
    "dot": [(128, 128, 32, 8, 3), (128, 64, 32, 4, 4), (64, 128, 32, 4, 4), (64, 64, 32, 4, 4),
            (64, 64, 64, 4, 3), (32, 64, 32, 4, 4), (64, 32, 32, 4, 4), (16, 64, 64, 4, 3)],
    "banded": [(64, 64, 64, 4, 3), (128, 64, 32, 8, 3), (64, 128, 32, 4, 4), (32, 64, 64, 4, 3),
               (64, 64, 32, 4, 4), (128, 128, 32, 8, 3)],
}
INTERPRETER_TILE = 1 << 13  # elements of a tile on the CPU interpreter (fewer, larger steps)


def _pow2(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


def _caps(kind: str, problem: dict) -> tuple[int, ...]:
    """The largest useful block size of each of the kind's blocks."""
    if kind == "map":
        return (_pow2(problem["N"]),)
    if kind == "reduce":
        return _pow2(problem["N_OUT"]), _pow2(problem["N_RED"])
    if kind in ("dot", "banded"):  # tl.dot tiles are at least 16 on each side
        return tuple(max(16, _pow2(problem[k])) for k in ("M", "N", "K"))
    return ()


def candidates(kind: str, problem: dict) -> list[dict]:
    """The GPU candidates of a kind, block sizes capped to the problem (duplicates dropped)."""
    names, caps, out = BLOCKS[kind], _caps(kind, problem), []
    for c in CANDIDATES[kind]:
        blocks = tuple(min(b, cap) for b, cap in zip(c, caps))
        if kind == "row":
            cfg = {"num_warps": c[0], "num_stages": 1}
            if c[0] * 32 > max(problem["L"], 32) * 2:
                continue  # more threads than elements
        else:
            cfg = dict(zip(names, blocks), num_warps=c[-2], num_stages=c[-1])
        if cfg not in out:
            out.append(cfg)
    return out


def candidates_default(kind: str, problem: dict, gpu: bool = False) -> dict:
    """The configuration used without measuring: the first GPU candidate on a GPU; on the
    interpreter, large blocks (each step is a numpy call, so fewer steps run faster)."""
    if gpu:
        return candidates(kind, problem)[0]
    caps = _caps(kind, problem)
    if kind == "map":
        blocks = (min(caps[0], INTERPRETER_TILE),)
    elif kind == "reduce":
        red = min(caps[1], 256)
        blocks = (min(caps[0], max(1, INTERPRETER_TILE // red)), red)
    elif kind in ("dot", "banded"):
        blocks = tuple(min(c, 64) for c in caps)
    else:
        blocks = ()
    return dict(zip(BLOCKS[kind], blocks), num_warps=4, num_stages=2)


class Tuner:
    """Chooses and remembers launch configurations (see the module docstring)."""

    def __init__(self, path: str | os.PathLike | None = None):
        self.memory: dict[str, dict] = {}
        self.path: pathlib.Path | None = None
        self.enabled = os.environ.get("OLLIE_TRITON_TUNE", "1") != "0"
        self._lock = threading.Lock()
        self._keys: dict[int, str] = {}
        if path:
            self.set_file(path)

    def set_file(self, path: str | os.PathLike | None) -> None:
        """Remember choices in JSON file ``path`` (loaded now if it exists); None: memory only."""
        self.path = pathlib.Path(path) if path else None
        if self.path is not None and self.path.exists():
            self.memory.update(json.loads(self.path.read_text()))

    def _save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        on_disk = json.loads(self.path.read_text()) if self.path.exists() else {}
        on_disk.update(self.memory)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(on_disk, f, indent=1, sort_keys=True)
        os.replace(tmp, self.path)

    def kernel_key(self, kernel) -> str:
        """A digest of the kernel's source (its shapes are baked in)."""
        key = self._keys.get(id(kernel))
        if key is None:
            fn = getattr(kernel, "fn", kernel)
            text = inspect.getsource(fn)
            key = f"{fn.__name__}-{hashlib.sha1(text.encode()).hexdigest()[:16]}"
            self._keys[id(kernel)] = key
        return key

    def device_name(self, ref) -> str | None:
        """The GPU a launch runs on, or None where nothing is measured (CPU, interpreter)."""
        if ref is None or ref.device.type != "cuda" or os.environ.get("TRITON_INTERPRET") == "1":
            return None
        return torch.cuda.get_device_name(ref.device)

    def config(self, kernel, grid, kind: str, problem: dict, args, constexprs) -> dict:
        ref = next((a for a in args if isinstance(a, torch.Tensor)), None)
        device = self.device_name(ref)
        if device is None:
            return candidates_default(kind, problem)
        if not self.enabled:
            return candidates_default(kind, problem, gpu=True)
        key = f"{self.kernel_key(kernel)}|{kind}|{ref.dtype}|{device}"
        with self._lock:
            if key not in self.memory:
                self.memory[key] = self.measure(kernel, grid, kind, problem, args, constexprs)
                self._save()
            return self.memory[key]

    def measure(self, kernel, grid, kind, problem, args, constexprs) -> dict:
        from triton.testing import do_bench

        best, best_ms, errors = None, float("inf"), []
        for cfg in candidates(kind, problem):
            try:
                ms = do_bench(lambda: _run(kernel, grid, cfg, args, constexprs),
                              warmup=5, rep=25)
            except Exception as e:  # e.g. out of shared memory for this tile
                errors.append(f"{cfg}: {type(e).__name__}: {e}")
                continue
            if ms < best_ms:
                best, best_ms = cfg, ms
        if best is None:
            raise RuntimeError(f"no launch configuration of {self.kernel_key(kernel)} ran:\n"
                               + "\n".join(errors))
        return best

    def launch(self, kernel, grid, kind: str, problem: dict, *args, **constexprs) -> None:
        _run(kernel, grid, self.config(kernel, grid, kind, problem, args, constexprs), args,
             constexprs)


def _run(kernel, grid, cfg: dict, args, constexprs) -> None:
    blocks = {k: v for k, v in cfg.items() if k not in ("num_warps", "num_stages")}
    kernel[grid(cfg)](*args, **constexprs, **blocks, num_warps=cfg["num_warps"],
                      num_stages=cfg["num_stages"])


TUNER = Tuner(os.environ.get("OLLIE_TRITON_TUNING"))


def set_tuning_file(path: str | os.PathLike | None) -> None:
    """Where the process-wide tuner keeps its choices (a JSON file), or None for memory only."""
    TUNER.set_file(path)
