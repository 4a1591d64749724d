"""Encoding ``ir`` scopes as terms of the egglog language, and decoding them back.

The encoding, and why
---------------------
*Binders.* Iterators are variables bound by scopes, and e-graphs have no binders. Every
iterator gets a **globally unique name** at encode time (the IR name if still free, else a
numbered variant), and the e-graph never invents iterators: rules only move existing names
between scopes. A scope term is therefore closed and its meaning does not depend on where it
sits, so plain hash-consing is sound, and rules can test "does this factor use ``k``" on
``Set[String]`` values with egglog primitives instead of substituting under binders.

*Products.* A ``sum`` scope's body is a ``MultiSet`` of factors: the product's commutativity
and associativity are built into the representation (two orderings of ``a*b*c`` are the same
e-node) instead of being rules (raw AC rules make 12 factors reach 500k e-nodes).

*Names instead of positions.* A scope accessed with distinct plain iterators (``T[i, j]``,
the shape every composed operator takes) is encoded as ``use(T')`` where ``T'`` is ``T``
renamed so that its output iterators *are* the reader's ``i, j`` (traversal merging at encode
time). Such a scope's identity is ``(out-set, sum-set, factors)`` with no axis order, which is
what lets rules inline it (union the sum sets and the factor multisets) and create new ones
(summation splitting makes ``W[interface] = sum[s] inner``, read as ``use(W)``) without any
index arithmetic. Axis order is recovered at decode time from the global iterator order.
Everything else (affine / floor / mod indices, repeated or constant indices, shifted or
larger ranges, scopes read from several places) stays a positional ``acc`` of ``scope(S,
order)`` with index expressions stored opaquely as ``sympy.srepr`` strings plus their free
iterators: correct, shared like in the IR, just not touched by the algebra rules.

*Alpha-equivalence.* With unique names, forms derived from one expression meet whenever they
are built from the same iterators, which is how rules build them (a split names the new
scope's axes after the reader's iterators). Forms that are equal only up to renaming do not
meet in the e-graph; extraction deduplicates candidate programs by ``ir.canonical``
fingerprint, and decoding interns equal scopes, so shared work is counted once.
"""
from __future__ import annotations

from collections import Counter
from typing import Callable

import sympy

from ir.canonical import fingerprint
from ir.nodes import (
    Access, Binary, BinOp, Const, Expr, Iter, Reduce, Scope, Tensor, UnOp, Unary, accesses,
    build_product, iterator_symbol, sub_scopes,
)
from ir.errors import IRError
from derivations.index_rules import fresh_name
from derivations.term import Term

__all__ = ["Encoding", "EncodeError", "encode", "decode"]


class EncodeError(IRError):
    """An expression the encoding cannot represent (the message names the part that failed)."""


class Encoding:
    """What encode and decode share: unique iterators, input tensors, index expressions."""

    def __init__(self):
        self.iters: dict[str, Iter] = {}          # unique name -> iterator (with range)
        self.position: dict[str, int] = {}        # unique name -> creation order (axis order)
        self.tensors: dict[str, Tensor] = {}
        self.index: dict[str, sympy.Expr] = {}    # srepr -> index expression
        self.hints: dict[tuple, tuple] = {}       # (out, sums) -> (name, dtype, axis order)
        self.root_order: tuple[str, ...] = ()
        self._last_order: tuple[str, ...] = ()    # axis order of the scope encoded last
        self.products: dict[Term, tuple] = {}     # encoded sum term -> (factors, product tree)
        self._refs: Counter = Counter()
        self._positional: dict[int, Term] = {}
        self._own_order: dict[int, tuple[str, ...]] = {}  # id(scope) -> its encoded axis order
        self._renamed: dict[tuple, Term] = {}
        self._decoded: dict[tuple, Scope] = {}
        self._interned: dict[Scope, Scope] = {}
        self._keep = False                        # derived mode: keep the scopes' names
        self.new_names: list[str] = []            # names registered by derived encodes
        self._alpha: dict[str, Scope] = {}        # fingerprint -> first derived scope
        self._fingerprints: dict[Scope, str] = {}  # derived scopes recur in every result
        self._sreprs: dict[sympy.Expr, str] = {}   # of a rule: each is printed once


    # -- encode ----------------------------------------------------------------------------
    def encode(self, root: Scope) -> Term:
        """The term of ``root``; call once per Encoding (names are unique within it)."""
        if not isinstance(root, Scope):
            raise EncodeError(f"encode() takes a Scope, got {type(root).__name__}")
        root = shared(root)
        for s in sub_scopes(root):
            for a in accesses(s.body):
                if isinstance(a.source, Scope):
                    self._refs[id(a.source)] += 1
        term = self._scope(root, None)
        # the root's own axis order, name and dtype: a scope it reads by name has the same
        # iterator sets (traversal merging) and may have registered its hint first
        self.root_order = self._last_order
        key = term.args[:2] if term.op == "sum" else term.args[1:3]
        self.hints[key] = (root.name, root.dtype, self.root_order)
        return term

    def encode_derived(self, root: Scope) -> Term:
        """The term of ``root``, a scope a rule derived from decoded scopes: iterator names
        are *kept* (a name keeps one range: an iterator whose name is known with another
        range, or that a by-name read would capture, gets a name derived from both), so
        a rule's result meets the e-class it came from and equal results meet each other."""
        saved = self._refs, self._positional, self._renamed, self._keep, self._own_order
        self._refs, self._positional, self._renamed, self._keep = Counter(), {}, {}, True
        self._own_order = {}  # keyed by id(): valid while this call's scopes are alive
        try:
            for s in sub_scopes(root):
                for a in accesses(s.body):
                    if isinstance(a.source, Scope):
                        self._refs[id(a.source)] += 1
            return self._scope(root, None)
        finally:
            self._refs, self._positional, self._renamed, self._keep, self._own_order = saved

    def _kept(self, it: Iter, taken: frozenset[str] = frozenset()) -> str:
        """Derived mode: ``it``'s own name unless it names another range or is ``taken``."""
        name = it.name
        if name in taken or (name in self.iters and (self.iters[name].lo, self.iters[name].hi)
                             != (it.lo, it.hi)):
            name = fresh_name(it.name, it.name, it.lo, it.hi, sorted(taken & {it.name}))
        if name not in self.iters:
            self.iters[name] = Iter(name, it.lo, it.hi)
            self.position[name] = len(self.position)
            self.new_names.append(name)
        assert (self.iters[name].lo, self.iters[name].hi) == (it.lo, it.hi), (name, it)
        return name

    def _fresh(self, it: Iter) -> str:
        """A new unique name for ``it`` (its own if still free), remembered with its range."""
        name, n = it.name, 0
        while name in self.iters:
            n += 1
            name = f"{it.name}{n}"
        self.iters[name] = Iter(name, it.lo, it.hi)
        self.position[name] = len(self.position)
        return name

    def _scope(self, s: Scope, out: tuple[str, ...] | None) -> Term:
        """``s`` with fresh names, or with its traversal renamed to the reader's ``out``."""
        memo, key = (self._positional, id(s)) if out is None else (self._renamed, (id(s), out))
        if key in memo:
            return memo[key]
        env: dict[str, str] = {}
        for k, it in enumerate(s.traversal):
            if out is not None:
                env[it.name] = out[k]
            else:
                env[it.name] = self._kept(it) if self._keep else self._fresh(it)
        for it in s.summation:
            env[it.name] = self._kept(it, frozenset(out or ())) if self._keep else self._fresh(it)
        trav = frozenset(env[it.name] for it in s.traversal)
        sums = frozenset(env[it.name] for it in s.summation)
        if len(trav) != len(s.traversal) or len(env) != len(s.traversal) + len(s.summation):
            raise EncodeError(f"scope {s.name or '?'} binds an iterator twice")
        if s.reduce is Reduce.SUM:
            flat, shape = _product_tree(s.body)
            factors = tuple(self._body(f, env, s) for f in flat)
            term = Term("sum", (trav, sums, factors))
            self.products.setdefault(term, (factors, shape))
        else:
            term = Term("reduce", (s.reduce.value, trav, sums, self._body(s.body, env, s)))
        order = self._last_order = tuple(env[it.name] for it in s.traversal)
        if out is None:
            self._own_order[id(s)] = order
        self.hints.setdefault((trav, sums), (s.name, s.dtype, order))
        memo[key] = term
        return term

    def _body(self, e: Expr, env: dict[str, str], owner: Scope) -> Term:
        if isinstance(e, Const):
            return Term("const", (float(e.value),))
        if isinstance(e, Binary):
            return Term("bin", (e.op.value, self._body(e.lhs, env, owner), self._body(e.rhs, env, owner)))
        if isinstance(e, Unary):
            return Term("un", (e.op.value, self._body(e.x, env, owner)))
        if isinstance(e, Access):
            return self._access(e, env, owner)
        raise EncodeError(f"cannot encode {type(e).__name__} inside scope {owner.name or '?'}: "
                          f"a scope in a body must be accessed")

    def _access(self, a: Access, env: dict[str, str], owner: Scope) -> Term:
        idx = []
        for i in a.indices:
            free = {s.name for s in i.free_symbols}
            if not free <= env.keys():
                raise EncodeError(f"index {i} in scope {owner.name or '?'} uses iterators "
                                  f"{sorted(free - env.keys())} that no enclosing scope binds")
            idx.append(i.xreplace({s: iterator_symbol(env[s.name]) for s in i.free_symbols}))
        src = a.source
        if isinstance(src, Tensor):
            known = self.tensors.setdefault(src.name, src)
            if known != src:
                raise EncodeError(f"two different input tensors are named {src.name!r}: "
                                  f"{known} and {src}")
            return self._positional_access(Term("tensor", (src.name,)), idx)
        if self._refs[id(src)] == 1 and self._plain(idx, src):
            return Term("use", (self._scope(src, tuple(i.name for i in idx)),))
        if self._keep:  # a derived scope read positionally: the first one alpha-equal to it
            key = self._fingerprints.get(src)
            if key is None:
                key = self._fingerprints[src] = fingerprint(src)
            src = self._alpha.setdefault(key, src)
        inner = self._scope(src, None)
        # the read's indices are in src's own axis order (another scope with the same
        # iterator sets may have registered another order as the hint)
        order = self._own_order.get(id(src)) or self._order(inner)
        return self._positional_access(Term("scope", (inner, order)), idx)

    def _plain(self, idx: list[sympy.Expr], src: Scope) -> bool:
        """Distinct iterators, each with exactly the range of the source axis it reads.

        (A narrower range would also be sound, by computing only the part read, but that is
        boundary tightening: a derivation, not something encoding should do silently.)
        """
        if not all(isinstance(i, sympy.Symbol) for i in idx) or len(set(idx)) != len(idx):
            return False
        return all((self.iters[i.name].lo, self.iters[i.name].hi) == bound
                   for i, bound in zip(idx, src.bounds()))

    def _positional_access(self, src: Term, idx: list[sympy.Expr]) -> Term:
        reprs = []
        for i in idx:
            r = self._sreprs.get(i)
            if r is None:
                r = self._sreprs[i] = sympy.srepr(i)
                self.index.setdefault(r, i)
            reprs.append(r)
        free = frozenset(s.name for i in idx for s in i.free_symbols)
        return Term("acc", (src, tuple(reprs), free))

    # -- decode ----------------------------------------------------------------------------
    def decode(self, t: Term, order: tuple[str, ...] | None = None) -> Scope:
        """The ``ir`` scope of a scope term, output axes in ``order`` (default: the IR's order
        for scopes that came from the IR, else the order of first use in the body).

        Decoded scopes are interned: equal terms, and terms decoding to equal scopes, give
        the same ``Scope`` object, so ``ir.sub_scopes`` sees shared work once.
        """
        key = (t, order)
        if key not in self._decoded:
            self._decoded[key] = self._intern(self._decode_scope(t, order))
        return self._decoded[key]

    def _decode_scope(self, t: Term, order) -> Scope:
        if t.op == "sum":
            out, sums, factors = t.args
            if t in self.products:  # an encoded product: rebuild its original tree
                flat, shape = self.products[t]
                body = _build_product([self._decode_body(f) for f in flat], shape)
            else:
                body = build_product([self._decode_body(f) for f in sorted(factors, key=_factor_key)])
            reduce = Reduce.SUM
        elif t.op == "reduce":
            op, out, sums, b = t.args
            body, reduce = self._decode_body(b), Reduce(op)
        else:
            raise AssertionError(f"not a scope term: {t!r}")
        name, dtype, hint = self.hints.get((out, sums), (None, "float32", None))
        order = tuple(order) if order is not None else hint or self._first_use(body, out)
        assert frozenset(order) == out and len(order) == len(out), f"order {order} for {sorted(out)}"
        return Scope(tuple(self.iters[n] for n in order), tuple(self.iters[n] for n in self._sorted(sums)),
                     body, reduce, name=name, dtype=dtype)

    def _decode_body(self, t: Term) -> Expr:
        op, a = t.op, t.args
        if op == "const":
            return Const(a[0])
        if op == "bin":
            return Binary(BinOp(a[0]), self._decode_body(a[1]), self._decode_body(a[2]))
        if op == "un":
            return Unary(UnOp(a[0]), self._decode_body(a[1]))
        if op == "use":
            w = self.decode(a[0])
            return Access(w, tuple(it.symbol for it in w.traversal))
        if op == "acc":
            src_t, reprs, _ = a
            src = (self.tensors[src_t.args[0]] if src_t.op == "tensor"
                   else self.decode(src_t.args[0], tuple(src_t.args[1])))
            return Access(src, tuple(self._index(r) for r in reprs))
        raise AssertionError(f"not a body term: {t!r}")

    def _index(self, r: str) -> sympy.Expr:
        assert r in self.index, f"index {r} was not made by this encoding (rules make none)"
        return self.index[r]

    def _intern(self, s: Scope) -> Scope:
        return self._interned.setdefault(s, s)

    def _sorted(self, xs) -> list[str]:
        return sorted(xs, key=lambda n: (self.position.get(n, len(self.position)), n))

    def _first_use(self, body: Expr, out: frozenset[str]) -> tuple[str, ...]:
        """Axis order of a derived scope: as its iterators first appear in the body's reads."""
        seen: list[str] = []
        for a in accesses(body):
            for i in a.indices:
                for sym in sorted(i.free_symbols, key=lambda x: self.position.get(x.name, 0)):
                    if sym.name in out and sym.name not in seen:
                        seen.append(sym.name)
        return tuple(seen) + tuple(n for n in self._sorted(out) if n not in seen)

    def _order(self, t: Term) -> tuple[str, ...]:
        """Output axis order of scope term ``t``: the IR's where known, else creation order."""
        out, sums = t.args[:2] if t.op == "sum" else t.args[1:3]
        hint = self.hints.get((out, sums))
        return hint[2] if hint else tuple(self._sorted(out))


def shared(root: Scope) -> Scope:
    """``root`` with sub-scopes equal up to iterator names made one object: a program that
    computes ``A @ B`` twice (or reads two copies of one layout) shares it, as one e-class
    read from two places, so rules see the common term (``x - x`` cancels) and extraction
    counts it once."""
    rep: dict[str, Scope] = {}
    done: dict[int, Scope] = {}
    # Each representative stands in the keys of the scopes reading it as a tensor of its
    # own: a key is the statement alone, not the program above it printed again (a chain of
    # n scopes would cost n² to key).
    stand_in: dict[int, Tensor] = {}
    for s in sub_scopes(root):  # dependencies first
        body = _with_sources(s.body, lambda src: done.get(id(src), src))
        new = s if body is s.body else Scope(s.traversal, s.summation, body, s.reduce,
                                             name=s.name, dtype=s.dtype)
        alone = Scope(new.traversal, new.summation,
                      _with_sources(new.body, lambda src: stand_in[id(src)]), new.reduce,
                      name=new.name, dtype=new.dtype)
        try:
            done[id(s)] = found = rep.setdefault(fingerprint(alone), new)
        except (TypeError, KeyError):  # not a valid program: encoding reports what is wrong
            return root
        stand_in.setdefault(id(found), Tensor(f"scope {len(stand_in)}", found.shape,
                                              found.dtype))
    return done[id(root)]


def _with_sources(e: Expr, replace: Callable[[Scope], Scope | Tensor]) -> Expr:
    """``e`` with each scope it reads replaced by ``replace(scope)`` (``e`` itself if none
    changes)."""
    if isinstance(e, Access):
        src = replace(e.source) if isinstance(e.source, Scope) else e.source
        return e if src is e.source else Access(src, e.indices)
    if isinstance(e, Binary):
        a, b = _with_sources(e.lhs, replace), _with_sources(e.rhs, replace)
        return e if a is e.lhs and b is e.rhs else Binary(e.op, a, b)
    if isinstance(e, Unary):
        x = _with_sources(e.x, replace)
        return e if x is e.x else Unary(e.op, x)
    return e


def _product_tree(e: Expr) -> tuple[list[Expr], object]:
    """The factors of the product at the top of ``e`` and its shape (nested pairs of positions)."""
    flat: list[Expr] = []

    def visit(x: Expr):
        if isinstance(x, Binary) and x.op is BinOp.MUL:
            return (visit(x.lhs), visit(x.rhs))
        flat.append(x)
        return len(flat) - 1

    shape = visit(e)
    return flat, shape


def _build_product(factors: list[Expr], shape) -> Expr:
    if isinstance(shape, int):
        return factors[shape]
    return Binary(BinOp.MUL, _build_product(factors, shape[0]), _build_product(factors, shape[1]))


def _factor_key(t: Term):
    """A deterministic order of derived products: input reads by tensor name, then the rest."""
    if t.op == "acc" and t.args[0].op == "tensor":
        return (0, t.args[0].args[0], t.key)
    return (1, t.op, t.key)


def encode(root: Scope) -> tuple[Term, Encoding]:
    """The term of ``root`` and the encoding context needed to decode terms derived from it."""
    enc = Encoding()
    return enc.encode(root), enc


def decode(term: Term, enc: Encoding) -> Scope:
    return enc.decode(term)
