"""Errors a user of the expression language can cause (bad text, invalid expressions).

Internal invariants stay asserts; these are for input the user wrote, so each message names
the thing that failed: the statement, the iterator, the source position, and, for a
misspelt name, the name that was probably meant (``did_you_mean``).
"""
from __future__ import annotations

import difflib
from typing import Iterable

EXCERPT = 72  # characters of a long source line shown around the error's column


class IRError(ValueError):
    """An invalid expression or program."""


class ParseError(IRError):
    """Malformed text. ``str()`` shows the line with a caret under the column (both 1-based);
    a long line is cut to ``EXCERPT`` characters around the column (``excerpt``)."""

    def __init__(self, message: str, line: int, column: int, source_line: str = ""):
        self.message, self.line, self.column, self.source_line = message, line, column, source_line
        text = f"line {line}, column {column}: {message}"
        if source_line:
            shown, caret = self.excerpt()
            text += f"\n  {shown}\n  {' ' * (caret - 1)}^"
        super().__init__(text)

    def excerpt(self, width: int = EXCERPT) -> tuple[str, int]:
        """(the source line, cut to ``width`` characters around the column with ``…`` where
        cut; the caret's 1-based column in it)."""
        line, col = self.source_line, self.column
        if len(line) <= width:
            return line, col
        start = max(0, min(col - 1 - width // 2, len(line) - width))
        shown = line[start:start + width]
        caret = col - start
        if start > 0:
            shown, caret = "…" + shown[1:], caret
        if start + width < len(line):
            shown = shown[:-1] + "…"
        return shown, caret


def did_you_mean(word: str, choices: Iterable[str], what: str = "") -> str:
    """`` — did you mean 'x'?`` for the closest of ``choices`` to ``word`` (else ``""``)."""
    close = difflib.get_close_matches(word, sorted(set(choices)), n=1, cutoff=0.6)
    return f" — did you mean {what}{close[0]!r}?" if close else ""
