"""The algebra of sums and products: rulesets that add new forms.

A scope node is ``sum(out, sums, factors)``: ``T[out] = sum[sums] prod(factors)``, closed,
with globally unique iterator names (see :mod:`derivations.encode`). ``use(W)`` reads scope
``W`` at its own output iterators. A rule fires only on nodes whose provenance is known and
records, in ``made_by``, the rule chain from an encoded node to the node it creates (for
``explain``). Neither rule invents an iterator, so the e-graph stays finite.

Only contractions (``K`` nonempty) are inlined here: a scope without summation (a map, a
layout eOperator) is inlined by the index rule ``inline_read``, under guidance that keeps
instantiated operators intact (:mod:`derivations.guided`).

Together the two rules reassociate contraction chains: ``(A@B)@C`` is inlined to
``sum[j,k] A*B*C`` and split by ``j`` into ``A@(B@C)``; splitting a product by a summation
iterator that only some factors read moves the sum inward past the others
(``sum[i] x[i]*w[j] = w[j] * sum[i] x[i]``).
"""
from __future__ import annotations

from egglog import MultiSet, Set, String, UnstableFn, eq, i64, ne, rule, ruleset, set_, union

from derivations.lang import EBody, EScope, inner_fv, made_by, outer_of
from derivations.rules import Rules
from derivations.rules.analysis import PARTITION, PROVENANCE

E = MultiSet[EBody]
EMPTY = Set[String].empty()


@ruleset
def _inline(out: Set[String], sums: Set[String], fs: E, f: EBody, w: EScope, wout: Set[String],
            wsums: Set[String], wfs: E, chain: String):
    # sum[S] W[o] * F  =  sum[S+K] G * F     where W[o] = sum[K] G, K nonempty, disjoint from o, S
    new = (out, sums | wsums, fs.remove(f) + wfs)
    yield rule(eq(chain).to(made_by(out, sums, fs)), eq(f).to(EBody.use(w)), fs.contains(f),
               eq(w).to(EScope.sum(wout, wsums, wfs)), eq(wsums & (out | sums)).to(EMPTY),
               ne(wsums).to(EMPTY),
               name="inline").then(
        union(EScope.sum(out, sums, fs)).with_(EScope.sum(*new)),
        set_(made_by(*new)).to(chain + " inline"))


@ruleset
def _split(out: Set[String], sums: Set[String], fs: E, s: String, o: Set[EBody], ifc: Set[String],
           chain: String):
    # sum[S] F * G  =  sum[S-s] F * W[i]     where W[i] = sum[s] G, no factor of F reads s,
    #                                        and i = what G reads, but s
    outside = UnstableFn(Set.contains, o)  # the factors that do not read s
    w = (ifc.remove(s), Set(s), fs.filter_not(outside))
    new = (out, sums.remove(s), fs.filter(outside).insert(EBody.use(EScope.sum(*w))))
    yield rule(eq(o).to(outer_of(out, sums, fs, s)), eq(ifc).to(inner_fv(out, sums, fs, s)),
               eq(chain).to(made_by(out, sums, fs)), name="split").then(
        union(EScope.sum(out, sums, fs)).with_(EScope.sum(*new)),
        set_(made_by(*new)).to(chain + " split"),
        set_(made_by(*w)).to(chain + " split"))


@ruleset
def _inline_map(b: EBody, w: EScope, out: Set[String], fs: E, f: EBody, op: String,
                x: EBody, y: EBody, v: EScope):
    # use(W) = f     where W[out] = f: a map of one factor, read at its own iterators (same
    #                names, same ranges, so always in bounds; f reads a subset of out), f a
    #                computation or a by-name read: a layout (a positional read) stays a
    #                scope of its own, for the guided rules to place
    one = (eq(b).to(EBody.use(w)), eq(w).to(EScope.sum(out, EMPTY, fs)),
           eq(fs.length()).to(i64(1)), eq(f).to(fs.pick()))
    yield rule(*one, eq(f).to(EBody.bin(op, x, y)), name="inline_map").then(union(b).with_(f))
    yield rule(*one, eq(f).to(EBody.un(op, x)), name="inline_map_un").then(union(b).with_(f))
    yield rule(*one, eq(f).to(EBody.use(v)), name="inline_map_use").then(union(b).with_(f))


INLINE = Rules("inline", "scope inlining: a contraction read by name merges into its reader",
               _inline, needs=(PROVENANCE,))
SPLIT = Rules("split", "summation splitting: sum over s only the factors that read s",
              _split, needs=(PROVENANCE, PARTITION))
INLINE_MAP = Rules("inline_map", "a map read at its own iterators is its body: chains of "
                   "elementwise scopes fuse in the e-graph", _inline_map)
from derivations.rules.facts import SIMPLIFY  # noqa: E402 - after the rules it builds on

ALGEBRA = (INLINE, SPLIT, INLINE_MAP, SIMPLIFY)
