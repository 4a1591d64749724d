"""Errors a user of the expression language can cause (bad text, invalid expressions).

Internal invariants stay asserts; these are for input the user wrote, so each message names
the thing that failed: the statement, the iterator, the source position.
"""
from __future__ import annotations


class IRError(ValueError):
    """An invalid expression or program."""


class ParseError(IRError):
    """Malformed text. ``str()`` shows the line with a caret under the column (both 1-based)."""

    def __init__(self, message: str, line: int, column: int, source_line: str = ""):
        self.message, self.line, self.column, self.source_line = message, line, column, source_line
        text = f"line {line}, column {column}: {message}"
        if source_line:
            text += f"\n  {source_line}\n  {' ' * (column - 1)}^"
        super().__init__(text)
