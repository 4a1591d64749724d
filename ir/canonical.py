"""Canonical form and fingerprint: one representative per alpha-equivalence class.

Two scopes that differ only by iterator names (and by the order of commutative operands) get
the same canonical scope. Steps, per scope, sources first:

1. operands of COMMUTATIVE ops are sorted by a *name-independent* key: traversal iterators are
   labelled by position, summation iterators only by their range;
2. summation iterators are ordered by where they occur in the sorted body (reductions are
   commutative, so their order carries no meaning) and renamed ``s0, s1, ...``; traversal
   iterators are renamed by position ``t0, t1, ...``; name hints are dropped.

Associativity is *not* normalised: reassociating changes floating-point results, so
``(a+b)+c`` and ``a+(b+c)`` stay different expressions (the e-graph relates them by rules).
Everything here is deterministic across processes: keys are strings, never id() or hash().
"""
from __future__ import annotations

import hashlib

import sympy

from ir.nodes import (
    COMMUTATIVE, Access, Binary, Const, Expr, Iter, Scope, Tensor, Unary, iterator_symbol, walk,
)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def index_key(e: sympy.Expr, labels: dict[str, str]) -> str:
    """A string for ``e`` where iterator names are replaced by ``labels`` (order-free for + and *)."""
    if e.is_Integer:
        return str(int(e))
    if e.is_Symbol:
        return labels.get(e.name, "?" + e.name)
    parts = [index_key(a, labels) for a in e.args]
    if isinstance(e, (sympy.Add, sympy.Mul)):
        parts.sort()
    return f"{type(e).__name__}({','.join(parts)})"


class _Canon:
    def __init__(self):
        self.memo: dict[int, Scope] = {}
        self.keys: dict[int, str] = {}  # id(canonical scope) -> its name-independent key
        self.cache: dict[int, tuple] = {}  # id(node) -> (node, labels, key)

    def source_key(self, src) -> str:
        if isinstance(src, Tensor):
            return f"{src.name}:{src.shape}:{src.dtype}"
        return self.keys[id(src)]

    def key(self, e: Expr, labels: dict[str, str]) -> str:
        """Name-independent key of ``e`` (cached per scope: sorting asks for it at every level)."""
        hit = self.cache.get(id(e))
        if hit is not None and hit[0] is e and hit[1] is labels:
            return hit[2]
        k = self._key(e, labels)
        self.cache[id(e)] = (e, labels, k)
        return k

    def _key(self, e: Expr, labels: dict[str, str]) -> str:
        if isinstance(e, Const):
            return f"c{float(e.value)!r}"
        if isinstance(e, Access):
            return f"{self.source_key(e.source)}[{','.join(index_key(i, labels) for i in e.indices)}]"
        if isinstance(e, Binary):
            return f"{e.op.value}({self.key(e.lhs, labels)},{self.key(e.rhs, labels)})"
        if isinstance(e, Unary):
            return f"{e.op.value}({self.key(e.x, labels)})"
        raise TypeError(f"canonical(): unknown node {type(e).__name__}")

    def sort(self, e: Expr, labels: dict[str, str]) -> Expr:
        """Canonical sources and sorted commutative operands, bottom-up."""
        if isinstance(e, Access):
            return Access(self.scope(e.source), e.indices) if isinstance(e.source, Scope) else e
        if isinstance(e, Unary):
            return Unary(e.op, self.sort(e.x, labels))
        if isinstance(e, Binary):
            a, b = self.sort(e.lhs, labels), self.sort(e.rhs, labels)
            if e.op in COMMUTATIVE and self.key(b, labels) < self.key(a, labels):
                a, b = b, a
            return Binary(e.op, a, b)
        return e

    def summation_order(self, body: Expr, s: Scope, labels: dict[str, str]) -> list[Iter]:
        """Summation iterators by their occurrences (access number, dim, term) in ``body``."""
        occ: dict[str, list] = {it.name: [] for it in s.summation}
        for n, a in enumerate(x for x in walk(body) if isinstance(x, Access)):
            for d, ix in enumerate(a.indices):
                for term in sympy.Add.make_args(ix):
                    for sym in term.free_symbols:
                        if sym.name in occ:
                            occ[sym.name].append((n, d, index_key(term, labels)))
        return sorted(s.summation, key=lambda it: (not occ[it.name], sorted(occ[it.name]),
                                                   it.lo, it.hi))

    def scope(self, s: Scope) -> Scope:
        if id(s) in self.memo:
            return self.memo[id(s)]
        labels = {it.name: f"t{k}" for k, it in enumerate(s.traversal)}
        labels.update({it.name: f"s[{it.lo}:{it.hi}]" for it in s.summation})
        body = self.sort(s.body, labels)
        sums = self.summation_order(body, s, labels)
        rename = {it.name: f"t{k}" for k, it in enumerate(s.traversal)}
        rename.update({it.name: f"s{k}" for k, it in enumerate(sums)})
        out = Scope(tuple(Iter(rename[it.name], it.lo, it.hi) for it in s.traversal),
                    tuple(Iter(rename[it.name], it.lo, it.hi) for it in sums),
                    _rename(body, rename), s.reduce)
        ranges = lambda its: ",".join(f"{it.lo}:{it.hi}" for it in its)  # noqa: E731
        self.keys[id(out)] = "S" + _sha(f"{ranges(out.traversal)}|{out.reduce.value}|"
                                        f"{ranges(out.summation)}|{self.key(out.body, {})}")[:20]
        self.memo[id(s)] = out
        return out


def _rename(e: Expr, rename: dict[str, str]) -> Expr:
    if isinstance(e, Access):
        out = []
        for ix in e.indices:
            sub = {sym: iterator_symbol(rename[sym.name]) for sym in ix.free_symbols
                   if sym.name in rename}
            out.append(ix.xreplace(sub))
        return Access(e.source, tuple(out))
    if isinstance(e, Unary):
        return Unary(e.op, _rename(e.x, rename))
    if isinstance(e, Binary):
        return Binary(e.op, _rename(e.lhs, rename), _rename(e.rhs, rename))
    return e


def canonical(scope: Scope) -> Scope:
    """The representative of ``scope``'s class: equal for scopes equal up to iterator names."""
    return _Canon().scope(scope)


def fingerprint(scope: Scope) -> str:
    """sha256 hex of the canonical text, input shapes and dtypes included. Kept on the scope,
    which is immutable: extraction and ranking ask again for the same candidates."""
    from ir.printer import to_text
    if "_fingerprint" not in scope.__dict__:
        scope.__dict__["_fingerprint"] = _sha(to_text(canonical(scope), declarations=True))
    return scope.__dict__["_fingerprint"]


# -- names for people -------------------------------------------------------------------------
DIGEST_SEP = "__"  # derived iterators are named ``base__digest`` so that they are unique


def readable(program: Scope) -> Scope:
    """``program`` with each scope's iterators renamed for reading: a derived ``hr__3fa2c1``
    becomes ``hr`` (``hr2``, ... where that is taken). Only bound names change, so the result
    is the same program; it is for display, while the e-graph needs the unique names."""
    done: dict[int, Scope] = {}

    def rebuild(s: Scope) -> Scope:
        if id(s) in done:
            return done[id(s)]
        own = s.traversal + s.summation
        bound = {it.name for it in own}
        used = {sym.name for a in walk(s.body) if isinstance(a, Access)
                for ix in a.indices for sym in ix.free_symbols} - bound
        rename: dict[str, str] = {}
        for it in sorted(own, key=lambda it: DIGEST_SEP in it.name):  # plain names keep theirs
            base = it.name.split(DIGEST_SEP)[0] or it.name
            name, k = base, 1
            while name in used:
                k += 1
                name = f"{base}{k}"
            rename[it.name] = name
            used.add(name)
        out = Scope(tuple(Iter(rename[it.name], it.lo, it.hi) for it in s.traversal),
                    tuple(Iter(rename[it.name], it.lo, it.hi) for it in s.summation),
                    body(s.body, rename), s.reduce, name=s.name, dtype=s.dtype)
        done[id(s)] = out
        return out

    def body(e: Expr, rename: dict[str, str]) -> Expr:
        if isinstance(e, Access):
            source = rebuild(e.source) if isinstance(e.source, Scope) else e.source
            return Access(source, _rename(e, rename).indices)
        if isinstance(e, Unary):
            return Unary(e.op, body(e.x, rename))
        if isinstance(e, Binary):
            return Binary(e.op, body(e.lhs, rename), body(e.rhs, rename))
        return e

    return rebuild(program)
