"""Argument parsing for the ``ollie`` command: one-line errors and checked numbers.

Kept free of torch, sympy and egglog so that ``ollie --help`` and every command's argument
parsing start at once; each command imports what it needs when it runs. A mistake on the
command line is one line on stderr and exit status 2, as every other user error:
``ollie demo: error: argument --repeat: must be an integer >= 1, got '0' (see ollie demo -h)``.
"""
from __future__ import annotations

import argparse
import math
import re
import sys

INT64_MAX = (1 << 63) - 1


class UsageError(Exception):
    """A mistake on the command line: printed as one message, exit status 2."""


class Parser(argparse.ArgumentParser):
    """``argparse`` with a one-line error (no usage block): the message and where to look."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} -h)\n")


def positive_int(text: str) -> int:
    """An integer >= 1 (argparse ``type=``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}") from None
    if not 1 <= value <= INT64_MAX:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0 (argparse ``type=``): NaN, infinities, 0 and negatives refused."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value


def shape(text: str) -> tuple[str, tuple[int, ...]]:
    """``"A=512,1024"`` (or ``A=512x1024``) → ``("A", (512, 1024))``; ``"s="`` is a scalar.
    Sizes must be >= 0 and the shape must fit int64 (as torch's)."""
    name, eq, dims = text.partition("=")
    name = name.strip()
    if not eq or not name.isidentifier():
        raise argparse.ArgumentTypeError(
            f"expected NAME=d0,d1,... (e.g. A=512,1024), got {text!r}")
    dims = dims.strip()
    try:
        sizes = tuple(int(d) for d in re.split(r"\s*[,x]\s*", dims)) if dims else ()
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"the dimensions of {name!r} must be integers, got {dims!r}") from None
    if any(d < 0 for d in sizes):
        raise argparse.ArgumentTypeError(f"the dimensions of {name!r} must be >= 0, got {dims!r}")
    if any(d > INT64_MAX for d in sizes) or math.prod(sizes) > INT64_MAX:
        raise argparse.ArgumentTypeError(
            f"the shape of {name!r} does not fit in int64 ({math.prod(sizes)} elements)")
    return name, sizes


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def say_error(command: str, e: BaseException) -> None:
    """``ollie CMD: error: ...`` on stderr: the message's own lines (a parse error's caret
    line), never a traceback."""
    print(f"ollie {command}: error: {e}", file=sys.stderr)
