"""Progress display for long first calls: deriving on the e-graph, measuring candidates.

Shown on stderr with rich, transient (it disappears when done), and by default only when
stderr is a terminal, so scripts, logs and tests stay quiet.
"""
from __future__ import annotations

import sys
from contextlib import contextmanager


def enabled(option) -> bool:
    """``progress=True/False``, or ``"auto"``: on when stderr is an interactive terminal."""
    if option == "auto":
        return sys.stderr.isatty()
    return bool(option)


class Progress:
    """``status(text)`` updates one line (rich on a terminal, plain lines elsewhere); a no-op
    when disabled."""

    def __init__(self, live, plain: bool = False):
        self._live, self._plain = live, plain

    def status(self, text: str) -> None:
        if self._live is not None:
            self._live.update(text)
        elif self._plain:
            print(text, file=sys.stderr, flush=True)

    def derivation(self, region: str):
        """A callback for ``derivations.derive(on_iteration=...)``."""
        def on_iteration(report, seconds: float) -> None:
            self.status(f"ollie: deriving {region}: iteration {report.iterations}, "
                        f"{report.nodes} e-nodes, {seconds:.1f} s")
        return on_iteration


@contextmanager
def progress(option="auto"):
    if not enabled(option):
        yield Progress(None)
        return
    if not sys.stderr.isatty():  # asked for explicitly, but no terminal to redraw a line on
        yield Progress(None, plain=True)
        return
    from rich.console import Console

    with Console(file=sys.stderr).status("ollie: compiling") as live:
        yield Progress(live)
