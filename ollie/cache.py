"""A persistent on-disk cache of optimization results, safe to share between processes.

One entry per optimized expression, keyed by the canonical expression fingerprint, the input
shapes and dtypes, the device, and the versions of ollie, torch and triton. The value is JSON
(the chosen program as text with declarations, the rule chain, costs, measured times, the
decision). An entry on disk is an *envelope*::

    {"format": 1, "key": ..., "versions": {...}, "created": ..., "value": {...},
     "checksum": sha256(key, versions, value)}

written to a temporary file in the same folder, flushed and fsync'ed, then moved over the
entry with ``os.replace`` -- so a reader sees the old entry or the new one, never half of one.
``get`` never trusts what it reads: it opens only regular files, without following links and
up to a size cap, parses JSON of bounded nesting, and ignores (``None``, never raised) an entry
that does not parse, whose checksum or key does not match, that was written by other
versions, or whose value does not fit the schema (``ollie.cache_entry``). The folder itself
must be the user's and writable by no one else (``ollie.safe_files``); Ollie creates it 0700,
and refuses any other with one ``CacheWarning``, deriving without a disk cache.

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
import sys
import time
import warnings
from importlib import metadata
from pathlib import Path

from ollie import cache_entry, safe_files

FORMAT = 1
ENTRIES = "results"
MEASUREMENTS = "measurements.jsonl"
_HEX_KEY = re.compile(r"^[0-9a-f]{16,128}$")


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
    torch = sys.modules.get("torch")  # loaded: its own version; else the installed one's,
    torch_version = getattr(torch, "__version__", None) or _package_version("torch")  # fast
    return {"ollie": ollie_version or _package_version("ollie"), "torch": torch_version,
            "triton": _package_version("triton"), "compiler": compiler_digest(),
            # the switch of the synthesized ruleset (derivations.rules.GENERATED_OPTION):
            # other rules, other decisions
            "generated_rules": os.environ.get("OLLIE_GENERATED_RULES", "default")}


@functools.lru_cache(maxsize=1)
def compiler_digest() -> str:
    """A digest of the rules, the lowerings and the graph pass (derivations/, codegen/ and
    ollie/capture/ sources: graph substitutions, folding, what is compared): a decision made
    by other rules, another code generator or another comparison is stale even when the
    version is not."""
    h = hashlib.sha256()
    root = Path(__file__).resolve().parents[1]
    for package in ("derivations", "codegen", "ollie/capture"):
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
class CacheWarning(UserWarning):
    """The disk cache was not used (an untrusted folder); Ollie derives without it."""


class CacheRefused(OSError):
    """A command that needs the cache folder (``ollie tune``) was given one it must not use."""


ENTRY_CAP = 4 << 20          # bytes an entry file may have (entries are a few KiB)
_warned: set[str] = set()    # folders already warned about, once per process
_swept: set[str] = set()     # folders whose dead writers' files were removed, once per process


class Cache:
    """``get(key) -> dict | None``, ``put(key, value)``, ``info()``, ``clear()``.

    ``versions`` overrides the running versions (tests use it to play an older install).
    A folder that another user owns, or that the group or others can write, is not used:
    ``get`` answers None and ``put`` False, after one ``CacheWarning`` per folder.
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

    # -- trust -----------------------------------------------------------------------------
    def refusal(self) -> str | None:
        """Why this cache's folders must not be used (None: they may)."""
        for folder in (self.dir, self.entries_dir):
            why = safe_files.untrusted_reason(folder)
            if why:
                return f"not using the cache folder {folder}: {why}"
        return None

    @property
    def usable(self) -> bool:
        """The folders are trusted; warns once per folder (``CacheWarning``) when not."""
        why = self.refusal()
        if why and str(self.dir) not in _warned:
            _warned.add(str(self.dir))
            warnings.warn(f"ollie: {why}; deriving without a disk cache", CacheWarning,
                          stacklevel=3)
        return why is None

    def ensure_dir(self, folder: Path | None = None) -> bool:
        """Create the cache folder (0700) and ``folder`` inside it; False when not usable."""
        try:
            safe_files.make_private_dir(self.dir)
            if safe_files.untrusted_reason(self.dir):  # nothing is created in such a folder
                return self.usable
            if folder is not None and folder != self.dir:
                safe_files.make_private_dir(folder)
        except OSError:
            return False
        return self.usable

    # -- reading ---------------------------------------------------------------------------
    def get(self, key: str) -> dict | None:
        """The value stored under ``key``, or ``None`` if absent, corrupt, stale, of the
        wrong shape, or if the folder is not trusted. Never blocks, never raises."""
        path = self.path(key)
        if not path.parent.exists() or not self.usable:
            return None
        self._sweep()
        envelope = self._read(path)
        if envelope is None or not self._valid(envelope, key):
            return None
        return envelope["value"]

    def _read(self, path: Path) -> dict | None:
        try:
            raw = safe_files.read_regular(path, ENTRY_CAP)
        except OSError:
            return None
        return _parse(raw)

    def _valid(self, env: dict, key: str | None = None) -> bool:
        try:
            return (env.get("format") == FORMAT
                    and isinstance(env.get("key"), str)
                    and (key is None or env.get("key") == key)
                    and env.get("versions") == self.versions
                    and cache_entry.valid(env.get("value"))
                    and env.get("checksum") == _checksum(env["key"], env["versions"],
                                                         env["value"]))
        except (KeyError, TypeError, ValueError, RecursionError):
            return False

    # -- writing ---------------------------------------------------------------------------
    def put(self, key: str, value) -> bool:
        """Store ``value`` under ``key`` atomically. False, never an exception, when the
        value does not fit the schema (``ollie.cache_entry``), the folder is not trusted, or
        the disk refused: the cache is an optimisation."""
        try:
            value = safe_files.loads_bounded(json.dumps(value, allow_nan=False))
        except (TypeError, ValueError, RecursionError):
            return False
        if not cache_entry.valid(value):
            return False
        envelope = {"format": FORMAT, "key": key, "versions": self.versions,
                    "created": time.time(), "value": value,
                    "checksum": _checksum(key, self.versions, value)}
        data = json.dumps(envelope, sort_keys=True).encode()
        target = self.path(key)
        try:
            if not self.ensure_dir(target.parent):
                return False
            self._sweep()
            atomic_write(target, data)
            return True
        except OSError:
            return False

    def _sweep(self) -> int:
        """Remove dead writers' temporary files (a killed process leaves its ``.tmp``), once
        per folder and process: the first read or write does it."""
        if str(self.dir) in _swept:
            return 0
        _swept.add(str(self.dir))
        return sum(safe_files.remove_orphans(d) for d in (self.entries_dir, self.dir))

    def update(self, key: str, **fields) -> bool:
        """Rewrite the entry under ``key`` with ``fields`` changed (False if it is gone)."""
        value = self.get(key)
        return value is not None and self.put(key, dict(value, **fields))

    def drop(self, key: str) -> int:
        """Remove the entry under ``key`` (1 if there was one)."""
        return _unlink(self.path(key)) if self.usable else 0

    def keys(self) -> list[str]:
        """The keys of the valid entries (``update`` them, ``get`` them)."""
        if not self.usable:
            return []
        out = []
        for f in self._scan()[0]:
            env = self._read(f)
            if env is not None and self._valid(env) and self.path(env["key"]) == f:
                out.append(env["key"])
        return out

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
        """Counts and sizes: valid entries, ignored (corrupt, stale, planted) ones, leftovers;
        ``refused``: why the folder is not used, if it is not."""
        refused = self.refusal()
        entries, tmps = self._scan()
        valid = invalid = size = 0
        for f in entries:
            try:
                size += os.lstat(f).st_size
            except OSError:
                continue
            env = self._read(f)
            if env is not None and self._valid(env) and self.path(env["key"]) == f:
                valid += 1
            else:
                invalid += 1
        try:
            raw = safe_files.read_regular(self.measurements_path, MEASUREMENTS_CAP)
            measured, size = raw.count(b"\n"), size + len(raw)
        except OSError:
            measured = 0
        return {"dir": str(self.dir), "entries": valid, "ignored": invalid,
                "temporary": len(tmps), "bytes": size, "measurements": measured,
                "versions": self.versions, "refused": refused}

    def prune(self) -> int:
        """Remove entries that would be ignored and dead writers' temporary files."""
        if self.refusal():
            return 0
        removed = 0
        for f in self._scan()[0]:
            env = self._read(f)
            if env is None or not self._valid(env) or self.path(env["key"]) != f:
                removed += _unlink(f)
        return removed + sum(safe_files.remove_orphans(d) for d in (self.entries_dir, self.dir))

    def clear(self, measurements: bool = False) -> int:
        """Remove every entry (and, if asked, the measurement dataset); the count removed."""
        entries, tmps = self._scan()
        removed = sum(_unlink(f) for f in entries + tmps)
        if measurements:
            removed += _unlink(self.measurements_path)
        return removed


MEASUREMENTS_CAP = 256 << 20  # bytes of measurements.jsonl read at most


def atomic_write(target: Path, data: bytes, mode: int = 0o600) -> None:
    """Write ``data`` to ``target`` so readers see all of it or none: temp file, fsync, replace."""
    safe_files.atomic_write(target, data, mode)


def _parse(raw: bytes) -> dict | None:
    try:
        env = safe_files.loads_bounded(raw)
    except ValueError:
        return None
    return env if isinstance(env, dict) else None


def _unlink(path: Path) -> int:
    return safe_files.unlink(path)


# -- for the CLI: ``ollie cache info | clear`` -------------------------------------------------
def cache_info_command(cache_dir=None) -> str:
    info = Cache(cache_dir).info()
    lines = [f"ollie cache: {info['dir']}"]
    if info["refused"]:
        lines.append(f"  refused:      {info['refused'].split(': ', 1)[-1]} (Ollie derives "
                     "without it)")
    lines += [
             f"  entries:      {info['entries']}",
             f"  ignored:      {info['ignored']} (corrupt, planted or from other versions)",
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
