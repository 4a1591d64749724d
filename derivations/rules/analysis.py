"""Facts rulesets: they add no forms, only what other rules read.

* ``free_iterators`` keeps ``fv(body)``, the iterators a body term depends on.
* ``provenance`` gives the encoded ``sum`` nodes an empty rule chain (rules set the chain of
  the nodes they create in the creating action, and ``made_by`` keeps its first value).
* ``partition`` splits the factors of every ``sum`` node by each of its summation iterators
  ``s``: the distinct factors that do not read ``s`` (``outer_of``) and the iterators read by
  those that do (``inner_fv``). Both are set unions over the factors, so they are complete
  once this ruleset saturates, which the schedule guarantees before any rule reads them.
"""
from __future__ import annotations

from egglog import MultiSet, Set, String, Vec, eq, f64, rule, ruleset, set_

from derivations.lang import EBody, EScope, ESource, Iterator, fv, inner_fv, made_by, outer_of
from derivations.rules import Rules

E = MultiSet[EBody]


@ruleset
def _free_iterators(f: EBody, a: EBody, b: EBody, src: ESource, idx: Vec[String], u: Set[String],
                    w: Set[String], op: String, v: f64, s: EScope, out: Set[String],
                    sums: Set[String], fs: E):
    yield rule(eq(f).to(EBody.acc(src, idx, u)), name="fv_acc").then(set_(fv(f)).to(u))              # fv(x[idx]) = iterators in idx
    yield rule(eq(f).to(EBody.use(s)), eq(s).to(EScope.sum(out, sums, fs)), name="fv_use_sum").then(set_(fv(f)).to(out))   # fv(use W) = out(W)
    yield rule(eq(f).to(EBody.use(s)), eq(s).to(EScope.reduce(op, out, sums, a)), name="fv_use_red").then(set_(fv(f)).to(out))   # fv(use R) = out(R)
    yield rule(eq(f).to(EBody.const(v)), name="fv_const").then(set_(fv(f)).to(Set[String].empty()))   # fv(c) = {}
    yield rule(eq(f).to(EBody.bin(op, a, b)), eq(u).to(fv(a)), eq(w).to(fv(b)), name="fv_bin").then(set_(fv(f)).to(u | w))  # fv(a op b) = fv(a) | fv(b)
    yield rule(eq(f).to(EBody.un(op, a)), eq(u).to(fv(a)), name="fv_un").then(set_(fv(f)).to(u))     # fv(op a) = fv(a)


@ruleset
def _partition(out: Set[String], sums: Set[String], fs: E, s: String, f: EBody, u: Set[String]):
    node = EScope.sum(out, sums, fs)
    yield rule(node, Iterator(s), sums.contains(s), eq(u).to(fv(f)), fs.contains(f), u.not_contains(s), name="part_outer").then(
        set_(outer_of(out, sums, fs, s)).to(Set(f)))                   # f does not read s: outer
    yield rule(node, Iterator(s), sums.contains(s), eq(u).to(fv(f)), fs.contains(f), u.contains(s), name="part_inner").then(
        set_(inner_fv(out, sums, fs, s)).to(u))                        # f reads s: its iterators join the interface


@ruleset
def _provenance(out: Set[String], sums: Set[String], fs: E):
    # Rules set made_by when they create a node, before this runs; what is left is encoded.
    yield rule(EScope.sum(out, sums, fs), name="made_by_encoded").then(set_(made_by(out, sums, fs)).to(""))


FREE_ITERATORS = Rules("free_iterators", "fv(body): which iterators each body term reads",
                       _free_iterators, analysis=True)
PROVENANCE = Rules("provenance", "sum nodes no rule created come from the encoding",
                   _provenance, analysis=True)
PARTITION = Rules("partition", "the factors of each sum split by each summation iterator",
                  _partition, analysis=True, needs=(FREE_ITERATORS,))
