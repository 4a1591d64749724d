"""Normalisation before the e-graph: views inlined into their readers.

Core-ATen graphs spell one operator as a chain of data movements around a library call:
``einsum("bic,bijc->bij")`` becomes unsqueeze, permute, permute, view, clone, view, bmm, view,
permute. Each of those is a scope whose body is a single read (``T[i,j] = S[j,i]``): a
composition of index maps, which ``inline_read`` (traversal merging) folds into the reader
with the out-of-bounds guard made explicit where it matters. Doing that once, deterministically,
before derivation removes a dozen scopes from such an expression, so the e-graph's budget goes
to the derivations that change the algorithm, not to rediscovering function composition.
"""
from __future__ import annotations

from dataclasses import replace

from ir.nodes import Access, Scope
from derivations.rules.iterator_split import map_accesses
from derivations.rules.merging import inline_read, scope_reads

__all__ = ["inline_views", "is_view"]


def is_view(s: Scope) -> bool:
    """A scope that only moves data: no summation, its body one read."""
    return not s.summation and isinstance(s.body, Access)


def inline_views(root: Scope) -> Scope:
    """``root`` with every view it (transitively) reads inlined where ``inline_read`` can."""
    memo: dict[int, Scope] = {}

    def norm(s: Scope) -> Scope:
        if id(s) in memo:
            return memo[id(s)]
        out = replace(s, body=map_accesses(s.body, lambda a: Access(norm(a.source), a.indices)
                                             if isinstance(a.source, Scope) else a))
        while True:
            views = [a for a in scope_reads(out.body) if is_view(a.source)]
            for read in views:
                inlined = inline_read(out, read)
                if inlined is not None:
                    out = inlined
                    break
            else:
                break
        memo[id(s)] = out
        return out

    return norm(root)
