"""Text → expressions. One statement per line; the syntax reads like the math::

    A: f32[512, 1024]                       # declaration (shapes may also come from tensors=)
    T[k,l] = sum[j] B[k,j] * C[j,l]
    O[n,f,h,w] = sum[c,r,s] I[n,c,h+r-1,w+s-1] * K[f,c,r,s] where h in 0:7, w in 0:7

An earlier statement's name used as an access source refers to its Scope object, so programs
nest. Iterator ranges are inferred from the dimensions where an iterator is a bare index (as
Tensor Comprehensions does); ``where`` overrides. See docs/language.md.
"""
from __future__ import annotations

import math
from typing import Mapping

import sympy

from ir.errors import IRError, ParseError, did_you_mean
from ir.lexer import (
    BINARY_FUNCS, DTYPE_SHORT, DTYPES, INT64_MAX, NUMBER_WORDS, REDUCES, UNARY_FUNCS, Cursor, Token,
)
from ir.nodes import (
    Access, Binary, BinOp, Const, Expr, Iter, Reduce, Scope, Tensor, UnOp, Unary, accesses,
    children, iterator_symbol,
)

MAX_DEPTH = 256  # the expression tree's depth (operations, statements read): later code walks it


def _source_name(src) -> str:
    return getattr(src, "name", None) or "a scope"


def infer_ranges(body: Expr) -> dict[str, dict[tuple[int, int], str]]:
    """For each iterator, the ranges of the dimensions where it is a bare index (→ where seen).

    The printer uses the same function to decide which ``where`` clauses it must write.
    """
    found: dict[str, dict[tuple[int, int], str]] = {}
    for a in accesses(body):
        bounds = a.source.bounds()
        for d, (ix, rng) in enumerate(zip(a.indices, bounds)):
            if isinstance(ix, sympy.Symbol):
                found.setdefault(ix.name, {}).setdefault(rng, f"{_source_name(a.source)} dim {d}")
    return found


class _Line(Cursor):
    """Recursive-descent parser for one line of text."""

    def __init__(self, raw: str, lineno: int, names: dict[str, Tensor | Scope],
                 depths: dict[int, int] | None = None):
        super().__init__(raw, lineno)
        self.names = names
        self.iters: dict[str, Token] = {}
        self.depths = depths if depths is not None else {}  # id(statement) -> its depth
        self.body_start = -1

    # -- declarations and statements ------------------------------------------------------
    def declaration(self, name: Token) -> Tensor:
        self.expect(":", "':'")
        dtype = "float32"
        if self.peek().kind == "name":
            tok = self.next()
            if tok.text not in DTYPES and tok.text not in DTYPE_SHORT:
                raise self.error(f"unknown dtype {tok.text!r}"
                                 f"{did_you_mean(tok.text, list(DTYPES) + list(DTYPE_SHORT))}"
                                 f" (expected one of {', '.join(DTYPES)})", tok)
            dtype = DTYPES.get(tok.text, tok.text)
        self.expect("[", "'[' and the shape")
        shape = []
        while not self.at("]"):
            tok = self.peek()
            size = self.int_("a dimension size (a non-negative integer)")
            if size < 0:
                raise self.error("a dimension size cannot be negative", tok)
            shape.append(size)
            if not self.at("]"):
                self.expect(",", "',' or ']' after a dimension size")
        self.next()
        self.end("end of line after the declaration")
        if math.prod(shape) > INT64_MAX:
            raise self.error(f"{name.text!r} would have {math.prod(shape)} elements, more "
                             "than int64 can count", name)
        return Tensor(name.text, tuple(shape), dtype)

    def statement(self, name: Token) -> Scope:
        traversal = self.name_list("an iterator name")
        self.expect("=", "'=' after the left-hand side")
        reduce, summation = Reduce.SUM, []
        if self.peek().text in REDUCES and self.at("[", 1):
            reduce = REDUCES[self.next().text]
            summation = self.name_list("an iterator name")
        for tok in traversal + summation:
            if tok.text in self.iters:
                raise self.error(f"duplicate iterator {tok.text!r}", tok)
            self.iters[tok.text] = tok
        self.body_start = self.pos
        body = self.expr()
        depth = self.depth_of(body)
        if depth > MAX_DEPTH:
            raise self.error(f"{name.text!r} is {depth} operations deep, counting the "
                             f"statements it reads; at most {MAX_DEPTH} are accepted", name)
        where: dict[str, tuple[int, int]] = {}
        if self.at("where"):
            self.next()
            while True:
                tok = self.name("an iterator name")
                if tok.text not in self.iters:
                    raise self.error(f"unknown iterator {tok.text!r} in where"
                                     f"{did_you_mean(tok.text, self.iters)}", tok)
                if tok.text in where:
                    raise self.error(f"{tok.text!r} has two where clauses", tok)
                self.expect("in", "'in'")
                lo = self.int_("an integer lower bound")
                self.expect(":", "':' between the bounds")
                where[tok.text] = (lo, self.int_("an integer upper bound"))
                if not self.at(","):
                    break
                self.next()
        self.end("an operator, 'where' or end of line" if not where else "',' or end of line")
        ranges = self.ranges(body, where)
        its = tuple(Iter(t.text, *ranges[t.text]) for t in traversal)
        sums = tuple(Iter(t.text, *ranges[t.text]) for t in summation)
        scope = Scope(its, sums, body, reduce, name=name.text)
        self.depths[id(scope)] = depth + 1
        return scope

    def depth_of(self, body: Expr) -> int:
        """Depth of the tree ``body`` (statements it reads count their own depth), computed
        without recursion: the tree may be deeper than Python's stack."""
        memo: dict[int, int] = {}
        stack = [(body, False)]
        while stack:
            e, done = stack.pop()
            if id(e) in memo:
                continue
            if isinstance(e, Access):
                memo[id(e)] = 1 + self.depths.get(id(e.source), 0)
                continue
            kids = children(e)
            if done or not kids:
                memo[id(e)] = 1 + max((memo[id(k)] for k in kids), default=0)
                continue
            stack.append((e, True))
            stack.extend((k, False) for k in kids)
        return memo[id(body)]

    def ranges(self, body: Expr, where: dict[str, tuple[int, int]]):
        inferred = infer_ranges(body)
        out = {}
        for it, tok in self.iters.items():
            if it in where:
                lo, hi = out[it] = where[it]
                if hi < lo:
                    raise self.error(f"inverted range {lo}:{hi} for {it!r}", tok)
                continue
            seen = inferred.get(it, {})
            if not seen:
                raise self.error(f"cannot infer the range of {it!r}: it is never a bare index "
                                 f"— write `where {it} in lo:hi`", tok)
            if len(seen) > 1:
                cands = ", ".join(f"{lo}:{hi} from {d}" for (lo, hi), d in seen.items())
                raise self.error(f"ambiguous range for {it!r}: {cands} "
                                 f"— write `where {it} in lo:hi`", tok)
            out[it] = next(iter(seen))
        return out

    # -- body expressions -----------------------------------------------------------------
    def expr(self) -> Expr:
        self.enter()
        e = self.term()
        while self.at("+") or self.at("-"):
            op = BinOp.ADD if self.next().text == "+" else BinOp.SUB
            e = Binary(op, e, self.term())
        self.nesting -= 1
        return e

    def term(self) -> Expr:
        e = self.unary()
        while self.at("*") or self.at("/"):
            op = BinOp.MUL if self.next().text == "*" else BinOp.DIV
            e = Binary(op, e, self.unary())
        return e

    def unary(self) -> Expr:
        if self.at("-"):
            self.next()
            tok = self.peek()  # `-2` is the constant -2, `-(2)` the negation of 2
            if tok.kind == "num" or (tok.text in NUMBER_WORDS and not self._called(1)):
                return Const(-self.atom().value)
            self.enter()
            e = Unary(UnOp.NEG, self.unary())
            self.nesting -= 1
            return e
        return self.atom()

    def _called(self, k: int = 1) -> bool:
        return self.at("[", k) or self.at("(", k)

    def atom(self) -> Expr:
        tok = self.peek()
        if tok.kind == "num":
            self.next()
            return Const(float(tok.text))
        if tok.kind == "name":
            if tok.text in NUMBER_WORDS and not self._called():
                self.next()
                return Const(NUMBER_WORDS[tok.text])
            if self.at("(", 1) and tok.text in UNARY_FUNCS | BINARY_FUNCS:
                return self.call()
            if self.at("[", 1):
                return self.access()
            if tok.text in self.iters:
                raise self.error(f"iterator {tok.text!r} can only be used inside [...] indices")
            if tok.text in self.names:
                raise self.error(f"expected '[' after {tok.text!r}", self.peek(1))
            known = UNARY_FUNCS | BINARY_FUNCS if self.at("(", 1) else self.names
            raise self.error(f"unknown function, tensor or statement {tok.text!r}"
                             f"{did_you_mean(tok.text, known)}")
        if self.at("("):
            self.next()
            e = self.expr()
            self.expect(")", "')'")
            return e
        raise self.error("expected an expression (a number, an access like A[i], "
                         "a function call or '(')")

    def call(self) -> Expr:
        fn = self.next().text
        self.next()  # '('
        if fn in BINARY_FUNCS:
            a = self.expr()
            self.expect(",", f"',' between the two arguments of {fn}")
            b = self.expr()
            self.expect(")", f"')' after the arguments of {fn}")
            return Binary(BINARY_FUNCS[fn], a, b)
        x = self.expr()
        self.expect(")", f"')' after the argument of {fn}")
        return Unary(UNARY_FUNCS[fn], x)

    def access(self) -> Access:
        tok = self.next()
        src = self.names.get(tok.text)
        if src is None:
            if self.pos - 1 == self.body_start and did_you_mean(tok.text, REDUCES):
                raise self.error(f"unknown reduction {tok.text!r}"
                                 f"{did_you_mean(tok.text, REDUCES)}", tok)
            hint = did_you_mean(tok.text, self.names)
            raise self.error(f"unknown tensor or statement {tok.text!r}" + (hint or (
                f" (declare it like `{tok.text}: f32[...]` or pass its shape in tensors=)")),
                tok)
        self.next()  # '['
        indices = []
        while not self.at("]"):
            indices.append(self.index())
            if not self.at("]"):
                self.expect(",", "']' or ',' after index")
        self.next()
        if len(indices) != len(src.bounds()):
            raise self.error(f"{tok.text!r} has rank {len(src.bounds())} but is indexed "
                             f"with {len(indices)} indices", tok)
        return Access(src, tuple(indices))

    # -- index expressions: integer-affine, plus // and % by positive constants -------------
    def _index_start(self) -> bool:
        tok = self.peek()
        if tok.kind == "name":
            return not self._called(1)
        return tok.kind == "num" or self.at("(") or self.at("-")

    def index(self) -> sympy.Expr:
        if not self._index_start():
            raise self.error("expected an index (an iterator, an integer or '(')")
        e = self.iterm()
        while (self.at("+") or self.at("-")) and self._peek_index_start():
            sign = 1 if self.next().text == "+" else -1
            e = e + sign * self.iterm()
        return e

    def _peek_index_start(self) -> bool:
        self.pos += 1
        try:
            return self._index_start()
        finally:
            self.pos -= 1

    def iterm(self) -> sympy.Expr:
        e = self.iunary()
        while True:
            tok = self.peek()
            if self.at("*") and self._peek_index_start():
                self.next()
                rhs = self.iunary()
                if not (e.is_Integer or rhs.is_Integer):
                    raise self.error(f"non-affine index {e}*{rhs}: '*' needs an integer "
                                     "constant on one side", tok)
                e = e * rhs
            elif self.at("//") or self.at("%"):
                self.next()
                n = self.peek()
                if n.kind != "num" or not n.text.isdigit() or int(n.text) == 0:
                    raise self.error(f"expected a positive integer after '{tok.text}'", n)
                self.next()
                e = sympy.floor(e / int(n.text)) if tok.text == "//" else sympy.Mod(e, int(n.text))
            elif self.at("/"):
                raise self.error("'/' is not allowed in an index: use '//' for floor division")
            else:
                return e

    def iunary(self) -> sympy.Expr:
        if self.at("-"):
            self.next()
            self.enter()
            e = -self.iunary()
            self.nesting -= 1
            return e
        tok = self.peek()
        if tok.kind == "num":
            if not tok.text.isdigit():
                raise self.error(f"index constants must be integers, not {tok.text}")
            if int(tok.text) > INT64_MAX:
                raise self.error(f"{tok.text} does not fit in int64")
            self.next()
            return sympy.Integer(int(tok.text))
        if self.at("("):
            self.next()
            self.enter()
            e = self.index()
            self.nesting -= 1
            self.expect(")", "')'")
            return e
        if tok.kind == "name" and not self._called(1):
            if tok.text not in self.iters:
                raise self.error(f"unknown iterator {tok.text!r}"
                                 f"{did_you_mean(tok.text, self.iters)}")
            self.next()
            return iterator_symbol(tok.text)
        raise self.error("expected an index (an iterator, an integer or '(')")


def _as_tensor(name: str, t) -> Tensor:
    t = t if isinstance(t, Tensor) else Tensor(name, tuple(int(n) for n in t))
    if any(not 0 <= n <= INT64_MAX for n in t.shape) or math.prod(t.shape) > INT64_MAX:
        raise IRError(f"the shape of {name!r}, {list(t.shape)}, does not fit in int64")
    return t


def parse_all(text: str, tensors: Mapping[str, object] | None = None) -> dict[str, Scope]:
    """Every statement of ``text`` by name, in order (declarations are not included)."""
    given = {n: _as_tensor(n, t) for n, t in (tensors or {}).items()}
    names: dict[str, Tensor | Scope] = dict(given)
    declared: set[str] = set()
    statements: dict[str, Scope] = {}
    depths: dict[int, int] = {}
    last = None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = _Line(raw, lineno, names, depths)
        if line.peek().kind == "end":
            continue
        name = line.name("a tensor or statement name")
        if name.text in declared or name.text in statements:
            raise line.error(f"{name.text!r} is already defined", name)
        if line.at(":"):
            t = line.declaration(name)
            if name.text in given and given[name.text] != t:
                raise line.error(f"{name.text!r} is declared as {t.shape} {t.dtype} but "
                                 f"tensors= gives {given[name.text]}", name)
            names[name.text] = t
            declared.add(name.text)
            last = None
        else:
            if name.text in names:
                raise line.error(f"{name.text!r} is already defined (as an input tensor)", name)
            if not line.at("["):
                raise line.error(f"expected ':' (a declaration) or '[' (a statement) after "
                                 f"{name.text!r}")
            names[name.text] = statements[name.text] = last = line.statement(name)
    if last is None:
        n = max(len(text.splitlines()), 1)
        raise ParseError("expected a statement at the end of the program", n, 1,
                         (text.splitlines() or [""])[-1])
    return statements


def parse(text: str, tensors: Mapping[str, object] | None = None) -> Scope:
    """The last statement of ``text`` as a Scope (earlier statements nest inside it)."""
    return list(parse_all(text, tensors).values())[-1]
