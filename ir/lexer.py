"""The language's words and a cursor over one line's tokens (for :mod:`ir.parser`).

The vocabulary (reduction names, function names, reserved words, dtypes) is shared with
:mod:`ir.printer`, which must write only what the parser reads back.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ir.nodes import BinOp, Reduce, UnOp
from ir.errors import ParseError

REDUCES = {r.value: r for r in Reduce}
UNARY_FUNCS = {op.value: op for op in UnOp if op is not UnOp.NEG}
BINARY_FUNCS = {op.value: op for op in BinOp if op.value.isidentifier()}  # max(a, b), ...
NUMBER_WORDS = {"inf": float("inf"), "nan": float("nan")}
# Words with a meaning of their own; they cannot name tensors, statements or iterators.
RESERVED = frozenset(REDUCES) | {"where", "in"} | frozenset(NUMBER_WORDS)
DTYPES = {"f32": "float32", "f64": "float64", "f16": "float16", "bf16": "bfloat16",
          "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64", "u8": "uint8",
          "bool": "bool"}
DTYPE_SHORT = {full: short for short, full in DTYPES.items()}

# Limits that keep a hostile or mistaken input to one clear error: nesting the parser recurses
# through (as Python's own parser, 200) and sizes that fit int64 (the parser also bounds the
# expression tree's depth).
MAX_NESTING = 200
INT64_MAX = (1 << 63) - 1

_TOKEN = re.compile(r"\s*(?:(?P<num>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)"
                    r"|(?P<name>[A-Za-z_]\w*)|(?P<op>//|[-+*/%()\[\],:=]))")


@dataclass(frozen=True)
class Token:
    kind: str  # "num", "name", "op" or "end"
    text: str
    column: int  # 1-based


def tokenize(code: str, lineno: int, raw: str) -> list[Token]:
    """``code`` (one line, its comment cut off) as tokens, closed by an ``end`` token; errors
    quote ``raw``, the whole line."""
    tokens, pos, code = [], 0, code.rstrip()
    while pos < len(code):
        m = _TOKEN.match(code, pos)
        if not m:
            col = len(code) - len(code[pos:].lstrip()) + 1
            raise ParseError(f"unexpected character {code[col - 1]!r}", lineno, col, raw)
        kind = m.lastgroup
        tokens.append(Token(kind, m.group(kind), m.start(kind) + 1))
        pos = m.end()
    tokens.append(Token("end", "", len(code) + 1))
    return tokens


class Cursor:
    """The tokens of one line and a position in them, with the checks every rule uses; a
    mistake becomes one ``ParseError`` pointing at its column."""

    def __init__(self, raw: str, lineno: int):
        self.raw, self.lineno = raw, lineno
        self.toks = tokenize(raw.split("#", 1)[0], lineno, raw)
        self.pos = 0
        self.nesting = 0

    def enter(self):
        """One level deeper into the recursive descent: past ``MAX_NESTING``, one error."""
        self.nesting += 1
        if self.nesting > MAX_NESTING:
            raise self.error(f"the expression is nested more than {MAX_NESTING} levels deep "
                             "(parentheses, calls, signs)")

    # -- token helpers ---------------------------------------------------------------------
    def peek(self, k: int = 0) -> Token:
        return self.toks[min(self.pos + k, len(self.toks) - 1)]

    def next(self) -> Token:
        tok = self.peek()
        self.pos += tok.kind != "end"
        return tok

    def at(self, text: str, k: int = 0) -> bool:
        tok = self.peek(k)
        return tok.kind in ("op", "name") and tok.text == text

    def error(self, msg: str, tok: Token | None = None) -> ParseError:
        tok = tok or self.peek()
        return ParseError(msg, self.lineno, tok.column, self.raw)

    def expect(self, text: str, what: str) -> Token:
        if not self.at(text):
            raise self.error(f"expected {what}")
        return self.next()

    def name(self, what: str) -> Token:
        tok = self.peek()
        if tok.kind != "name":
            raise self.error(f"expected {what}")
        if tok.text in RESERVED:
            raise self.error(f"{tok.text!r} is a reserved word and cannot be {what}")
        return self.next()

    def int_(self, what: str) -> int:
        neg = self.at("-")
        if neg:
            self.next()
        tok = self.peek()
        if tok.kind != "num" or not tok.text.isdigit():
            raise self.error(f"expected {what}")
        if int(tok.text) > INT64_MAX:
            raise self.error(f"{tok.text} does not fit in int64", tok)
        self.next()
        return -int(tok.text) if neg else int(tok.text)

    def name_list(self, what: str) -> list[Token]:
        self.expect("[", "'['")
        out = []
        while not self.at("]"):
            out.append(self.name(what))
            if not self.at("]"):
                self.expect(",", f"',' or ']' after {what}")
        self.next()
        return out

    def end(self, what: str):
        if self.peek().kind != "end":
            raise self.error(f"expected {what}")
