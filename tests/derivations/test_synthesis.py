"""Rule synthesis: terms and their meaning, exact values, enumeration, verification, pruning,
and the checked-in file being what the generator writes."""
from __future__ import annotations

import numpy as np
import pytest

from ir import evaluate
from ir.canonical import fingerprint as canonical_key

from derivations.rules import generated
from derivations.synthesis import elementary as el, exact
from derivations.synthesis.emit import generator_digest, math_text, rules_digest
from derivations.synthesis.enumerate import enumerate_terms, term_ops
from derivations.synthesis.exact_interp import Formal, run
from derivations.synthesis.fingerprint import evaluate as evaluate_term, fingerprint, \
    random_operands
from derivations.synthesis.lang import (
    Rule, canonical_rule, parse, parse_rule, rule_text, to_ir, to_text,
)
from derivations.synthesis.prune import derivable, prune
from derivations.synthesis.synthesize import DEFAULT_OPS, synthesize
from derivations.synthesis.verify import compare_exact, sizes_for, verify_rule


# -- the language ----------------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["exp(a + b) * T(A)", "a - (b - a)", "-(a + b) * 2",
                                  "sum(A * bcast(x))", "a + (b + c)", "a * -b", "diag(T(B))"])
def test_terms_print_as_they_parse(text):
    assert to_text(parse(text)) == text


def test_index_maps_are_reads_in_the_ir():
    assert str(to_ir(parse("sum(A * bcast(x))"), 3)) == "T0[i] = sum[k0] A[i,k0] * x[k0]"
    assert canonical_key(to_ir(parse("T(T(A))"), 3)) == canonical_key(to_ir(parse("A"), 3))


def _terms(size=4):
    return enumerate_terms(size, term_ops(DEFAULT_OPS)).terms


def test_term_values_agree_with_the_reference_interpreter():
    """The fingerprint's direct evaluation means what the term's ir scope means."""
    env = random_operands(11, positive=True)
    floats = {k: np.asarray(v, dtype=float) for k, v in env.items()}
    for t in _terms()[::7]:
        with np.errstate(all="ignore"):
            exact_values = evaluate_term(t, env)
            want = evaluate(to_ir(t, 3), floats)
        got = np.vectorize(lambda v: np.nan if v is exact.NAN else
                           float(v) if not isinstance(v, exact.X) else v.numeric(),
                           otypes=[float])(exact_values)
        finite = np.isfinite(want)  # the exact model counts log 0 = -inf as undefined too
        assert (np.isfinite(got) == finite).all(), to_text(t)
        assert np.allclose(got[finite], want[finite], rtol=1e-9), to_text(t)


def test_the_exact_interpreter_runs_the_reference_interpreter_exactly():
    e = to_ir(parse("sum(exp(A) * bcast(x)) + diag(A)"), 3)
    env = random_operands(5, positive=False)
    out = run(e, env, Formal())
    want = evaluate(e, {k: np.asarray(v, dtype=float) for k, v in env.items()})
    assert np.allclose([v.numeric() for v in out.flat], want.ravel())


# -- exact values ----------------------------------------------------------------------------------
def test_exp_and_log_normal_forms_are_exact():
    a, b = exact.var("a", ()), exact.var("b", ())
    assert el.exp(a + b) == el.exp(a) * el.exp(b)
    assert el.log(el.exp(a)) == a
    assert el.log(6) == el.log(2) + el.log(3) and el.exp(el.log(5)) == 5
    assert el.log(-2) is exact.NAN and el.log(0) is exact.NAN
    assert el.exp(el.log(a)) != a                      # defined only where a > 0
    with exact.assume_positive([a]):
        assert el.exp(el.log(a)) == a


# -- enumeration -----------------------------------------------------------------------------------
def test_enumeration_does_not_repeat_itself():
    en = enumerate_terms(3, term_ops(DEFAULT_OPS))
    keys = [canonical_key(to_ir(t, 3)) for t in en.terms]
    assert len(keys) == len(set(keys)) and en.duplicates > 0
    texts = {to_text(t) for t in en.terms}
    assert "T(T(A))" not in texts                      # index bookkeeping: it is A
    assert not ({"a + b", "b + a"} <= texts)           # commutativity


def test_fingerprints_propose_conditional_rules_only_on_positive_inputs():
    lhs, rhs = fingerprint(parse("log(a * b)")), fingerprint(parse("log(a) + log(b)"))
    assert lhs.positive == rhs.positive and lhs.mixed != rhs.mixed
    assert fingerprint(parse("exp(a + b)")).mixed == fingerprint(parse("exp(a) * exp(b)")).mixed


# -- verification ----------------------------------------------------------------------------------
@pytest.mark.parametrize("text, verdict", [
    ("exp(a + b) = exp(a) * exp(b)", ()),
    ("log(exp(a)) = a", ()),
    ("sum(A + B) = sum(A) + sum(B)", ()),
    ("sum(A * T(bcast(x))) = x * sum(A)", ()),
    ("sum(sum(T(A))) = sum(sum(A))", ()),
    ("log(a * b) = log(a) + log(b)", ("a",)),          # a > 0 suffices: b < 0 is NaN on both
    ("exp(log(a)) = a", ("a",)),
    ("a * 0 = 0", None),                               # a NaN input would not propagate
    ("a - a = 0", None),
    ("log(a) - log(a) = 0", None),
    ("sum(A) = diag(A)", None),                        # equal at n = 1 only
    ("log(sum(exp(x))) = sum(x)", None),
])
def test_the_verifier_proves_rules_and_finds_side_conditions(text, verdict):
    r = parse_rule(text)
    v = verify_rule(r.lhs, r.rhs)
    assert (v.positive if v else None) == verdict, v.reason


def test_small_extents_prove_every_extent():
    assert sizes_for(parse("sum(sum(A))"), parse("sum(sum(T(A)))")) == range(1, 5)
    v = verify_rule(parse("sum(A)"), parse("diag(A)"))
    assert not v and v.reason.startswith("n=2")


def test_verifying_ir_scopes_compares_nan_domains():
    lhs, rhs = to_ir(parse("exp(log(x))"), 3), to_ir(parse("x"), 3)
    assert compare_exact(lhs, rhs).kind == "domain"
    assert compare_exact(lhs, rhs, positive=("x",))


# -- pruning ---------------------------------------------------------------------------------------
def test_pruning_keeps_the_general_rule_only():
    rules = [parse_rule(t) for t in ("exp(a) * exp(a) = exp(a + a)",
                                     "exp(a) * exp(b) = exp(a + b)",
                                     "exp(A) * exp(T(bcast(y))) = exp(A + T(bcast(y)))")]
    kept = prune(rules)
    assert [rule_text(r) for r in kept] == ["exp(a) * exp(a) = exp(a + a)",
                                            "exp(a) * exp(b) = exp(a + b)"]


def test_a_side_condition_derives_only_where_positivity_is_known():
    conditional = parse_rule("exp(log(a)) = a  if a > 0")
    assert derivable([conditional], [conditional]) == [True]
    assert derivable([Rule(conditional.lhs, conditional.rhs)], [conditional]) == [False]
    assert derivable([parse_rule("exp(log(exp(b))) = exp(b)")], [conditional]) == [True]


def test_rules_are_canonical_up_to_renaming_operands():
    assert canonical_rule(parse_rule("exp(y) * exp(x) = exp(y + x)")) == \
        parse_rule("exp(a) * exp(b) = exp(a + b)")


# -- the whole pipeline and the checked-in file ---------------------------------------------------
def test_synthesis_at_size_3_is_derived_by_the_checked_in_rules():
    syn = synthesize(3)
    assert syn.enumerated > syn.pairs > len(syn.verified) >= len(syn.kept) > 0
    assert sum(syn.failed.values()) == syn.distinct - len(syn.verified)
    checked_in = [parse_rule(text) for text, _ in generated.RULES]
    assert all(derivable(syn.kept, checked_in))


def test_the_checked_in_file_is_what_the_generator_writes():
    """The generator's sources and the rule lines are those the file was written from:
    regenerate with ``ollie rules synthesize`` after changing derivations/synthesis."""
    assert generated.GENERATOR == generator_digest(), "derivations/synthesis changed: " \
        "regenerate derivations/rules/generated.py (ollie rules synthesize)"
    assert generated.RULES_DIGEST == rules_digest(generated.RULES), "generated.py was edited"
    for text, tag in generated.RULES:
        r = parse_rule(text)
        assert tag in ("new", "hand-written") and rule_text(r) == text


def test_rules_carry_their_math():
    assert math_text(parse_rule("a * sum(A) = sum(a * A)")) == "a · Σ_k A[i,k] = Σ_k (a · A[i,k])"
    assert math_text(parse_rule("exp(log(a)) = a  if a > 0")) == "exp(log(a)) = a  (a > 0)"
