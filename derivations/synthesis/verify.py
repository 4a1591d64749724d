"""Verification: two ``ir`` scopes are equal for *every* input, not just sampled ones.

``compare_exact(a, b)`` evaluates both scopes with one symbolic variable per input element
and compares every output element exactly: as sympy polynomials when the bodies are
polynomial (``+ - *``, constants: equality of the expanded polynomials is the identity),
else as formal values (:mod:`derivations.synthesis.exact`: exp/log normal forms that are
sound over the reals). Both sides must also be **defined on the same inputs** (``log`` is
NaN below 0: a rule may not turn a NaN into a number or back) and read the same input
elements (a NaN *input* propagates through ``0 * x``: ``x * 0 = 0`` is not a rule; see
``compare_exact``'s ``nan`` for the padding exception). ``positive`` names input tensors assumed positive: a rule that holds only then
carries that **side condition**, and the e-graph applies it only where positivity is proven.

Why small domains suffice for a synthesized rule (``verify_terms``). A term of
:mod:`derivations.synthesis.lang` reads operands at plain iterators, every iterator ranging
over the same ``0:n`` (operands are square), and sums over whole ranges. Fix an output
point; expanding the sums, each side is a sum over its summation tuples ``s`` in ``[n]^d``
of a body over the input elements indexed by the ``a`` output iterators and ``s``. Group
the tuples by *equality type* (which iterator values coincide): a permutation of ``[n]``
that fixes the output values maps tuples of one type onto each other and carries the body's
value along, so each side is a sum over types of orbit sums, where the number of tuples of
a type is a polynomial in ``n`` of degree at most ``d`` (falling factorials), and every type
is realised once ``n >= a + d``. Hence the difference of the sides, as a function of ``n``
for ``n >= a + d``, has per type coefficients that are polynomials of degree ``<= d``
(exponents of ``exp`` atoms likewise), which vanish everywhere if they vanish at the ``d +
1`` points ``n = a+d .. a+2d``; the finitely many ``n < a + d`` are checked directly. So
``n = 1 .. a + 2d`` (``d`` the larger side's number of sums) proves the rule for every
``n``, the degenerate extent 1 (one-element sums, coinciding diagonals) included. Rank-0
and pointwise rules need ``n = 1 .. a`` (``n = 1`` for scalars).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from ir.nodes import Scope, inputs

from derivations.synthesis import exact
from derivations.synthesis.exact_interp import (
    Dep, Deps, Formal, Poly, is_polynomial, run, symbolic_inputs,
)
from derivations.synthesis.lang import rank, sums, to_ir, to_text, variables

__all__ = ["Verdict", "compare_exact", "verify_terms", "verify_rule", "sizes_for",
           "POLY_LIMIT"]

POLY_LIMIT = 4096  # input elements above which polynomial bodies use the formal algebra


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str = ""
    method: str = ""                      # "sympy" | "exact" (which algebra decided)
    positive: tuple[str, ...] = ()        # side condition: these operands are > 0
    kind: str = ""    # why not: "values" | "domain" (NaN on different inputs) | "reads" | "shape"
    #                   | "vacuous" (NaN for every input: true, but no rule)
    defined: bool = True   # some output element is a number for some input

    def __bool__(self) -> bool:
        return self.ok


def _cells(scopes) -> int:
    return sum(int(np.prod(t.shape)) for s in scopes for t in inputs(s).values())


NAN_MODES = ("strict", "padding", "values")


def compare_exact(a: Scope, b: Scope, positive=(), nan: str = "strict") -> Verdict:
    """Are ``a`` and ``b`` equal on every input (with tensors ``positive`` assumed > 0)?

    ``nan``: ``"strict"`` -- at every output element both sides read the same input
    elements (a NaN input propagates alike); ``"padding"`` -- the same, except that a
    product with a zero read outside a tensor reads nothing (padding is a structural zero);
    ``"values"`` -- inputs are finite (NaN from ``log`` of negatives still counts)."""
    assert nan in NAN_MODES, nan
    ia, ib = inputs(a), inputs(b)
    if a.shape != b.shape:
        return Verdict(False, f"output shapes differ: {a.shape} vs {b.shape}", kind="shape")
    shared = set(ia) & set(ib)
    if any(ia[n].shape != ib[n].shape for n in shared):
        return Verdict(False, "an input has different shapes on the two sides", kind="shape")
    poly = is_polynomial(a) and is_polynomial(b) and _cells((a, b)) <= POLY_LIMIT
    algebra = Poly() if poly else Formal()
    env = symbolic_inputs((a, b), algebra)
    try:
        if poly:
            x, y = run(a, env, algebra), run(b, env, algebra)
        else:
            assumed = [v for name in positive if name in env for v in env[name].flat]
            with exact.assume_positive(assumed), np.errstate(all="ignore"):
                x, y = run(a, env, algebra), run(b, env, algebra)
    except Exception as e:  # a side that cannot be evaluated equals nothing
        return Verdict(False, f"evaluation failed: {type(e).__name__}: {e}", algebra.name,
                       kind="error")
    domain_only = False
    for pos in itertools.product(*(range(d) for d in a.shape)):
        u, v = x[pos], y[pos]
        if poly:
            same = (u - v) == 0
        else:
            same = exact.value_key(u) == exact.value_key(v)
            if not same and _values_only(u) == _values_only(v):
                domain_only = True
                continue
        if not same:
            return Verdict(False, f"values differ at {pos}: {u} vs {v}", algebra.name,
                           kind="values")
    if domain_only:
        return Verdict(False, "equal where both are defined, but defined on different inputs "
                       "(NaN in one, a number in the other)", algebra.name, kind="domain")
    defined = poly or any(v is not exact.NAN for v in x.flat)
    if nan != "values":
        deps = Deps()
        env = symbolic_inputs((a, b), deps)
        Dep.padding = nan == "padding"
        try:
            x, y = run(a, env, deps), run(b, env, deps)
        finally:
            Dep.padding = False
        for pos in itertools.product(*(range(d) for d in a.shape)):
            if _vars(x[pos]) != _vars(y[pos]):
                missing = sorted(_vars(x[pos]) ^ _vars(y[pos]))[:3]
                return Verdict(False, f"reads different inputs at {pos} (e.g. {missing}): a "
                               "NaN there would propagate on one side only", algebra.name,
                               kind="reads")
    return Verdict(True, "", algebra.name, tuple(sorted(positive)), defined=defined)


def _values_only(v):
    """The value without its domain conditions (NAN stands for 'nowhere defined')."""
    return v if v is exact.NAN else exact.value_key(v)[0]


def _vars(d) -> frozenset:
    return d.vars if isinstance(d, Dep) else frozenset()


# -- synthesized rules ---------------------------------------------------------------------------
def sizes_for(lhs: tuple, rhs: tuple) -> range:
    """The extents that prove a rule over terms for every extent (module doc)."""
    a, d = rank(lhs), max(sums(lhs), sums(rhs))
    return range(1, max(a + 2 * d, 1) + 1)


def verify_terms(lhs: tuple, rhs: tuple, positive=()) -> Verdict:
    """``lhs = rhs`` at every extent of ``sizes_for`` (so at every extent)."""
    if rank(lhs) != rank(rhs):
        return Verdict(False, f"ranks differ: {rank(lhs)} vs {rank(rhs)}")
    last, defined = None, False
    for n in sizes_for(lhs, rhs):
        last = compare_exact(to_ir(lhs, n), to_ir(rhs, n), positive)
        if not last:
            return Verdict(False, f"n={n}: {last.reason}", last.method, kind=last.kind)
        defined = defined or last.defined
    if not defined:
        return Verdict(False, "both sides are NaN for every input", last.method, kind="vacuous")
    return last


def verify_rule(lhs: tuple, rhs: tuple) -> Verdict:
    """Unconditionally, else under the fewest operands assumed positive (the side
    condition): tried when the formal algebra (exp/log) found the sides different."""
    first = verify_terms(lhs, rhs)
    if first or first.method != "exact" or first.kind not in ("values", "domain"):
        return first
    names = sorted(variables(lhs) | variables(rhs))
    for k in range(1, len(names) + 1):
        for chosen in itertools.combinations(names, k):
            v = verify_terms(lhs, rhs, chosen)
            if v:
                return v
    return first


def describe(lhs: tuple, rhs: tuple, v: Verdict) -> str:
    cond = f"  if {', '.join(n + ' > 0' for n in v.positive)}" if v.positive else ""
    return f"{to_text(lhs)} = {to_text(rhs)}{cond}"
