"""The generated rules (``derivations/rules/generated.py``) as the egglog ruleset ``generated``.

Which rules load: the ones tagged ``new`` (the hand-written algebra does not derive them)
that are *pointwise* (a scalar identity: it rewrites a body term, whatever its iterators)
and involve ``exp`` or ``log``. Polynomial ones are left to ``distribute``/``factor``, which
compute sympy's canonical forms instead of searching them (ring axioms as rewrites are what
makes products of 12 factors reach 500k e-nodes), and forms with a ``0`` factor only carry
NaN propagation, never a cheaper program. Rules over sums and index maps state what the
encoding (names, multisets) or ``split``/``inline``/``split_terms`` already do.

Where a rule applies: to the factors of a ``sum`` scope node. ``sum(out, sums, F)`` with
factors matching the rule's left side (one factor, or several when the side is a product:
products are multisets here) gets the equal node whose factors are the right side's, its
products flattened into the multiset, so that ``split`` can then move a sum past the
factors that do not read it: ``sum[j] exp(x[i] + y[j]) = exp(x[i]) * sum[j] exp(y[j])``.
Each direction is its own rule, named ``lhs->rhs`` in the rule chain. A side condition
``a > 0`` holds where the facts ruleset ``positivity`` proves ``Positive(a)``: ``exp`` is
positive, so are positive constants and sums and products of positives.

Floating-point range. The verifier proves identities over the reals; ``exp`` overflows to
inf above 88.7 and underflows to 0 below about -87 in float32, where ``exp(a)*exp(b)`` and
``exp(a+b)`` part (inf against a number, as ``derivations.rules.facts`` explains for
``log(exp x)``). So a rule whose ``exp`` reads anything but a ``log`` applies only where the
interval facts (``intervals``: ``lo``/``hi``) keep the operands those arguments read within
``[-B, B]``, ``B`` the largest bound that keeps every such argument, on both sides, within
``EXP_RANGE`` (``exp(a+b)``: ``B = 43``). ``exp(log u)`` needs none: ``log`` of a finite
float is at most 88.7. Reads of input tensors have no interval, so ``sum[j] exp(x[i] +
y[j])`` stays as it is, while ``sum[j] exp(tanh(x[i]) + tanh(y[j]))`` splits.
"""
from __future__ import annotations

from egglog import MultiSet, Set, String, eq, f64, relation, rule, ruleset, set_, union, var

from derivations.lang import EBody, EScope, hi, lo, made_by
from derivations.rules import Rules
from derivations.rules.analysis import PROVENANCE
from derivations.rules.facts import INTERVALS
from derivations.synthesis.lang import Rule, is_pointwise, ops_of, parse_rule, to_text

__all__ = ["Positive", "POSITIVITY", "GENERATED", "loaded_rules", "rule_name", "exp_bound",
           "EXP_RANGE"]

EXP_RANGE = (-87.0, 88.0)  # float32 exp: inf above 88.72, subnormal and then 0 below -87.3

Positive = relation("Positive", EBody)

_UN = {"neg": "neg", "exp": "exp", "log": "log"}
_BIN = {"add": "+", "sub": "-", "mul": "*"}


@ruleset
def _positivity(f: EBody, a: EBody, b: EBody, v: f64, s: EScope, out: Set[String],
                fs: MultiSet[EBody]):
    yield rule(eq(f).to(EBody.un("exp", a)), name="pos_exp").then(Positive(f))            # e^a > 0
    yield rule(eq(f).to(EBody.un("sigmoid", a)), name="pos_sigmoid").then(Positive(f))    # 1/(1+e^-a) > 0
    yield rule(eq(f).to(EBody.const(v)), v > f64(0.0), name="pos_const").then(Positive(f))  # c > 0
    yield rule(eq(f).to(EBody.bin("*", a, b)), Positive(a), Positive(b),
               name="pos_mul").then(Positive(f))                                          # a, b > 0 => ab > 0
    yield rule(eq(f).to(EBody.bin("+", a, b)), Positive(a), Positive(b),
               name="pos_add").then(Positive(f))                                          # a, b > 0 => a+b > 0
    yield rule(eq(f).to(EBody.use(s)), eq(s).to(EScope.sum(out, Set[String].empty(), fs)),
               eq(fs.length()).to(1), Positive(fs.pick()),
               name="pos_map").then(Positive(f))                                          # W[t] = p(t) > 0


POSITIVITY = Rules("positivity", "Positive(b): body terms proven > 0 (side conditions of "
                   "generated rules)", _positivity, analysis=True)


def loaded_rules() -> list[Rule]:
    """The generated rules that load (module doc), in file order."""
    from derivations.rules.generated import RULES
    out = []
    for text, tag in RULES:
        r = parse_rule(text)
        ops = ops_of(r.lhs) | ops_of(r.rhs)
        if tag == "new" and is_pointwise(r.lhs) and is_pointwise(r.rhs) and \
                ops & {"exp", "log"} and not _has_zero(r) and exp_bound(r) is not None:
            out.append(r)
    return out


def _exp_args(t: tuple) -> list[tuple]:
    if t[0] in ("var", "const"):
        return []
    own = [t[1]] if t[0] == "exp" else []
    return own + [a for c in t[1:] for a in _exp_args(c)]


def _interval(t: tuple, bound: float) -> tuple[float, float]:
    """Interval of ``t`` with every operand in ``[-bound, bound]``."""
    op = t[0]
    if op == "var":
        return -bound, bound
    if op == "const":
        return float(t[1]), float(t[1])
    if op == "neg":
        low, high = _interval(t[1], bound)
        return -high, -low
    (a, b), (c, d) = _interval(t[1], bound), _interval(t[2], bound)
    if op == "add":
        return a + c, b + d
    if op == "sub":
        return a - d, b - c
    products = (a * c, a * d, b * c, b * d)
    return min(products), max(products)


def exp_bound(r: Rule) -> float | None:
    """The bound ``B`` on the operands read by ``r``'s ``exp`` arguments (module doc); ``0.0``
    when every ``exp`` reads a ``log`` (no bound needed), None when no bound keeps them in
    ``EXP_RANGE`` (an argument with a nested exp or log, or a constant out of range)."""
    args = [t for side in (r.lhs, r.rhs) for t in _exp_args(side) if t[0] != "log"]
    if not args:
        return 0.0
    if any(ops_of(t) & {"exp", "log"} for t in args):
        return None

    def fits(bound: float) -> bool:
        return all(EXP_RANGE[0] <= low and high <= EXP_RANGE[1]
                   for low, high in (_interval(t, bound) for t in args))

    if not fits(1.0):
        return None
    low, high = 1.0, EXP_RANGE[1]
    for _ in range(50):
        mid = (low + high) / 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return float(int(low + 1e-6))


def _guarded(r: Rule) -> set[str]:
    """The operands whose intervals the float-range guard bounds."""
    return {v for side in (r.lhs, r.rhs) for t in _exp_args(side) if t[0] != "log"
            for v in _vars(t)}


def _has_zero(r: Rule) -> bool:
    def has(t):
        return t == ("const", 0) or (t[0] not in ("var", "const") and any(has(c) for c in t[1:]))
    return has(r.lhs) or has(r.rhs)


def rule_name(lhs: tuple, rhs: tuple, positive=()) -> str:
    cond = f"[{','.join(p + '>0' for p in positive)}]" if positive else ""
    return f"{to_text(lhs)}->{to_text(rhs)}{cond}".replace(" ", "")


def _factors(t: tuple) -> list[tuple]:
    """The factors of the product at the top of ``t``."""
    return _factors(t[1]) + _factors(t[2]) if t[0] == "mul" else [t]


def _pattern(t: tuple, names: dict):
    op = t[0]
    if op == "var":
        return names[t[1]]
    if op == "const":
        return EBody.const(f64(float(t[1])))
    if op in _UN:
        return EBody.un(_UN[op], _pattern(t[1], names))
    return EBody.bin(_BIN[op], _pattern(t[1], names), _pattern(t[2], names))


def _direction(lhs: tuple, rhs: tuple, positive: tuple[str, ...], guard: set[str],
               bound: float):
    """The egglog rule rewriting the factors ``lhs`` of a sum node into ``rhs``, or None;
    the operands in ``guard`` must have intervals within ``[-bound, bound]``."""
    names = {}
    out, sums = var("out", Set[String]), var("sums", Set[String])
    fs, chain = var("fs", MultiSet[EBody]), var("chain", String)
    facts = [eq(chain).to(made_by(out, sums, fs))]
    rest = fs
    factors = sorted(_factors(lhs), key=lambda f: f[0] == "var")  # structured ones first
    for k, f in enumerate(factors):
        if f[0] == "var":
            if f[1] not in names:
                return None  # a bare operand no other factor binds: it would match anything
            term = names[f[1]]
        else:
            for v in sorted(_vars(f)):
                names.setdefault(v, var(f"v_{v}", EBody))
            term = var(f"f{k}", EBody)
            facts.append(eq(term).to(_pattern(f, names)))
        facts.append(rest.contains(term))
        rest = rest.remove(term)
    if any(v not in names for v in _vars(rhs)):
        return None
    facts += [Positive(names[p]) for p in positive]
    for v in sorted(guard):
        low, high = var(f"lo_{v}", f64), var(f"hi_{v}", f64)
        facts += [eq(low).to(lo(names[v])), low >= f64(-bound),
                  eq(high).to(hi(names[v])), high <= f64(bound)]
    new = rest
    for f in _factors(rhs):
        new = new.insert(_pattern(f, names))
    name = rule_name(lhs, rhs, positive)
    return rule(*facts, name=name).then(
        union(EScope.sum(out, sums, fs)).with_(EScope.sum(out, sums, new)),
        set_(made_by(out, sums, new)).to(chain + f" {name}"))


def _vars(t: tuple) -> set[str]:
    if t[0] == "var":
        return {t[1]}
    if t[0] == "const":
        return set()
    return set().union(*(_vars(c) for c in t[1:]))


def _ops(rules: list[Rule]) -> tuple[str, ...]:
    """``("exp", "log")`` when every left side of every direction reads one of them (so the
    ruleset can wait until the e-graph has one), else ``()``: always run."""
    ops = {"exp", "log"}
    if all(side[0] == "var" or ops_of(side) & ops for r in rules for side in (r.lhs, r.rhs)):
        return tuple(sorted(ops))
    return ()


def _build() -> Rules:
    rules = []
    rules_loaded = loaded_rules()
    for r in rules_loaded:
        for lhs, rhs in ((r.lhs, r.rhs), (r.rhs, r.lhs)):
            if lhs[0] == "var":
                continue
            built = _direction(lhs, rhs, r.positive, _guarded(r), exp_bound(r))
            if built is not None:
                rules.append(built)
    return Rules("generated", "synthesized exp/log rules (derivations/rules/generated.py) on "
                 "the factors of sum nodes, exp kept in float range", ruleset(*rules, name="generated"),
                 needs=(PROVENANCE, POSITIVITY, INTERVALS), ops=_ops(rules_loaded))


GENERATED = _build()
