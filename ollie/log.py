"""Ollie's log: the ``ollie`` logger, known to ``torch._logging``.

One line per graph and per region says what Ollie decided and why. It is off by default,
like torch's own logs; turn it on the way torch's logs are turned on:

    TORCH_LOGS="+ollie" python train.py          # DEBUG: every region's decision too
    TORCH_LOGS="ollie" python train.py           # INFO: one line per graph
    torch._logging.set_logs(modules={"ollie": logging.INFO})

``verbose=True`` (an option of ``ollie.optimize`` and the backend) prints the same lines.
"""
from __future__ import annotations

import logging

log = logging.getLogger("ollie")


def register() -> None:
    """Make ``ollie`` a log name of ``torch._logging``. ``TORCH_LOGS`` needs no more: torch
    parses it on import and finds the installed package ``ollie`` by its name."""
    from torch._logging import _internal

    _internal.register_log("ollie", "ollie")


def first_line(e: BaseException) -> str:
    """An exception's message in one line (its type when it has none)."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
