"""Every hand-written rule, and every generated one, against the exact verifier.

The verifier (``derivations.synthesis.verify.compare_exact``) evaluates both programs with a
symbolic variable per input element and compares every output element exactly, where they
are defined (NaN from ``log`` below 0 included) and which inputs they read (NaN in, NaN out).
Random instances cover what the rules act on: offsets and strides that read outside the
tensors, floor/mod indices, ranges starting below 0, nested scopes read positionally or by
name, layout eOperators, max reductions, sums of products (some cancelling), exp/log/relu.

Index rules are held to ``nan="padding"``: a product with a zero read outside a tensor is a
structural zero (tightening drops such products, as libraries skip padding); everything else
must propagate NaN alike. Egglog rules and the generated rules are held to ``"strict"``.
"""
from __future__ import annotations

import pytest
import sympy
from hypothesis import HealthCheck, given, settings, strategies as st

from ir import Iter, Scope, Tensor, flops
from ir.nodes import Binary, BinOp, Const, Reduce, UnOp, Unary, free_iterators, sub_scopes

from derivations import Budget, derive
from derivations.rules import default_rulesets
from derivations.rules.algebra import SPLIT
from derivations.rules.densify import INDEX_RULES, replace_scope
from derivations.rules.index import DISTRIBUTE, EXPLORATIVE, FACTOR
from derivations.rules.synthesized import loaded_rules
from derivations.synthesis.lang import parse_rule
from derivations.synthesis.verify import compare_exact, verify_terms

HAND_WRITTEN_INDEX = {r.name: r for r in EXPLORATIVE + INDEX_RULES}


# -- random instances ------------------------------------------------------------------------------
@st.composite
def index(draw, its: list[Iter]) -> sympy.Expr:
    a, b = draw(st.sampled_from(its)).symbol, draw(st.sampled_from(its)).symbol
    c = draw(st.integers(-2, 2))
    return draw(st.sampled_from([a, a, a + c, 2 * a + c, a + b + c, sympy.floor((a + c) / 2),
                                 sympy.Mod(a + c, 2), sympy.Integer(abs(c))]))


@st.composite
def general(draw, unary=(UnOp.NEG, UnOp.RELU, UnOp.EXP, UnOp.LOG)) -> Scope:
    """A sum (sometimes max) over 2-4 iterators of a body over 1-3 reads of small tensors
    (sometimes through a nested scope or a layout eOperator), at index expressions."""
    its = [Iter(name, lo, lo + draw(st.integers(1, 3)))
           for name, lo in zip("ijkl", [draw(st.sampled_from([-1, 0, 0, 1]))
                                        for _ in range(draw(st.integers(2, 4)))])]
    reads = []
    for t in range(draw(st.integers(1, 3))):
        rank = draw(st.integers(1, 2))
        tensor = Tensor(f"t{t}", tuple(draw(st.integers(1, 4)) for _ in range(rank)))
        src = tensor
        kind = draw(st.sampled_from(["tensor", "tensor", "scope", "layout"]))
        if kind == "scope" and rank == 1:  # a sum (or max) read at an index expression
            u, v = Iter("u", 0, draw(st.integers(1, 4))), Iter("v", 0, draw(st.integers(1, 3)))
            src = Scope((u,), (v,), tensor[u.symbol + v.symbol],
                        draw(st.sampled_from([Reduce.SUM, Reduce.MAX])), name="inner")
        elif kind == "layout":  # a strided re-indexed copy
            us = tuple(Iter(f"u{d}", -1, (n + 1) // 2 + 1) for d, n in enumerate(tensor.shape))
            src = Scope(us, (), tensor[tuple(2 * u.symbol + 1 for u in us)], name="layout")
        reads.append(src[tuple(draw(index(its)) for _ in range(src.rank))])
    body = reads[0]
    for r in reads[1:]:
        body = Binary(draw(st.sampled_from([BinOp.MUL, BinOp.MUL, BinOp.ADD, BinOp.SUB])),
                      body, r)
    if len(reads) >= 2 and draw(st.integers(0, 3)) == 0:  # (a + b) * c - a * c
        body = Binary(BinOp.SUB, Binary(BinOp.MUL, Binary(BinOp.ADD, reads[0], reads[1]),
                                        reads[-1]), Binary(BinOp.MUL, reads[0], reads[-1]))
    if unary and draw(st.integers(0, 2)) == 0:
        body = Unary(draw(st.sampled_from(unary)), body)
    if draw(st.integers(0, 3)) == 0:
        body = body * Const(float(draw(st.sampled_from([2, -1, 0.5]))))
    k = draw(st.integers(0, len(its) - 1))
    reduce = draw(st.sampled_from([Reduce.MAX, Reduce.MIN] + [Reduce.SUM] * 4)) \
        if its[k + 1:] else Reduce.SUM
    if reduce is not Reduce.SUM and len(reads) == 1 and isinstance(reads[0].source, Scope) \
            and reads[0].source.reduce is Reduce.MAX and draw(st.booleans()):
        reduce, body = Reduce.MAX, reads[0]      # a max of a max
    return Scope(tuple(its[:k + 1]), tuple(its[k + 1:]), body, reduce, name="p")


@st.composite
def pieces(draw) -> Scope:
    """``max[c] (A[i,c] + B[i,c-n])``: a max over a cat axis (pieces tiling ``c``)."""
    i = Iter("i", 0, draw(st.integers(1, 3)))
    n, m = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    c = Iter("c", 0, n + m)
    a, b = Tensor("a", (i.hi, n)), Tensor("b", (i.hi, m))
    body = a[i.symbol, c.symbol] + b[i.symbol, c.symbol - n]
    return Scope((i,), (c,), body, draw(st.sampled_from([Reduce.MAX, Reduce.MIN])), name="p")


@st.composite
def max_of_max(draw) -> Scope:
    """``max[r] M[i + r]`` with ``M[u] = max[q] t[u, q]`` read inside (or past) its range."""
    n, r_n, q_n = draw(st.integers(2, 4)), draw(st.integers(1, 2)), draw(st.integers(1, 3))
    u, q = Iter("u", 0, n), Iter("q", 0, q_n)
    inner = Scope((u,), (q,), Tensor("t", (n, q_n))[u.symbol, q.symbol], Reduce.MAX, name="M")
    i, r = Iter("i", 0, n - r_n + draw(st.integers(0, 1))), Iter("r", 0, r_n)
    return Scope((i,), (r,), inner[i.symbol + r.symbol], Reduce.MAX, name="p")


@st.composite
def paired(draw) -> Scope:
    """Reads that take ``i, j`` together (``t0[i,j] * t1[i,j]``, or ``t[(i+j)//2, (i+j)%2]``
    pairs): what traversal merging and layout merging act on."""
    i, j = Iter("i", 0, draw(st.integers(1, 3))), Iter("j", 0, draw(st.integers(1, 3)))
    if draw(st.booleans()):
        shape = (i.hi, j.hi)
        body = Tensor("t0", shape)[i.symbol, j.symbol] * Tensor("t1", shape)[i.symbol, j.symbol]
    else:
        e = i.symbol + j.symbol + draw(st.integers(-1, 1))
        body = Tensor("t", (3, 2))[sympy.floor(e / 2), sympy.Mod(e, 2)] * \
            Tensor("s", (i.hi,))[i.symbol]
    return Scope((i, j), (), body, name="p")


@st.composite
def terms(draw) -> Scope:
    """What distribute, factor and fuse_terms act on: ``(a + b) * c``, ``a*c + b*c``, and a
    sum of two sums over equal ranges, side by side or apart among other terms."""
    i, k = Iter("i", 0, draw(st.integers(1, 3))), Iter("k", 0, draw(st.integers(1, 3)))
    a, b, c = (Tensor(n, (i.hi,))[i.symbol] for n in ("a", "b", "c"))
    kind = draw(st.sampled_from(["distribute", "factor", "fuse"]))
    if kind == "distribute":
        return Scope((i,), (), (a + b) * c, name="p")
    if kind == "factor":
        return Scope((i,), (), a * c + b * c, name="p")
    k2 = Iter("k2", 0, k.hi)
    left = Scope((i,), (k,), Tensor("s", (i.hi, k.hi))[i.symbol, k.symbol], name="A")
    right = Scope((i,), (k2,), Tensor("t", (i.hi, k.hi))[i.symbol, k2.symbol], name="B")
    op = draw(st.sampled_from([BinOp.ADD, BinOp.SUB]))
    if draw(st.booleans()):  # two sums apart in a chain of terms: (A - a) op (c - B)
        chain = Binary(op, left[i.symbol] - a, c - right[i.symbol])
        return Scope((i,), (), chain, name="p")
    return Scope((i,), (), Binary(op, left[i.symbol], right[i.symbol]), name="p")


@st.composite
def kron(draw) -> Scope:
    """``y[i] = sum[k] v[k] * A[i//p, k//q] * B[i%p, k%q]``: a Kronecker product read digit
    by digit (what digit splitting acts on)."""
    p, q, m, n = (draw(st.integers(lo, hi)) for lo, hi in ((2, 3), (2, 3), (1, 2), (1, 2)))
    i, k = Iter("i", 0, m * p), Iter("k", 0, n * q)
    a, b, v = Tensor("A", (m, n)), Tensor("B", (p, q)), Tensor("v", (n * q,))
    body = v[k.symbol] * a[sympy.floor(i.symbol / p), sympy.floor(k.symbol / q)] * \
        b[sympy.Mod(i.symbol, p), sympy.Mod(k.symbol, q)]
    return Scope((i,), (k,), body, name="p")


@st.composite
def programs(draw) -> Scope:
    """One of the families above, sometimes under one or two layout eOperators (split the
    first output dim by 2 or 3, then restore it: a chain for the layout rules to fuse)."""
    scope = draw(st.one_of(general(), general(), general(), general(), pieces(), max_of_max(),
                           paired(), terms(), kron()))
    for _ in range(draw(st.sampled_from([0, 0, 1, 2]))):
        a = draw(st.sampled_from([2, 3]))
        t0, rest = scope.traversal[0], scope.traversal[1:]
        outer = Iter(f"o{t0.name}", t0.lo, t0.hi)
        wrap = (Iter(f"{outer.name}a", t0.lo // a, -(-t0.hi // a)), Iter(f"{outer.name}b", 0, a))
        syms = tuple(r.symbol for r in rest)
        inner = Scope(wrap + rest, (), scope[(a * wrap[0].symbol + wrap[1].symbol,) + syms])
        scope = Scope((outer,) + rest, (), inner[(sympy.floor(outer.symbol / a),
                                                  sympy.Mod(outer.symbol, a)) + syms])
    return scope


def _check_index_rule(rule, program: Scope) -> int:
    fired = 0
    for s in sub_scopes(program):
        for out in rule.apply(s):
            fired += 1
            verdict = compare_exact(program, replace_scope(program, s, out), nan="padding")
            assert verdict, f"{rule.name}: {verdict.reason}\n--- before:\n{s}\n--- after:\n{out}"
    return fired


# -- hand-written index rules ----------------------------------------------------------------------
def test_every_index_rule_is_exactly_sound_on_random_instances():
    """Each index rule, on every sub-scope of each random program; and each rule fires on
    some of them (join_ranges joins pieces of one computation: test_joining's business)."""
    fired = {name: 0 for name in HAND_WRITTEN_INDEX}

    @settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
    @given(program=programs())
    def check(program):
        for name, rule in HAND_WRITTEN_INDEX.items():
            fired[name] += _check_index_rule(rule, program)

    check()
    never = {n for n, k in fired.items() if not k and n != "join_ranges"}
    assert not never, f"never fired on the random instances: {sorted(never)} (a new rule? " \
        "add a family of instances it acts on to programs())"


def _cancelling() -> Scope:
    x, y, z = (Tensor(n, (3,)) for n in "xyz")
    i = Iter("i", 0, 3)
    lx = Unary(UnOp.LOG, x[i.symbol])
    return Scope((i,), (), (lx + y[i.symbol]) * z[i.symbol] - lx * z[i.symbol])


@pytest.mark.parametrize("rule", [DISTRIBUTE, FACTOR], ids=lambda r: r.name)
def test_distribute_and_factor_do_not_cancel_a_read(rule):
    """``(log x + y) z - (log x) z`` is NaN for x < 0; ``y z`` is not. Expanding must not drop
    the log (found by this verifier: both rules returned ``y z`` before)."""
    e = _cancelling()
    for out in rule.apply(e):
        assert compare_exact(e, out, nan="values"), out


# -- egglog rules ----------------------------------------------------------------------------------
@st.composite
def contractions(draw) -> Scope:
    """Products of reads over shared iterators, with sums nested by name (matmul-like
    trees) and maps read by name; some factors are elementwise functions of reads (exp of a
    sum of bounded terms, log of a product with exp, exp of log, sqrt and abs of relu):
    what inline, split, inline_map, simplify and the generated rules act on."""
    its = [Iter(n, 0, draw(st.integers(1, 3))) for n in "ijkl"]

    def read(name, used):
        return Tensor(name, tuple(it.hi for it in used))[tuple(it.symbol for it in used)]

    def un(op, x):
        return Unary(op, x)

    factors = []
    for q in range(draw(st.integers(1, 3))):
        used = draw(st.lists(st.sampled_from(its), min_size=1, max_size=2, unique=True))
        r, u = read(f"t{q}", used), read(f"u{q}", [draw(st.sampled_from(its))])
        kind = draw(st.sampled_from(["read", "read", "exp_sum", "exp", "log_exp", "exp_log",
                                     "roots", "map"]))
        if kind == "exp_sum":      # exp(a + b), a and b bounded: splits into exp(a) exp(b)
            r = un(UnOp.EXP, un(UnOp.TANH, r) + un(UnOp.SIGMOID, u))
        elif kind == "exp":
            r = un(UnOp.EXP, un(UnOp.TANH, r))
        elif kind == "log_exp":    # log(a * exp(b)) = b + log(a)
            r = un(UnOp.LOG, r * un(UnOp.EXP, un(UnOp.TANH, u)))
        elif kind == "exp_log":    # exp(log a) = a where a > 0 is proven
            r = un(UnOp.EXP, un(UnOp.LOG, un(UnOp.SIGMOID, r) + Const(1.0)))
        elif kind == "roots":      # sqrt(x) sqrt(x) = x and |x| = x for x >= 0
            root = un(UnOp.SQRT, un(UnOp.RELU, r))
            r = root * root if draw(st.booleans()) else un(UnOp.ABS, un(UnOp.RELU, r))
        elif kind == "map":        # a map read at its own iterators
            w = Scope(tuple(used), (), un(UnOp.TANH, r), name="map")
            r = w[tuple(it.symbol for it in used)]
        factors.append(r)
    inner_its = draw(st.lists(st.sampled_from(its), min_size=1, max_size=2, unique=True))
    if draw(st.booleans()):  # a contraction read by name
        s = Iter("s", 0, 2)
        inner = Scope(tuple(inner_its), (s,), read("w", inner_its + [s]))
        factors.append(inner[tuple(it.symbol for it in inner_its)])
    body = factors[0]
    for f in factors[1:]:
        body = body * f
    used = sorted(free_iterators(body))
    k = draw(st.integers(0, len(used)))
    by = {it.name: it for it in its}
    return Scope(tuple(by[n] for n in used[:k]), tuple(by[n] for n in used[k:]), body)


def _check_derivation(rulesets, e: Scope) -> tuple[int, int]:
    """Every candidate of ``e`` under ``rulesets`` equals ``e`` exactly; (e-nodes, e-classes)."""
    d = derive(e, Budget(seconds=2, nodes=3000), rulesets=rulesets)
    for c in d.candidates(6, flops):
        verdict = compare_exact(e, c.program, nan="strict")
        assert verdict, f"{c.rule_chain}: {verdict.reason}\n{e}\n--- derived:\n{c.program}"
    return d.report.nodes, len(d.view.classes)


EGGLOG = {r.name: r for r in default_rulesets(generated=True) if not r.analysis}


def test_every_egglog_ruleset_is_exactly_sound_on_random_instances():
    """Each explorative egglog ruleset (the algebra, the domain-limited rewrites, the
    generated rules; ``split`` beside the generated ones, to move sums past what they split)
    on random contraction trees: every candidate equals the original exactly, reading the
    same inputs; and each changes the e-graph (new e-nodes or merged e-classes) on some."""
    fired = {name: 0 for name in EGGLOG}

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(e=contractions())
    def check(e):
        for name, rules in EGGLOG.items():
            chosen = (rules, SPLIT) if name == "generated" else (rules,)
            after = _check_derivation(chosen, e)
            before = _check_derivation(tuple(r for r in chosen if r is not rules) + rules.needs,
                                       e)
            fired[name] += after != before

    check()
    never = sorted(n for n, k in fired.items() if not k)
    assert not never, f"never fired on the random instances: {never} (add a factor kind)"


# -- generated rules, as data ----------------------------------------------------------------------
@pytest.mark.parametrize("text", [t for t, _ in __import__(
    "derivations.rules.generated", fromlist=["RULES"]).RULES])
def test_every_generated_rule_verifies(text):
    r = parse_rule(text)
    verdict = verify_terms(r.lhs, r.rhs, r.positive)
    assert verdict, f"{text}: {verdict.reason}"


def test_the_loaded_rules_are_among_the_verified_ones():
    assert loaded_rules() and all(verify_terms(r.lhs, r.rhs, r.positive) for r in loaded_rules())
