"""One derivation per decision across processes that share a cache folder.

Ranks of a distributed job (or several processes started at once) compile the same graphs
at the same time. Around deriving a region, each takes an exclusive lock on that decision's
key; the second waits, then finds the first one's decision in the cache and derives
nothing. Locks are ``flock``s on files in the cache's ``locks`` folder: the kernel drops
them when their process dies, so a killed rank leaves no stale lock. A lock not had within
``WAIT_S`` is given up on, and the region is derived anyway (the cache's writes are atomic).
"""
from __future__ import annotations

import contextlib
import os
import time


WAIT_S = 120.0


@contextlib.contextmanager
def decision_lock(cache, key: str):
    """Hold the exclusive lock on ``key`` of ``cache`` (an ``ollie.cache.Cache``) within."""
    try:
        import fcntl
    except ImportError:  # no flock (Windows): derive without one
        yield
        return
    fd = None
    try:
        if cache.ensure_dir(cache.dir / "locks"):
            fd = os.open(cache.dir / "locks" / f"{cache.path(key).stem}.lock",
                         os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
            _acquire(fcntl, fd)
    except OSError:
        fd = _close(fd)
    try:
        yield
    finally:
        _close(fd)


def _acquire(fcntl, fd: int) -> None:
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise OSError("lock not had in time") from None
            time.sleep(0.05)


def _close(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)  # closing the file releases its flock
    return None
