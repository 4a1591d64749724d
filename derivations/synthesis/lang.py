"""The language rules are synthesized in: small point-free tensor terms, and their ``ir`` meaning.

A term is a tuple: ``("var", "A")``, ``("const", 2)``, ``(op, child)`` or ``(op, lhs, rhs)``.
Operands are square tensors with every dimension of one extent ``n``: ``a b c`` (scalars),
``x y`` (vectors), ``A B`` (matrices). The operators, as in TASO's operator set:

    + - *          elementwise; a scalar operand broadcasts          a + b, A * 2
    neg exp log    elementwise                                        exp(x)
    T              transpose (permute)                                T(A)[i,j] = A[j,i]
    diag           diagonal access                                    diag(A)[i] = A[i,i]
    bcast          broadcast a vector along rows                      bcast(x)[i,j] = x[j]
    sum            sum over the last axis                             sum(A)[i] = sum_j A[i,j]

:func:`to_ir` gives a term's meaning as an ``ir`` scope: index maps (T, diag, bcast) become
the indices of reads, a ``sum`` a nested scope with one summation iterator (the root's own
when the term is a sum), so ``ir.canonical`` identifies terms that differ by index
bookkeeping only (``T(T(A))`` and ``A``; ``sum(T(A))`` and a column sum written otherwise).
Constants are written as numbers; ``scale`` in an operator list means "constants allowed"
(scalar multiplication ``2 * A``).
"""
from __future__ import annotations

import itertools
import re
from functools import lru_cache

from ir.nodes import Access, Binary, BinOp, Const, Iter, Scope, Tensor, UnOp, Unary

__all__ = ["VARS", "ENUMERATED", "SCALARS", "Rule", "rule_text", "parse_rule", "canonical_rule",
           "rename", "OPS", "POINTWISE", "rank", "size", "variables", "to_text", "parse",
           "to_ir", "ops_of", "is_pointwise", "sums", "ParseError"]

VARS = {"a": 0, "b": 0, "c": 0, "x": 1, "y": 1, "A": 2, "B": 2}  # operand -> rank
ENUMERATED = ("a", "b", "x", "y", "A", "B")   # the operands enumeration uses
SCALARS = ("a", "b", "c")
CONSTANTS = (0, 1, 2)
BINARY = {"add": ("+", BinOp.ADD), "sub": ("-", BinOp.SUB), "mul": ("*", BinOp.MUL)}
UNARY_POINTWISE = {"neg": UnOp.NEG, "exp": UnOp.EXP, "log": UnOp.LOG}
INDEX_OPS = ("T", "diag", "bcast")
# operator-set names (the command line's --ops) -> term ops they enable
OPS = {"add": ("add",), "sub": ("sub",), "mul": ("mul",), "neg": ("neg",), "exp": ("exp",),
       "log": ("log",), "sum": ("sum",), "transpose": ("T",), "diag": ("diag",),
       "broadcast": ("bcast",), "scale": ("const",)}
POINTWISE = frozenset({"var", "const", "add", "sub", "mul", "neg", "exp", "log"})


class ParseError(ValueError):
    """A rule or term that does not parse (the message names the text)."""


@lru_cache(maxsize=None)
def rank(t: tuple) -> int | None:
    """The term's rank, or None if it is ill-typed."""
    op = t[0]
    if op == "var":
        return VARS[t[1]]
    if op == "const":
        return 0
    if op in BINARY:
        ra, rb = rank(t[1]), rank(t[2])
        if ra is None or rb is None or (ra != rb and ra and rb):
            return None
        return max(ra, rb)
    r = rank(t[1])
    if r is None:
        return None
    if op in UNARY_POINTWISE:
        return r
    return {"T": 2 if r == 2 else None, "diag": 1 if r == 2 else None,
            "bcast": 2 if r == 1 else None, "sum": r - 1 if r >= 1 else None}[op]


@lru_cache(maxsize=None)
def size(t: tuple) -> int:
    return 1 if t[0] in ("var", "const") else 1 + sum(size(c) for c in t[1:])


@lru_cache(maxsize=None)
def variables(t: tuple) -> frozenset[str]:
    if t[0] == "var":
        return frozenset({t[1]})
    if t[0] == "const":
        return frozenset()
    return frozenset().union(*(variables(c) for c in t[1:]))


@lru_cache(maxsize=None)
def ops_of(t: tuple) -> frozenset[str]:
    if t[0] in ("var", "const"):
        return frozenset({t[0]})
    return frozenset({t[0]}).union(*(ops_of(c) for c in t[1:]))


def is_pointwise(t: tuple) -> bool:
    """Elementwise arithmetic only: a scalar identity, valid for operands of any rank."""
    return ops_of(t) <= POINTWISE


@lru_cache(maxsize=None)
def sums(t: tuple) -> int:
    """Summation iterators the term binds (its ``sum`` nodes)."""
    own = 1 if t[0] == "sum" else 0
    return own + (0 if t[0] in ("var", "const") else sum(sums(c) for c in t[1:]))


# -- text ----------------------------------------------------------------------------------------
_PREC = {"add": 1, "sub": 1, "mul": 2}


def to_text(t: tuple, prec: int = 0) -> str:
    op = t[0]
    if op == "var":
        return t[1]
    if op == "const":
        return str(t[1])
    if op in BINARY:  # left-associative; a right operand of equal precedence keeps its ()
        p = _PREC[op]
        text = f"{to_text(t[1], p)} {BINARY[op][0]} {to_text(t[2], p + 1)}"
        return f"({text})" if p < prec else text
    if op == "neg":
        inner = to_text(t[1], 3)
        return f"-{inner}"
    return f"{op}({to_text(t[1])})"


_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_]\w*)|(\S))")


def parse(text: str) -> tuple:
    """The term written as ``to_text`` writes it (``exp(a + b) * T(A)``)."""
    tokens = [(m.group(1), m.group(2), m.group(3)) for m in _TOKEN.finditer(text)
              if any(m.groups())]
    pos = 0

    def peek():
        return tokens[pos] if pos < len(tokens) else (None, None, None)

    def take(sym=None):
        nonlocal pos
        tok = peek()
        if sym is not None and tok[2] != sym:
            raise ParseError(f"expected {sym!r} at token {pos} in {text!r}")
        pos += 1
        return tok

    def expr(level=1):
        left = unary()
        while True:
            sym = peek()[2]
            op = {"+": "add", "-": "sub", "*": "mul"}.get(sym)
            if op is None or _PREC[op] < level:
                return left
            take()
            right = expr(_PREC[op] + 1)
            left = (op, left, right)

    def unary():
        number, name, sym = peek()
        if sym == "-":
            take()
            return ("neg", unary())
        if sym == "(":
            take()
            inner = expr()
            take(")")
            return inner
        if number is not None:
            take()
            return ("const", int(number))
        if name in VARS:
            take()
            return ("var", name)
        if name in UNARY_POINTWISE or name in INDEX_OPS or name == "sum":
            take()
            take("(")
            inner = expr()
            take(")")
            return (name, inner)
        raise ParseError(f"unexpected {number or name or sym!r} in {text!r}")

    out = expr()
    if pos != len(tokens):
        raise ParseError(f"unexpected text after position {pos} in {text!r}")
    if rank(out) is None:
        raise ParseError(f"ill-typed term {text!r} (ranks: {VARS})")
    return out


# -- meaning -------------------------------------------------------------------------------------
def to_ir(t: tuple, n: int) -> Scope:
    """The ``ir`` scope of term ``t`` with every operand dimension of extent ``n``."""
    r = rank(t)
    assert r is not None, f"ill-typed term {to_text(t)}"
    counter = itertools.count()

    def fresh() -> Iter:
        return Iter(f"k{next(counter)}", 0, n)

    def body(t: tuple, idx: tuple):
        op = t[0]
        if op == "var":
            return Access(Tensor(t[1], (n,) * VARS[t[1]]), idx)
        if op == "const":
            return Const(float(t[1]))
        if op in BINARY:
            lhs = body(t[1], idx if rank(t[1]) else ())
            return Binary(BINARY[op][1], lhs, body(t[2], idx if rank(t[2]) else ()))
        if op in UNARY_POINTWISE:
            return Unary(UNARY_POINTWISE[op], body(t[1], idx))
        if op == "T":
            return body(t[1], (idx[1], idx[0]))
        if op == "diag":
            return body(t[1], (idx[0], idx[0]))
        if op == "bcast":
            return body(t[1], (idx[1],))
        assert op == "sum", op
        outs = tuple(fresh() for _ in range(rank(t[1]) - 1))
        k = fresh()
        inner = Scope(outs, (k,), body(t[1], tuple(o.symbol for o in outs) + (k.symbol,)))
        return Access(inner, idx)

    its = tuple(Iter(name, 0, n) for name in "ij"[:r])
    syms = tuple(it.symbol for it in its)
    if t[0] == "sum":
        k = fresh()
        return Scope(its, (k,), body(t[1], syms + (k.symbol,)))
    return Scope(its, (), body(t, syms))


# -- rules ---------------------------------------------------------------------------------------
class Rule(tuple):
    """``lhs = rhs`` (an equality, used in both directions), valid where the operands named
    in ``positive`` are > 0 (empty: everywhere)."""

    __slots__ = ()

    def __new__(cls, lhs: tuple, rhs: tuple, positive: tuple[str, ...] = ()):
        return super().__new__(cls, (lhs, rhs, tuple(sorted(positive))))

    def __getnewargs__(self):
        return tuple(self)

    lhs = property(lambda self: self[0])
    rhs = property(lambda self: self[1])
    positive = property(lambda self: self[2])

    def __repr__(self) -> str:
        return f"Rule({rule_text(self)!r})"


def rule_text(r: Rule) -> str:
    cond = f"  if {', '.join(n + ' > 0' for n in r.positive)}" if r.positive else ""
    return f"{to_text(r.lhs)} = {to_text(r.rhs)}{cond}"


def parse_rule(text: str) -> Rule:
    """``lhs = rhs`` or ``lhs = rhs  if a > 0, b > 0``."""
    body, _, cond = text.partition(" if ")
    lhs, eq, rhs = body.partition("=")
    if not eq:
        raise ParseError(f"a rule needs '=': {text!r}")
    positive = []
    for part in filter(None, (p.strip() for p in cond.split(","))):
        m = re.fullmatch(r"(\w+)\s*>\s*0", part)
        if not m or m.group(1) not in VARS:
            raise ParseError(f"side conditions are 'operand > 0', got {part!r} in {text!r}")
        positive.append(m.group(1))
    out = Rule(parse(lhs), parse(rhs), tuple(positive))
    if rank(out.lhs) != rank(out.rhs):
        raise ParseError(f"the sides of {text!r} have different ranks")
    return out


def rename(t: tuple, mapping: dict[str, str]) -> tuple:
    """``t`` with operands renamed."""
    if t[0] == "var":
        return ("var", mapping.get(t[1], t[1]))
    if t[0] == "const":
        return t
    return (t[0],) + tuple(rename(c, mapping) for c in t[1:])


def first_vars(t: tuple, out: list[str]) -> list[str]:
    """Operands in order of first occurrence (appended to ``out``)."""
    if t[0] == "var":
        if t[1] not in out:
            out.append(t[1])
    elif t[0] != "const":
        for c in t[1:]:
            first_vars(c, out)
    return out


def canonical_rule(r: Rule) -> Rule:
    """One representative per rule up to renaming operands and swapping sides. Operands of
    a pointwise rule become the scalars ``a b c`` (a pointwise identity holds at every
    rank); others are renamed within their rank, by first occurrence. The larger side goes
    left. A rule with more operands than names is returned as it is."""
    pointwise = is_pointwise(r.lhs) and is_pointwise(r.rhs)
    best = None
    for lhs, rhs in ((r.lhs, r.rhs), (r.rhs, r.lhs)):
        mapping: dict[str, str] = {}
        counts: dict[int, int] = {}
        for v in first_vars(rhs, first_vars(lhs, [])):
            group = -1 if pointwise else VARS[v]
            pool = SCALARS if pointwise else tuple(n for n, k in VARS.items() if k == VARS[v])
            k = counts.get(group, 0)
            if k >= len(pool):
                return r
            mapping[v], counts[group] = pool[k], k + 1
        cand = Rule(rename(lhs, mapping), rename(rhs, mapping),
                    tuple(mapping[p] for p in r.positive))
        key = (-size(cand.lhs), size(cand.rhs), to_text(cand.lhs), to_text(cand.rhs))
        if best is None or key < best[0]:
            best = (key, cand)
    return best[1]
