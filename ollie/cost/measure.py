"""Real measurement: time a callable, check candidates against a reference, keep the data.

``measure(fn, *args)`` runs ``fn`` a few times to warm up, then repeatedly, and reports the
median, minimum and inter-quartile range in seconds. On CUDA tensors each run is bracketed by
CUDA events and the device is synchronised before reading them; on CPU ``perf_counter``
brackets each run. A time cap bounds what one candidate may cost: runs stop once the cap is
spent (at least one timed run always happens).

``measure_candidates(candidates, inputs, reference, cap)`` runs each candidate once on the
same inputs, compares its output with the reference (max relative error), and times only
those that match; a mismatching or failing candidate is marked wrong and never chosen.
Every timing of a program can be appended to the dataset the cost model learns from: one JSON
line (features, measured seconds, device, versions, program text) in the cache folder.
"""
from __future__ import annotations

import json
import os
import platform
import stat
import statistics
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import torch

from ollie import cache as cache_mod
from ollie import safe_files
from ollie.numerics import max_relative_error, tolerance


@dataclass
class Measurement:
    median: float
    min: float
    iqr: float
    runs: int
    device: str
    versions: dict = field(default_factory=dict)
    capped: bool = False        # the time cap ended the runs before ``repeat``

    def __str__(self) -> str:
        return (f"{self.median * 1e3:.4g} ms median (min {self.min * 1e3:.4g} ms, IQR "
                f"{self.iqr * 1e3:.3g} ms, {self.runs} runs{', capped' if self.capped else ''})"
                f" on {self.device}")


# -- devices -----------------------------------------------------------------------------------
def _tensors(args) -> Iterable[torch.Tensor]:
    for a in args:
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, (list, tuple)):
            yield from _tensors(a)


def _cuda_device(args) -> torch.device | None:
    for t in _tensors(args):
        if t.is_cuda:
            return t.device
    return None


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def device_string(device: torch.device | str | None = None) -> str:
    """``cuda:NVIDIA H100 ...`` or ``cpu:<model> x<threads>`` (timings differ between them)."""
    device = torch.device(device) if device is not None else torch.device("cpu")
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    return f"cpu:{_cpu_name()} x{torch.get_num_threads()}"


# -- timing ------------------------------------------------------------------------------------
def measure(fn: Callable, *args, warmup: int = 2, repeat: int = 25,
            time_cap_s: float = 1.0, min_runs: int = 3) -> Measurement:
    """Time ``fn(*args)``: ``warmup`` untimed runs, then up to ``repeat`` timed runs, stopping
    early once ``time_cap_s`` (warm-up included) is spent and ``min_runs`` are done -- or at
    once after the first timed run if that alone exceeded the cap."""
    cuda = _cuda_device(args)
    start = time.perf_counter()
    for _ in range(warmup):
        fn(*args)
        if time.perf_counter() - start > time_cap_s:
            break
    if cuda is not None:
        torch.cuda.synchronize(cuda)
    times: list[float] = []
    capped = False
    while len(times) < repeat:
        if cuda is not None:
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            fn(*args)
            end.record()
            end.synchronize()
            times.append(begin.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn(*args)
            times.append(time.perf_counter() - t0)
        spent = time.perf_counter() - start
        if spent > time_cap_s and (len(times) >= min_runs or times[0] > time_cap_s):
            capped = len(times) < repeat
            break
    return _summary(times, device_string(cuda), capped)


def _summary(times: Sequence[float], device: str, capped: bool) -> Measurement:
    ordered = sorted(times)
    if len(ordered) >= 4:
        q = statistics.quantiles(ordered, n=4)
        iqr = q[2] - q[0]
    else:
        iqr = ordered[-1] - ordered[0]
    return Measurement(median=statistics.median(ordered), min=ordered[0], iqr=iqr,
                       runs=len(ordered), device=device, versions=cache_mod.current_versions(),
                       capped=capped)


# -- candidates --------------------------------------------------------------------------------
@dataclass
class CandidateResult:
    index: int
    candidate: Any
    ok: bool
    error: float                      # max relative error against the reference (inf: failed)
    measurement: Measurement | None = None
    reason: str = ""                  # why a candidate is wrong
    kernel: Callable | None = None    # what was timed (the lowered program)

    @property
    def seconds(self) -> float:
        return self.measurement.median if self.measurement else float("inf")


def _call_args(candidate, inputs, backend: str = "torch",
               fused: bool = False) -> tuple[Callable, tuple]:
    """(callable, positional args) for a candidate: a callable taking ``inputs`` as given,
    an object with ``input_names`` (a kernel: ``inputs`` maps names to tensors) or with
    ``.program`` (a derivations Candidate: lowered with codegen's ``backend``)."""
    fn = candidate
    if not callable(fn) and hasattr(fn, "program"):
        import codegen
        fn = codegen.lower(fn.program, backend=backend, fused=fused)
    names = getattr(fn, "input_names", None)
    if isinstance(inputs, dict):
        if names is None:
            raise TypeError("inputs given by name need candidates with input_names")
        return fn, tuple(inputs[n] for n in names)
    return fn, tuple(inputs)


def measure_candidates(candidates: Sequence, inputs, reference, cap: float = 1.0, *,
                       rtol: float | None = None, warmup: int = 2, repeat: int = 25,
                       backend: str = "torch", record: bool = False,
                       dataset: str | os.PathLike | None = None,
                       labels: dict | None = None,
                       cache_dir: str | os.PathLike | None = None,
                       fused: bool = False) -> list[CandidateResult]:
    """Check each candidate against ``reference`` (a tensor, or a callable of the inputs)
    on the same ``inputs``, then time the correct ones with ``cap`` seconds each.
    Candidates with an IR ``.program`` are lowered with ``backend``; the callable that ran
    is ``result.kernel``.

    ``inputs`` is a sequence of tensors (passed positionally) or a dict by input name.
    With ``record``, each timing of a candidate that has an IR program is appended to the
    dataset (``dataset`` path, default the measurements file of the cache folder
    ``cache_dir``), tagged with ``labels``.
    """
    if callable(reference) and not isinstance(reference, torch.Tensor):
        ref_args = tuple(inputs.values()) if isinstance(inputs, dict) else tuple(inputs)
        with torch.no_grad():
            reference = reference(*ref_args)
    tol = rtol if rtol is not None else tolerance(reference.dtype)
    results = []
    for i, cand in enumerate(candidates):
        try:
            fn, args = _call_args(cand, inputs, backend, fused)
            with torch.no_grad():
                out = fn(*args)
        except Exception as e:  # a broken candidate is reported, not raised
            results.append(CandidateResult(i, cand, False, float("inf"),
                                           reason=f"raised {type(e).__name__}: {e}"))
            continue
        if not isinstance(out, torch.Tensor):
            results.append(CandidateResult(i, cand, False, float("inf"),
                                           reason=f"returned {type(out).__name__}"))
            continue
        err = max_relative_error(out, reference)
        if out.dtype != reference.dtype or not err <= tol:
            results.append(CandidateResult(
                i, cand, False, err,
                reason=f"dtype {out.dtype} != {reference.dtype}"
                if out.dtype != reference.dtype else f"mismatch: error {err:.2e} > {tol:.0e}"))
            continue
        with torch.no_grad():
            m = measure(fn, *args, warmup=warmup, repeat=repeat, time_cap_s=cap)
        results.append(CandidateResult(i, cand, True, err, m, kernel=fn))
        program = getattr(cand, "program", None)
        if record and program is not None:
            append_record(make_record(program, m, labels), dataset, cache_dir)
    return results


def best(results: Sequence[CandidateResult]) -> CandidateResult | None:
    """The fastest correct candidate (None if every one is wrong)."""
    ok = [r for r in results if r.ok and r.measurement is not None]
    return min(ok, key=lambda r: r.seconds) if ok else None


# -- the dataset -------------------------------------------------------------------------------
DATASET_CAP = 256 << 20  # bytes of a dataset read (uncompressed) at most


def dataset_path(path: str | os.PathLike | None = None,
                 cache_dir: str | os.PathLike | None = None) -> Path:
    """``path``, else the measurements file of the cache folder ``cache_dir`` (default: the
    running default, ``$OLLIE_CACHE_DIR`` or the per-user folder)."""
    return Path(path) if path is not None else cache_mod.Cache(cache_dir).measurements_path


def make_record(program, m: Measurement, labels: dict | None = None) -> dict:
    """One dataset line: the program's features and text with its measured time."""
    from ollie.cost import features
    from ir.printer import to_text
    return {"features": [round(float(x), 6) for x in features.program_features(program)],
            "feature_version": features.FEATURE_VERSION,
            "kinds": features.kinds(program), "program": to_text(program, declarations=True),
            "seconds": m.median, "min": m.min, "iqr": m.iqr, "runs": m.runs,
            "device": m.device, "versions": m.versions, **(labels or {})}


def append_record(record: dict, path: str | os.PathLike | None = None,
                  cache_dir: str | os.PathLike | None = None) -> bool:
    """Append one JSON line with a single ``write`` on an ``O_APPEND`` file, so lines from
    concurrent processes never interleave. Only into a trusted folder (created 0700) and
    only onto a regular file, never through a link; I/O errors are ignored (data is
    best-effort). True if the line was written."""
    p = dataset_path(path, cache_dir)
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    try:
        safe_files.make_private_dir(p.parent)
        if safe_files.untrusted_reason(p.parent):
            return False
        fd = os.open(p, os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_NONBLOCK", 0), 0o600)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > DATASET_CAP:
                return False
            if st.st_size and os.lseek(fd, st.st_size - 1, os.SEEK_SET) >= 0 \
                    and os.read(fd, 1) != b"\n":
                line = b"\n" + line  # a torn last line (a killed writer) stays on its own
            os.write(fd, line)
            return True
        finally:
            os.close(fd)
    except OSError:
        return False


def load_records(path: str | os.PathLike | None = None, device: str | None = None,
                 cache_dir: str | os.PathLike | None = None) -> list[dict]:
    """Every well-formed line of the dataset (``.gz``: compressed), optionally only those
    measured on ``device``. A link, a FIFO, a file (or its decompressed text) over
    ``DATASET_CAP`` or a line nested too deep reads as no records, never a hang or a crash."""
    out = []
    p = dataset_path(path, cache_dir)
    try:
        raw = safe_files.read_regular(p, DATASET_CAP)
    except OSError:
        return out
    if p.suffix == ".gz":
        raw = _gunzip(raw, DATASET_CAP)
    for line in raw.splitlines():
        try:
            r = safe_files.loads_bounded(line)
        except ValueError:
            continue  # a torn or corrupt line
        if (isinstance(r, dict) and isinstance(r.get("seconds"), (int, float))
                and not isinstance(r["seconds"], bool) and r["seconds"] > 0
                and (device is None or r.get("device") == device)):
            out.append(r)
    return out


def _gunzip(raw: bytes, cap: int) -> bytes:
    """Decompressed ``raw``, at most ``cap`` bytes; a truncated stream keeps what was read."""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        text = d.decompress(raw, cap)
    except zlib.error:
        return b""
    return text[: text.rfind(b"\n") + 1] if not d.eof else text


# -- comparing two callables, with the noise of the comparison ---------------------------------
@dataclass
class Comparison:
    """Eager against Ollie in interleaved rounds: median seconds of each, the ratio
    a decision uses (``speedup``: the median of the per-round ratios, eager's time over
    Ollie's) and its relative ``spread`` (half their inter-quartile range, over their
    median). Store both in the cache entry (``speedup``, ``spread``):
    ``ollie.cache_entry.within_noise`` reads them. The median, not the best times: a
    compiled program whose calls are fast only now and then (a DCGAN generator's, 5.5 ms at
    best, 8.5 ms typically, where eager takes 5.4 ms) is as fast as its typical call."""

    eager_median: float
    ollie_median: float
    speedup: float
    spread: float
    rounds: int

    def faster(self, margin: float) -> bool:
        """Ollie's time under ``margin`` times eager's, round by round (the adoption rule)."""
        return self.speedup * margin > 1

    def entry_fields(self) -> dict:
        return {"eager_s": self.eager_median, "ollie_s": self.ollie_median,
                "speedup": self.speedup, "spread": self.spread}


BLOCK_S = 5e-3  # a timed block of back-to-back calls lasts at least this long
# every round this far apart, one side ahead in each: no decision's threshold (all lie within
# 5 % of a tie, ``decision.ADOPTION_MARGIN``) is near, more rounds would not move it
SETTLED, SETTLED_ROUNDS = 1.10, 6


def compare(eager: Callable[[], Any], ollie: Callable[[], Any], budget_s: float = 0.5,
            min_rounds: int = 5, max_rounds: int = 100, clear: float = 2.0) -> Comparison:
    """Time ``eager`` and ``ollie`` in interleaved rounds (after one warm-up call each) for
    about ``budget_s`` seconds: they see the same background load, so each round's ratio is
    meaningful, and the spread of those ratios is the noise of the decision. A round times
    each in a block of back-to-back calls of at least ``BLOCK_S``, as a program calls them
    (alternating single calls would make each pay for what the other left behind: another
    runtime's spinning threads, evicted caches), first one side, then the other; the times
    are per call.

    ``min_rounds`` are timed while the budget lasts; timing stops sooner once the best times
    differ by more than ``clear`` times either way (after 3 rounds: no adoption threshold lies
    near such a ratio) or once the last ``SETTLED_ROUNDS`` rounds all lie beyond ``SETTLED`` on
    one side (one disturbed round delays that, it does not cancel it), and never before 2
    rounds, however slow the calls."""
    calls = []
    for fn in (eager, ollie):
        fn()
        t0 = time.perf_counter()
        fn()
        calls.append(max(1, min(1000, int(BLOCK_S / max(time.perf_counter() - t0, 1e-7)))))
    te: list[float] = []
    to: list[float] = []
    start = time.perf_counter()
    sides = [(eager, te, calls[0]), (ollie, to, calls[1])]
    while len(te) < max_rounds:
        sides.reverse()  # each side follows the other as often: no carried-over cost favours one
        for fn, ts, n in sides:
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            ts.append((time.perf_counter() - t0) / n)
        n, spent = len(te), time.perf_counter() - start
        decided = not 1 / clear < min(te) / min(to) < clear
        last = [a / max(b, 1e-12) for a, b in zip(te[-SETTLED_ROUNDS:], to[-SETTLED_ROUNDS:])]
        settled = n >= SETTLED_ROUNDS and (min(last) > SETTLED or max(last) < 1 / SETTLED)
        if (n >= 3 and decided) or settled or (n >= min_rounds and spent >= budget_s) or \
                (n >= 2 and spent >= 2 * budget_s):
            break
    ratios = sorted(a / max(b, 1e-12) for a, b in zip(te, to))
    if len(ratios) >= 4:
        q = statistics.quantiles(ratios, n=4)
        spread = (q[2] - q[0]) / 2 / statistics.median(ratios)
    else:
        spread = (ratios[-1] - ratios[0]) / 2 / statistics.median(ratios)
    return Comparison(statistics.median(te), statistics.median(to), statistics.median(ratios),
                      spread, len(te))
