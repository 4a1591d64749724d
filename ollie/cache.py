"""A persistent on-disk cache of optimization results, safe to share between processes.

One entry per optimized expression, keyed by the canonical expression fingerprint, the input
shapes and dtypes, the device, and the versions of ollie, torch and triton. The value is JSON
(the chosen program as text with declarations, the rule chain, costs, measured times, the
decision). An entry on disk is an *envelope*::

    {"format": 1, "key": ..., "versions": {...}, "created": ..., "value": {...},
     "checksum": sha256(key, versions, value)}

written to a temporary file in the same folder, flushed and fsync'ed, then moved over the
entry with ``os.replace`` -- so a reader sees the old entry or the new one, never half of one.
``get`` never trusts what it reads: an entry that does not parse, whose checksum or key does
not match, or that was written by other versions is ignored (``None``), never raised.

The folder is, first found: the ``cache_dir`` argument, ``$OLLIE_CACHE_DIR``, the per-user
cache folder (``platformdirs``), ``~/.cache/ollie``. Measurements the cost model learns from
live beside the entries (``measurements.jsonl``, see ``ollie.cost.measure``).
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import tempfile
import time
from importlib import metadata
from pathlib import Path

FORMAT = 1
ENTRIES = "results"
MEASUREMENTS = "measurements.jsonl"
_HEX_KEY = re.compile(r"^[0-9a-f]{16,128}$")
_STALE_TMP_S = 3600.0  # a temporary file this old belongs to a writer that died


# -- where and which versions -----------------------------------------------------------------
def default_dir() -> Path:
    """``$OLLIE_CACHE_DIR``, else the per-user cache folder, else ``~/.cache/ollie``."""
    env = os.environ.get("OLLIE_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    try:
        import platformdirs
        return Path(platformdirs.user_cache_dir("ollie", appauthor=False))
    except Exception:  # platformdirs missing or unusable
        return Path.home() / ".cache" / "ollie"


def _package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def current_versions() -> dict[str, str | None]:
    """Versions that invalidate a cached result when they change."""
    try:
        import ollie
        ollie_version = getattr(ollie, "__version__", None)
    except Exception:
        ollie_version = None
    try:
        import torch
        torch_version = torch.__version__
    except Exception:
        torch_version = _package_version("torch")
    return {"ollie": ollie_version or _package_version("ollie"), "torch": torch_version,
            "triton": _package_version("triton"), "compiler": compiler_digest()}


@functools.lru_cache(maxsize=1)
def compiler_digest() -> str:
    """A digest of the rules and lowerings (derivations/, codegen/ sources): a decision made
    by other rules or another code generator is stale even when the version is not."""
    h = hashlib.sha256()
    root = Path(__file__).resolve().parents[1]
    for package in ("derivations", "codegen"):
        for path in sorted((root / package).rglob("*.py")):
            h.update(path.relative_to(root).as_posix().encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


# -- keys -----------------------------------------------------------------------------------
def fingerprint(expr) -> str:
    """Canonical fingerprint of an expression (``ir.fingerprint``), else a sha of its text."""
    if isinstance(expr, str):
        return expr
    import ir
    fp = getattr(ir, "fingerprint", None)
    if fp is not None:
        return str(fp(expr))
    from ir.printer import to_text
    return hashlib.sha256(to_text(expr, declarations=True).encode()).hexdigest()


def make_key(expr, shapes, dtypes, device: str, vers: dict | None = None) -> str:
    """The cache key (hex sha256) of ``expr`` (a Scope, or a fingerprint string) on inputs
    of ``shapes`` / ``dtypes`` on ``device``, under ``vers`` (default: the running versions)."""
    parts = {"expr": fingerprint(expr),
             "shapes": [list(map(int, s)) for s in shapes],
             "dtypes": [str(d) for d in dtypes],
             "device": str(device),
             "versions": vers if vers is not None else current_versions()}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def region_key(expr, tensors: dict, vers: dict | None = None) -> str:
    """The key of ``expr`` run on ``tensors`` (input name -> torch.Tensor): their shapes,
    dtypes (by input name) and device (``ollie.cost.measure.device_string``)."""
    from ollie.cost.measure import device_string
    names = sorted(tensors)
    device = next((t.device for t in tensors.values() if getattr(t, "is_cuda", False)), None)
    return make_key(expr, [tuple(tensors[n].shape) for n in names],
                    [f"{n}:{tensors[n].dtype}" for n in names], device_string(device), vers)


def _checksum(key: str, vers: dict, value) -> str:
    blob = json.dumps([key, vers, value], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


# -- the cache ------------------------------------------------------------------------------
class Cache:
    """``get(key) -> dict | None``, ``put(key, value)``, ``info()``, ``clear()``.

    ``versions`` overrides the running versions (tests use it to play an older install).
    """

    def __init__(self, cache_dir: str | os.PathLike | None = None,
                 versions: dict | None = None):
        self.dir = Path(cache_dir).expanduser() if cache_dir is not None else default_dir()
        self.versions = dict(versions) if versions is not None else current_versions()

    @property
    def entries_dir(self) -> Path:
        return self.dir / ENTRIES

    @property
    def measurements_path(self) -> Path:
        return self.dir / MEASUREMENTS

    def key(self, expr, shapes, dtypes, device: str) -> str:
        return make_key(expr, shapes, dtypes, device, self.versions)

    def path(self, key: str) -> Path:
        name = key if _HEX_KEY.match(key) else hashlib.sha256(key.encode()).hexdigest()
        return self.entries_dir / f"{name}.json"

    # -- reading ---------------------------------------------------------------------------
    def get(self, key: str) -> dict | None:
        """The value stored under ``key``, or ``None`` if absent, corrupt or stale."""
        try:
            raw = self.path(key).read_bytes()
        except OSError:
            return None
        envelope = _parse(raw)
        if envelope is None or not self._valid(envelope, key):
            return None
        return envelope["value"]

    def _valid(self, env: dict, key: str | None = None) -> bool:
        try:
            return (env.get("format") == FORMAT
                    and (key is None or env.get("key") == key)
                    and env.get("versions") == self.versions
                    and env.get("checksum") == _checksum(env["key"], env["versions"],
                                                         env["value"]))
        except (KeyError, TypeError, ValueError):
            return False

    # -- writing ---------------------------------------------------------------------------
    def put(self, key: str, value) -> bool:
        """Store ``value`` (JSON-serialisable) under ``key`` atomically; False if the disk
        refused (the cache is an optimisation: a failed write never raises)."""
        value = json.loads(json.dumps(value))  # the stored form: what get() will return
        envelope = {"format": FORMAT, "key": key, "versions": self.versions,
                    "created": time.time(), "value": value,
                    "checksum": _checksum(key, self.versions, value)}
        data = json.dumps(envelope, sort_keys=True).encode()
        target = self.path(key)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(target, data)
            return True
        except OSError:
            return False

    # -- maintenance -----------------------------------------------------------------------
    def _scan(self):
        """(entry files, temporary files) in the entries folder."""
        try:
            files = list(self.entries_dir.iterdir())
        except OSError:
            return [], []
        return ([f for f in files if f.suffix == ".json"],
                [f for f in files if f.name.endswith(".tmp")])

    def info(self) -> dict:
        """Counts and sizes: valid entries, ignored (corrupt or stale) ones, leftovers."""
        entries, tmps = self._scan()
        valid = invalid = size = 0
        for f in entries:
            try:
                raw = f.read_bytes()
            except OSError:
                continue
            size += len(raw)
            env = _parse(raw)
            if env is not None and self._valid(env, env.get("key")) and \
                    self.path(env["key"]) == f:
                valid += 1
            else:
                invalid += 1
        try:
            measured = sum(1 for _ in self.measurements_path.open("rb"))
            size += self.measurements_path.stat().st_size
        except OSError:
            measured = 0
        return {"dir": str(self.dir), "entries": valid, "ignored": invalid,
                "temporary": len(tmps), "bytes": size, "measurements": measured,
                "versions": self.versions}

    def prune(self) -> int:
        """Remove entries that would be ignored and dead writers' temporary files."""
        entries, tmps = self._scan()
        removed = 0
        for f in entries:
            try:
                env = _parse(f.read_bytes())
            except OSError:
                continue
            if env is None or not self._valid(env, env.get("key")):
                removed += _unlink(f)
        now = time.time()
        for f in tmps:
            try:
                if now - f.stat().st_mtime > _STALE_TMP_S:
                    removed += _unlink(f)
            except OSError:
                pass
        return removed

    def clear(self, measurements: bool = False) -> int:
        """Remove every entry (and, if asked, the measurement dataset); the count removed."""
        entries, tmps = self._scan()
        removed = sum(_unlink(f) for f in entries + tmps)
        if measurements:
            removed += _unlink(self.measurements_path)
        return removed


def atomic_write(target: Path, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to ``target`` so readers see all of it or none: temp file, fsync, replace."""
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.stem}.", suffix=".tmp")
    try:
        try:
            os.chmod(tmp, mode)  # mkstemp makes it 0600
        except OSError:
            pass
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        for attempt in range(5):  # Windows refuses to replace a file a reader holds open
            try:
                os.replace(tmp, target)
                break
            except PermissionError:
                if attempt == 4:
                    raise
                time.sleep(0.01 * (attempt + 1))
        _fsync_dir(target.parent)
    except BaseException:
        _unlink(Path(tmp))
        raise


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return  # not possible on every platform
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _parse(raw: bytes) -> dict | None:
    try:
        env = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return env if isinstance(env, dict) else None


def _unlink(path: Path) -> int:
    try:
        path.unlink()
        return 1
    except OSError:
        return 0


# -- for the CLI: ``ollie cache info | clear`` -------------------------------------------------
def cache_info_command(cache_dir=None) -> str:
    info = Cache(cache_dir).info()
    lines = [f"ollie cache: {info['dir']}",
             f"  entries:      {info['entries']}",
             f"  ignored:      {info['ignored']} (corrupt or from other versions)",
             f"  measurements: {info['measurements']}",
             f"  size:         {_human(info['bytes'])}"]
    if info["temporary"]:
        lines.append(f"  temporary:    {info['temporary']} (left by interrupted writers)")
    lines.append("  versions:     " + ", ".join(f"{k} {v}" for k, v in info["versions"].items()))
    return "\n".join(lines)


def cache_clear_command(cache_dir=None, measurements: bool = False) -> str:
    cache = Cache(cache_dir)
    n = cache.clear(measurements=measurements)
    what = "files" if measurements else "entries"
    return f"ollie cache: removed {n} {what} from {cache.dir}"


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
