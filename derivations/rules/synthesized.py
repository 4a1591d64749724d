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
"""
from __future__ import annotations

from egglog import MultiSet, Set, String, eq, f64, relation, rule, ruleset, set_, union, var

from derivations.lang import EBody, EScope, made_by
from derivations.rules import Rules
from derivations.rules.analysis import PROVENANCE
from derivations.synthesis.lang import Rule, is_pointwise, ops_of, parse_rule, to_text

__all__ = ["Positive", "POSITIVITY", "GENERATED", "loaded_rules", "rule_name"]

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
                ops & {"exp", "log"} and not _has_zero(r):
            out.append(r)
    return out


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


def _direction(lhs: tuple, rhs: tuple, positive: tuple[str, ...]):
    """The egglog rule rewriting the factors ``lhs`` of a sum node into ``rhs``, or None."""
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
            built = _direction(lhs, rhs, r.positive)
            if built is not None:
                rules.append(built)
    return Rules("generated", "synthesized exp/log rules (derivations/rules/generated.py) on "
                 "the factors of sum nodes", ruleset(*rules, name="generated"),
                 needs=(PROVENANCE, POSITIVITY), ops=_ops(rules_loaded))


GENERATED = _build()
