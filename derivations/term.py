"""``Term``: a plain-Python tree in the shape of the egglog language, and its egglog form.

Terms sit between the IR and egglog: :mod:`derivations.encode` turns ``ir`` scopes into
terms and back, :func:`to_egglog` turns a term into an egglog expression, and extraction
builds terms from the serialized e-graph. A term's ``args`` hold Python values where the
egglog constructor holds primitives (``str``, ``float``, ``frozenset`` for a ``Set``,
``tuple`` for a ``Vec`` or a ``MultiSet``) and terms where it holds e-classes. A ``MultiSet``
is stored sorted by child key, so equal multisets give equal terms.
"""
from __future__ import annotations

import hashlib

from egglog import MultiSet, String, Vec

from derivations.lang import EBody, EScope, ESource, names

SCOPE_OPS = ("sum", "reduce")
# positions of sub-term children in each op's args (a tuple position holds several)
_KIDS = {"sum": (2,), "reduce": (3,), "tensor": (), "scope": (0,), "acc": (0,), "use": (0,),
         "const": (), "bin": (1, 2), "un": (1,)}


class Term:
    """An immutable tree node; equality and hashing go through a cached content digest."""

    __slots__ = ("op", "args", "key", "_hash")

    def __init__(self, op: str, args: tuple):
        if op == "sum":
            out, sums, factors = args
            args = (frozenset(out), frozenset(sums), tuple(sorted(factors, key=_key)))
        self.op, self.args = op, args
        self.key = _digest(op, args)
        self._hash = hash(self.key)

    def __eq__(self, other) -> bool:
        return isinstance(other, Term) and self.key == other.key

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"{self.op}{self.args!r}"

    def kids(self) -> tuple["Term", ...]:
        """Direct sub-terms, in argument order (a multiset contributes each element)."""
        out: list[Term] = []
        for p in _KIDS[self.op]:
            a = self.args[p]
            out.extend(a if isinstance(a, tuple) else (a,))
        return tuple(out)


def _key(t: Term) -> str:
    return t.key


def _digest(op: str, args: tuple) -> str:
    h = hashlib.blake2b(digest_size=12)
    h.update(op.encode())
    for a in args:
        h.update(b"|" + _arg_bytes(a))
    return h.hexdigest()


def _arg_bytes(a) -> bytes:
    if isinstance(a, Term):
        return a.key.encode()
    if isinstance(a, frozenset):
        return b"{" + b",".join(sorted(_arg_bytes(x) for x in a)) + b"}"
    if isinstance(a, tuple):
        return b"(" + b",".join(_arg_bytes(x) for x in a) + b")"
    return repr(a).encode()


def to_egglog(t: Term, memo: dict | None = None):
    """The egglog expression of term ``t`` (sub-terms shared through ``memo``)."""
    memo = {} if memo is None else memo
    if t in memo:
        return memo[t]
    op, a = t.op, t.args
    if op == "sum":
        e = EScope.sum(names(a[0]), names(a[1]), _multiset(a[2], memo))
    elif op == "reduce":
        e = EScope.reduce(a[0], names(a[1]), names(a[2]), to_egglog(a[3], memo))
    elif op == "tensor":
        e = ESource.tensor(a[0])
    elif op == "scope":
        e = ESource.scope(to_egglog(a[0], memo), _strings(a[1]))
    elif op == "acc":
        e = EBody.acc(to_egglog(a[0], memo), _strings(a[1]), names(a[2]))
    elif op == "use":
        e = EBody.use(to_egglog(a[0], memo))
    elif op == "const":
        e = EBody.const(float(a[0]))
    elif op == "bin":
        e = EBody.bin(a[0], to_egglog(a[1], memo), to_egglog(a[2], memo))
    elif op == "un":
        e = EBody.un(a[0], to_egglog(a[1], memo))
    else:
        raise AssertionError(f"unknown term op {op!r}")
    memo[t] = e
    return e


def _multiset(items, memo) -> MultiSet[EBody]:
    return MultiSet(*(to_egglog(x, memo) for x in items)) if items else MultiSet[EBody]()


def _strings(xs) -> Vec[String]:
    return Vec[String](*(String(x) for x in xs)) if xs else Vec[String].empty()
