"""The generated rules in derivations: loaded as an egglog ruleset, behind an option, and
finding what the hand-written rules miss."""
from __future__ import annotations

from ir import flops, parse
from ir.nodes import UnOp, Unary, sub_scopes, walk

from derivations import derive
from derivations.rules import GENERATED_OPTION, default_rulesets, generated_enabled
from derivations.rules.algebra import ALGEBRA
from derivations.rules.generated import RULES
from derivations.rules.index import default_index_rules
from derivations.rules.synthesized import GENERATED, POSITIVITY, loaded_rules, rule_name
from derivations.synthesis.lang import is_pointwise, ops_of, rule_text

SUM_OF_EXP = "x: f32[64]\ny: f32[128]\nT[i] = sum[j] exp(tanh(x[i]) + tanh(y[j]))"


def _best(text: str, generated: bool):
    d = derive(parse(text), rulesets=default_rulesets(generated), index_rules=default_index_rules())
    return d.candidates(3, flops)[0], d


def test_generated_rules_move_a_sum_past_exp_where_the_hand_written_ones_cannot():
    """sum_j exp(u_i + v_j) = exp(u_i) * sum_j exp(v_j): exp(a+b) = exp(a) exp(b) splits the
    factor, then the hand-written ``split`` moves the sum inward (64*128 exps -> 64+128)."""
    without, _ = _best(SUM_OF_EXP, generated=False)
    best, d = _best(SUM_OF_EXP, generated=True)
    assert without.rule_chain == () and without.cost == flops(parse(SUM_OF_EXP))
    assert best.rule_chain == ("exp(a+b)->exp(a)*exp(b)", "split") and best.verified is True
    inner, outer = sub_scopes(best.program)
    assert inner.traversal == () and not outer.summation and best.cost < without.cost / 40
    assert d.rejected == []


def test_exp_rules_wait_for_proof_that_exp_stays_in_float_range():
    """exp(x + y) with inputs of unknown range: exp(x) alone may overflow where exp(x + y)
    does not (x = 100, y = -100), so the factor is not split."""
    best, d = _best("x: f32[64]\ny: f32[128]\nT[i] = sum[j] exp(x[i] + y[j])", generated=True)
    assert best.rule_chain == () and not any(n for k, n in d.report.firings.items() if "->" in k)


def test_a_side_condition_applies_only_where_positivity_is_proven():
    """exp(log a) = a needs a > 0: proven for a = exp(x), not for an input x."""
    best, _ = _best("x: f32[8]\nT[i] = exp(log(exp(x[i])))", generated=True)
    assert [n.op for n in walk(best.program.body) if isinstance(n, Unary)] == [UnOp.EXP]
    plain, _ = _best("x: f32[8]\nT[i] = exp(log(x[i]))", generated=True)
    assert len([n for n in walk(plain.program.body) if isinstance(n, Unary)]) == 2


def test_the_option_adds_the_generated_ruleset(monkeypatch):
    monkeypatch.setenv(GENERATED_OPTION, "1")
    assert generated_enabled() and default_rulesets() == ALGEBRA + (GENERATED,)
    monkeypatch.setenv(GENERATED_OPTION, "0")
    assert not generated_enabled() and default_rulesets() == ALGEBRA
    assert POSITIVITY in GENERATED.needs and POSITIVITY.analysis


def test_the_loaded_rules_are_the_new_exp_log_ones():
    loaded = loaded_rules()
    tags = dict(RULES)
    assert loaded and all(tags[rule_text(r)] == "new" for r in loaded)
    assert all(is_pointwise(r.lhs) and is_pointwise(r.rhs) for r in loaded)
    assert all((ops_of(r.lhs) | ops_of(r.rhs)) & {"exp", "log"} for r in loaded)


def test_rule_names_fit_in_a_rule_chain():
    for r in loaded_rules():
        name = rule_name(r.lhs, r.rhs, r.positive)
        assert " " not in name and "->" in name


def test_a_ruleset_with_ops_waits_until_the_egraph_has_one():
    """The schedule runs ``generated`` (ops exp, log) only once such a term exists: until
    then its rules could not match, and registering them would cost every derivation."""
    import dataclasses

    from egglog import MultiSet, Set, String, rule, ruleset, set_, var

    from derivations.lang import EBody, EScope, made_by

    out, sums, fs = var("o", Set[String]), var("s", Set[String]), var("f", MultiSet[EBody])
    always = ruleset(rule(EScope.sum(out, sums, fs), name="touch").then(
        set_(made_by(out, sums, fs)).to("")))
    probe = dataclasses.replace(GENERATED, name="probe", ruleset=always, needs=())
    plain = derive(parse("x: f32[8]\nT[i] = x[i] * 2"), rulesets=(probe,))
    with_exp = derive(parse("x: f32[8]\nT[i] = exp(x[i]) * 2"), rulesets=(probe,))
    assert "touch" not in plain.report.firings and with_exp.report.firings.get("touch")
