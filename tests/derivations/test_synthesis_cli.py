"""``ollie rules``: synthesize, list, verify."""
from __future__ import annotations

import ast

from ollie.cli.main import main


def test_synthesize_prints_a_rules_module(capsys):
    assert main(["rules", "synthesize", "--size", "3", "--out", "-"]) == 0
    out, err = capsys.readouterr()
    module = ast.parse(out)
    names = {t.id for node in module.body if isinstance(node, ast.Assign) for t in node.targets}
    assert {"SIZE", "OPS", "GENERATOR", "RULES_DIGEST", "RULES"} <= names
    assert "size 3:" in err and "candidate pairs" in err and "kept after pruning" in err


def test_check_fails_when_the_file_is_not_what_the_options_write(capsys):
    assert main(["rules", "synthesize", "--size", "2", "--check"]) == 1
    assert "differs" in capsys.readouterr().out


def test_unknown_operators_are_one_clear_error(capsys):
    assert main(["rules", "synthesize", "--size", "2", "--ops", "add,frobnicate"]) == 2
    assert "frobnicate" in capsys.readouterr().err


def test_verify_finds_a_side_condition_and_rejects_a_nan_dropping_rule(capsys):
    assert main(["rules", "verify", "log(a * b) = log(a) + log(b)"]) == 0
    assert "verified if a > 0" in capsys.readouterr().out
    assert main(["rules", "verify", "a * 0 = 0"]) == 1
    assert "NaN" in capsys.readouterr().out


def test_list_marks_the_loaded_rules(capsys):
    assert main(["rules", "list"]) == 0
    out = capsys.readouterr().out
    assert "* exp(a) * exp(b) = exp(a + b)" in out
