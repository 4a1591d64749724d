"""Reading and writing Ollie's own files without trusting what lies in their folder.

The cache folder holds files other programs (or other users) could plant or damage: a FIFO
that blocks a reader forever, a link to ``/dev/zero`` that never ends, JSON nested deeper than
Python's recursion limit, a writer's temporary file left behind by ``kill -9``. Every read
here therefore

- opens without following a link (``O_NOFOLLOW``) and without blocking (``O_NONBLOCK``: a
  FIFO opens at once), then accepts only a *regular* file, and reads at most ``cap`` bytes;
- parses JSON only after an iterative scan has bounded its nesting (``MAX_DEPTH``).

A folder is used only if the user owns it and nobody else can write to it (``trusted``),
as ssh treats ``~/.ssh``: anyone who can write to the folder could change the decisions
Ollie reads back. Folders Ollie creates are ``0700``. Writes go to a temporary file named
after the writer's process, are fsync'ed and moved over the target (``atomic_write``), so a
reader sees all of a file or none of it, and ``remove_orphans`` can tell a dead writer's
leftovers from a live writer's file.
"""
from __future__ import annotations

import errno
import json
import os
import re
import stat
import tempfile
import time
from pathlib import Path

MAX_DEPTH = 32                # JSON nesting accepted (entries use 3)
ORPHAN_AGE_S = 600.0          # a temporary file this old is a dead writer's, whoever wrote it
_TMP = re.compile(r"^\..*\.(\d+)\.[^.]*\.tmp$")  # .<stem>.<pid>.<random>.tmp
_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))


class UnsafeFile(OSError):
    """A file that is not a regular file of acceptable size (or could not be opened so)."""


# -- reading -----------------------------------------------------------------------------------
def read_regular(path: str | os.PathLike, cap: int) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``cap`` bytes, not a link.

    Raises ``UnsafeFile`` (an ``OSError``) for a link, FIFO, device, folder or a file over
    ``cap``, and ``OSError`` when it cannot be opened; never blocks, never reads past ``cap``.
    """
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) \
        | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    if not hasattr(os, "O_NOFOLLOW") and os.path.islink(path):
        raise UnsafeFile(f"{path}: a link")
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UnsafeFile(f"{path}: a link") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFile(f"{path}: not a regular file")
        if st.st_size > cap:
            raise UnsafeFile(f"{path}: {st.st_size} bytes, more than {cap}")
        chunks, left = [], cap + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > cap:  # it grew while being read
            raise UnsafeFile(f"{path}: more than {cap} bytes")
        return data
    finally:
        os.close(fd)


def json_depth(raw: bytes, limit: int = MAX_DEPTH) -> int:
    """The bracket nesting depth of JSON text ``raw``, counted without recursion; stops
    counting (and returns a value > ``limit``) as soon as ``limit`` is passed."""
    brackets = _STRINGS.sub(b'""', raw).translate(None, _NOT_BRACKETS)
    depth = deepest = 0
    for ch in brackets:
        if ch in b"[{":
            depth += 1
            if depth > limit:
                return depth
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def loads_bounded(raw: bytes | str, limit: int = MAX_DEPTH):
    """``json.loads`` of ``raw`` if its nesting is at most ``limit``; ``ValueError`` otherwise
    (also for bytes that are not UTF-8, and numbers such as ``1e999`` or ``NaN``)."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")
    if json_depth(raw, limit) > limit:
        raise ValueError(f"JSON nested deeper than {limit} levels")
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, RecursionError) as e:
        raise ValueError(str(e)) from None


def _no_constant(name: str):
    raise ValueError(f"JSON constant {name} is not accepted")


# -- folders -----------------------------------------------------------------------------------
def untrusted_reason(folder: str | os.PathLike) -> str | None:
    """Why ``folder`` must not be used (None: it is fine): not a folder, owned by another
    user, or writable by the group or others. Links to a folder are followed (a cache on
    another disk is common); the folder they lead to is what is checked."""
    try:
        st = os.stat(folder)
    except FileNotFoundError:
        return None  # it will be created 0700
    except OSError as e:
        return f"it cannot be read ({e.strerror})"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a folder"
    if not hasattr(os, "getuid"):  # Windows: folder ACLs are not modes; trust the profile
        return None
    if st.st_uid != os.getuid():
        return f"it is owned by another user (uid {st.st_uid})"
    writers = [who for who, bit in (("its group", stat.S_IWGRP), ("others", stat.S_IWOTH))
               if st.st_mode & bit]
    if writers:
        return (f"it is writable by {' and '.join(writers)} (mode "
                f"{stat.S_IMODE(st.st_mode):04o}; `chmod go-w {folder}` to use it)")
    return None


def make_private_dir(folder: str | os.PathLike) -> Path:
    """Create ``folder`` (and missing parents) with mode 0700 for the folder itself."""
    folder = Path(folder)
    if not folder.is_dir():
        folder.parent.mkdir(parents=True, exist_ok=True)
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            pass
    return folder


# -- writing -----------------------------------------------------------------------------------
def atomic_write(target: str | os.PathLike, data: bytes, mode: int = 0o600) -> None:
    """Write ``data`` to ``target`` so readers see all of it or none: a temporary file named
    after this process in the same folder, fsync, then ``os.replace``."""
    target = Path(target)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.stem}.{os.getpid()}.",
                               suffix=".tmp")
    try:
        try:
            os.chmod(tmp, mode)
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
        fsync_dir(target.parent)
    except BaseException:
        unlink(Path(tmp))
        raise


def fsync_dir(path: Path) -> None:
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


def is_orphan(path: Path, now: float | None = None) -> bool:
    """A temporary file whose writer is gone: its process id (in the name) is not running
    here, or it is older than ``ORPHAN_AGE_S`` (a writer takes milliseconds)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if (now if now is not None else time.time()) - st.st_mtime > ORPHAN_AGE_S:
        return True
    m = _TMP.match(path.name)
    return m is not None and not pid_alive(int(m.group(1)))


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # exists, another user's (or the platform cannot tell)
    return True


def remove_orphans(folder: Path) -> int:
    """Delete dead writers' temporary files (``*.tmp``) in ``folder``; the count removed."""
    try:
        names = os.listdir(folder)
    except OSError:
        return 0
    now = time.time()
    return sum(unlink(folder / n) for n in names
               if n.endswith(".tmp") and is_orphan(folder / n, now))


def unlink(path: Path) -> int:
    try:
        os.unlink(path)
        return 1
    except OSError:
        return 0
