"""Interval facts and the domain-limited rewrites they license (the numerics contract).

A rewrite that is exact only on part of the domain is applied only where that part is
*proven* by facts in the e-graph, never assumed from sample inputs:

* ``intervals`` (facts, analysis): ``lo(e)`` / ``hi(e)`` bound the values of body term ``e``
  over every input (``lo`` merges by max, ``hi`` by min: facts only tighten). They come from
  constants and from the ranges of functions (``exp`` and ``sqrt`` are at least 0,
  ``sigmoid`` in [0, 1], ``tanh`` and ``erf`` in [-1, 1], an even power or a product of a
  term with itself at least 0, ...) through sums, maxima and minima; a read of an input
  has none. NaN is outside every interval: a fact says "when the value is a number, it is
  in here", and every rewrite below maps NaN to NaN, so NaN in, NaN out holds.
* ``simplify`` (forms): the rewrites, each with the fact it needs::

      exp(log x)        = x          x > 0          (log of x <= 0 is NaN or -inf)
      sqrt(x) * sqrt(x) = x          x >= 0         (NaN below 0)
      pow(sqrt x, 2)    = x          x >= 0
      pow(sqrt x, 4)    = pow(x, 2)  x >= 0
      abs(x)            = x          x >= 0
      relu(x)           = x          x >= 0
      pow(x, a) / pow(x, b) = pow(x, a - b)   0 < x < inf   (0/0, inf/inf are NaN)
      pow(x, a) / x     = pow(x, a - 1)       0 < x < inf
      pow(pow(x, a), b) = pow(x, a*b)   a, b positive integers (always)

  Not among them: ``log(exp x) = x`` (``exp`` overflows to inf for x > 88 in float32) and
  ``sqrt(x**2) = |x|`` (``x**2`` overflows where ``|x|`` does not: a finite result where the
  original is inf), nor ``x - x = 0`` (NaN for a NaN or an inf ``x``).
"""
from __future__ import annotations

from egglog import MultiSet, Set, String, eq, f64, i64, rule, ruleset, set_, union

from derivations.lang import EBody, EScope, hi, lo
from derivations.rules import Rules

E = MultiSet[EBody]
INF = float("inf")
EMPTY = Set[String].empty()

# the range of each unary function whose range does not depend on its argument
_RANGE = {"exp": (0.0, INF), "sqrt": (0.0, INF), "abs": (0.0, INF), "relu": (0.0, INF),
          "sigmoid": (0.0, 1.0), "tanh": (-1.0, 1.0), "erf": (-1.0, 1.0)}


@ruleset
def _intervals(e: EBody, a: EBody, b: EBody, v: f64, x: f64, y: f64, op: String, w: EScope,
               out: Set[String], sums: Set[String], fs: E, f: EBody):
    yield rule(eq(e).to(EBody.const(v)), name="iv_const").then(
        set_(lo(e)).to(v), set_(hi(e)).to(v))                            # c in [c, c]
    for fn, (low, high) in _RANGE.items():
        yield rule(eq(e).to(EBody.un(fn, a)), name=f"iv_range_{fn}").then(  # fn(a) in its range
            set_(lo(e)).to(f64(low)), set_(hi(e)).to(f64(high)))
    yield rule(eq(e).to(EBody.un("neg", a)), eq(x).to(hi(a)), name="iv_neg_lo").then(
        set_(lo(e)).to(-x))                                               # -a >= -hi(a)
    yield rule(eq(e).to(EBody.un("neg", a)), eq(x).to(lo(a)), name="iv_neg_hi").then(
        set_(hi(e)).to(-x))                                               # -a <= -lo(a)
    yield rule(eq(e).to(EBody.un("relu", a)), eq(x).to(lo(a)), name="iv_relu_lo").then(
        set_(lo(e)).to(x.max(f64(0.0))))                                  # relu(a) >= max(lo, 0)
    yield rule(eq(e).to(EBody.bin("+", a, b)), eq(x).to(lo(a)), eq(y).to(lo(b)),
               name="iv_add_lo").then(set_(lo(e)).to(x + y))             # a + b >= lo + lo
    yield rule(eq(e).to(EBody.bin("+", a, b)), eq(x).to(hi(a)), eq(y).to(hi(b)),
               name="iv_add_hi").then(set_(hi(e)).to(x + y))             # a + b <= hi + hi
    yield rule(eq(e).to(EBody.bin("-", a, b)), eq(x).to(lo(a)), eq(y).to(hi(b)),
               name="iv_sub_lo").then(set_(lo(e)).to(x - y))             # a - b >= lo - hi
    yield rule(eq(e).to(EBody.bin("-", a, b)), eq(x).to(hi(a)), eq(y).to(lo(b)),
               name="iv_sub_hi").then(set_(hi(e)).to(x - y))             # a - b <= hi - lo
    yield rule(eq(e).to(EBody.bin("*", a, a)), name="iv_square").then(
        set_(lo(e)).to(f64(0.0)))                                         # a * a >= 0
    yield rule(eq(e).to(EBody.bin("*", a, b)), eq(x).to(lo(a)), eq(y).to(lo(b)), x >= 0.0,
               y >= 0.0, name="iv_mul_nonneg").then(set_(lo(e)).to(x * y))  # both >= 0
    yield rule(eq(e).to(EBody.bin("pow", a, EBody.const(v))), eq(v % 2.0).to(f64(0.0)),
               name="iv_even_power").then(set_(lo(e)).to(f64(0.0)))      # a ** even >= 0
    yield rule(eq(e).to(EBody.bin("pow", a, b)), eq(x).to(lo(a)), x >= 0.0,
               name="iv_power_nonneg").then(set_(lo(e)).to(f64(0.0)))    # (a >= 0) ** b >= 0
    for op_, pick in (("max", "lo"), ("min", "hi")):
        bound = lo if pick == "lo" else hi
        yield rule(eq(e).to(EBody.bin(op_, a, b)), eq(x).to(bound(a)),
                   name=f"iv_{op_}_a").then(set_(bound(e)).to(x))        # max(a, b) >= lo(a)
        yield rule(eq(e).to(EBody.bin(op_, a, b)), eq(x).to(bound(b)),
                   name=f"iv_{op_}_b").then(set_(bound(e)).to(x))        # max(a, b) >= lo(b)
    # a reduction over factors that are all at least 0: a sum of squares, of one such factor
    yield rule(eq(e).to(EBody.use(w)), eq(w).to(EScope.sum(out, sums, fs)),
               eq(fs.length()).to(i64(2)), eq(f).to(fs.pick()), eq(fs.count(f)).to(i64(2)),
               name="iv_sum_of_squares").then(set_(lo(e)).to(f64(0.0)))
    yield rule(eq(e).to(EBody.use(w)), eq(w).to(EScope.sum(out, sums, fs)),
               eq(fs.length()).to(i64(1)), eq(f).to(fs.pick()), eq(x).to(lo(f)), x >= 0.0,
               name="iv_sum_nonneg").then(set_(lo(e)).to(f64(0.0)))


@ruleset
def _simplify(e: EBody, x: EBody, a: f64, b: f64, v: f64, w: f64, out: Set[String],
              sums: Set[String], fs: E, f: EBody):
    sqrt_x = EBody.un("sqrt", x)
    yield rule(eq(e).to(EBody.un("exp", EBody.un("log", x))), eq(v).to(lo(x)), v > 0.0,
               name="exp_log").then(union(e).with_(x))                    # exp(log x) = x, x > 0
    yield rule(eq(e).to(EBody.bin("*", sqrt_x, sqrt_x)), eq(v).to(lo(x)), v >= 0.0,
               name="sqrt_squared").then(union(e).with_(x))               # sqrt x * sqrt x = x
    yield rule(eq(e).to(EBody.bin("pow", sqrt_x, EBody.const(2.0))), eq(v).to(lo(x)),
               v >= 0.0, name="sqrt_pow2").then(union(e).with_(x))        # sqrt(x)**2 = x
    yield rule(eq(e).to(EBody.bin("pow", sqrt_x, EBody.const(4.0))), eq(v).to(lo(x)),
               v >= 0.0, name="sqrt_pow4").then(
        union(e).with_(EBody.bin("pow", x, EBody.const(2.0))))           # sqrt(x)**4 = x**2
    for fn in ("abs", "relu"):
        yield rule(eq(e).to(EBody.un(fn, x)), eq(v).to(lo(x)), v >= 0.0,
                   name=f"{fn}_of_nonneg").then(union(e).with_(x))        # abs x = x, x >= 0
    yield rule(eq(e).to(EBody.bin("pow", EBody.bin("pow", x, EBody.const(a)), EBody.const(b))),
               a >= 1.0, b >= 1.0, eq(a % 1.0).to(f64(0.0)), eq(b % 1.0).to(f64(0.0)),
               name="power_of_power").then(
        union(e).with_(EBody.bin("pow", x, EBody.const(a * b))))         # (x**a)**b = x**(ab)
    # (never to a power 0: pow(NaN, 0) is 1, where NaN / NaN is NaN)
    finite_positive = (eq(v).to(lo(x)), v > 0.0, eq(w).to(hi(x)), w < INF)
    quotient = EBody.bin("/", EBody.bin("pow", x, EBody.const(a)), EBody.bin("pow", x,
                                                                            EBody.const(b)))
    for differ, tag in ((a > b, "up"), (a < b, "down")):
        yield rule(eq(e).to(quotient), differ, *finite_positive,
                   name=f"quotient_of_powers_{tag}").then(
            union(e).with_(EBody.bin("pow", x, EBody.const(a - b))))     # x**a / x**b = x**(a-b)
        yield rule(eq(e).to(EBody.bin("/", EBody.bin("pow", x, EBody.const(a)), x)),
                   a > 1.0 if tag == "up" else a < 1.0, *finite_positive,
                   name=f"quotient_by_base_{tag}").then(
            union(e).with_(EBody.bin("pow", x, EBody.const(a - 1.0))))   # x**a / x = x**(a-1)
    # the same square as two equal factors of a scope's product (a MultiSet, not a bin "*")
    yield rule(eq(fs.count(sqrt_x)).to(i64(2)), EScope.sum(out, sums, fs), eq(v).to(lo(x)),
               v >= 0.0, name="sqrt_squared_factors").then(
        union(EScope.sum(out, sums, fs)).with_(
            EScope.sum(out, sums, fs.remove(sqrt_x).remove(sqrt_x).insert(x))))


INTERVALS = Rules("intervals", "lo(e) / hi(e): bounds of body terms, from constants and "
                  "function ranges", _intervals, analysis=True)
SIMPLIFY = Rules("simplify", "domain-limited rewrites, each applied where a fact proves its "
                 "domain (exp(log x) = x needs x > 0)", _simplify, needs=(INTERVALS,))
