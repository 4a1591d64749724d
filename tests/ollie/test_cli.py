"""The ``ollie`` command: derive (text, --json, --torch), errors, demo; and its helpers."""
import json

import pytest

import ir
from ir.patterns import CLASSES
from ollie import cli
from ollie.cli.classify import classify, operators
from ollie.cli.torch_text import TorchExprError, build

CHAIN = "T[i,j] = sum[k] A[i,k] * B[k,j]; D[i,l] = sum[j] T[i,j] * C[j,l]"
CHAIN_SHAPES = ["--shape", "A=32,64", "--shape", "B=64,64", "--shape", "C=64,4"]


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def derive_json(capsys, *argv):
    code, out, err = run(capsys, "derive", *argv, "--json", "--budget-s", "2")
    assert code == 0, err
    return json.loads(out)


# -- derive -------------------------------------------------------------------------------
def test_derive_prints_candidates_with_operators_and_rule_chain(capsys):
    code, out, err = run(capsys, "derive", "C[i,j] = sum[k] A[i,k] * B[k,j]",
                         "--shape", "A=8,16", "--shape", "B=16,4", "--budget-s", "1")
    assert code == 0, err
    assert "C[i,j] = sum[k] A[i,k] * B[k,j]" in out
    assert "#1  cost" in out and "rule chain:" in out and "operators: matmul" in out
    assert "e-graph:" in out


def test_derive_json_has_the_documented_fields(capsys):
    result = derive_json(capsys, CHAIN, *CHAIN_SHAPES)
    assert set(result) >= {"expression", "candidates", "egraph", "seconds"}
    assert result["candidates"], "at least the original form comes back"
    for c in result["candidates"]:
        assert set(c) >= {"program", "operators", "rule_chain", "cost"}
        assert isinstance(c["rule_chain"], list) and isinstance(c["cost"], float)
        assert all(op in CLASSES for op in c["operators"])  # what each scope instantiates
    costs = [c["cost"] for c in result["candidates"]]
    assert costs == sorted(costs)


def test_derive_json_candidates_are_equivalent_programs(capsys):
    result = derive_json(capsys, CHAIN, *CHAIN_SHAPES)
    shapes = {"A": (32, 64), "B": (64, 64), "C": (64, 4)}
    original = ir.parse(CHAIN.replace(";", "\n"), tensors=shapes)
    for c in result["candidates"]:
        assert ir.compare(original, ir.parse(c["program"], tensors=shapes)).ok, c["program"]


def test_derive_finds_the_cheaper_matmul_order(capsys):
    result = derive_json(capsys, CHAIN, *CHAIN_SHAPES)
    assert result["candidates"][0]["cost"] < result["cost"]


def test_derive_torch_expression(capsys):
    result = derive_json(capsys, "--torch", "F.conv_transpose2d(x, w, stride=2, padding=1)",
                         "--shape", "x=1,4,5,5", "--shape", "w=4,2,4,4")
    assert "conv_transpose2d" in result["expression"]
    assert result["candidates"]


# -- user errors: exit 2, one message, no traceback ------------------------------------------
@pytest.mark.parametrize("argv, message", [
    (["derive", "C[i,j] = sum[k] A[i,k] * Q[k,j]", "--shape", "A=4,4"], "unknown tensor"),
    (["derive", "C[i,j] = sum[k] A[i,k] * B[k,j]", "--shape", "A=4,x"], "must be integers"),
    (["derive", "C[i,j] = A[i,j]", "--shape", "A"], "NAME=d0,d1"),
    (["derive", "--torch", "F.nope(x)", "--shape", "x=3,4"], "unknown function F.nope"),
    (["derive", "--torch", "x @ x", "--shape", "x=3,4"], "must have same reduction dim"),
    (["derive", "--shape", "x=3,4"], "no expression given"),
    (["bench", "--cases", "nope"], "unknown case"),
])
def test_user_errors_exit_2_with_a_message(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert message in err
    assert "Traceback" not in err + out


def test_parse_error_shows_a_caret(capsys):
    code, _, err = run(capsys, "derive", "C[i,j] = sum[k] A[i,k] * * B[k,j]",
                       "--shape", "A=4,4", "--shape", "B=4,4")
    assert code == 2
    assert "C[i,j] = sum[k] A[i,k] * * B[k,j]" in err and "^" in err


# -- the restricted torch-expression evaluator ------------------------------------------------
def test_torch_expression_methods_and_operators():
    e = build("torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ v",
              {"q": (2, 8, 4), "k": (2, 8, 4), "v": (2, 8, 4)})
    assert e.shape == (2, 8, 4)
    assert build("(x @ w).sum(0)", {"x": (6, 5), "w": (5, 3)}).shape == (3,)
    assert build("x.unfold(1, 3, 1)", {"x": (2, 7)}).shape == (2, 5, 3)
    assert build("x[1:, None, 0] ** 2", {"x": (3, 4)}).shape == (2, 1)
    assert build("torch.trace(a @ a.T)", {"a": (3, 4)}).shape == ()


@pytest.mark.parametrize("text", ['__import__("os")', "x.__class__", "(lambda: 1)()",
                                  "open('f')", "torch.save(x, 'f')", "x.add_(1)",
                                  "torch.manual_seed(0)"])
def test_torch_expression_refuses_arbitrary_code(text):
    with pytest.raises(TorchExprError):
        build(text, {"x": (3, 4)})


# -- operator classification ------------------------------------------------------------------
@pytest.mark.parametrize("text, kind", [
    ("C[i,j] = sum[k] A[i,k] * B[k,j]", "matmul"),
    ("C[b,i,j] = sum[k] X[b,i,k] * X[b,k,j]", "matmul"),
    ("C[i,j] = A[i,j] * B[i,j] + 1", "elementwise"),
    ("C[j,i] = A[i,j]", "elementwise"),
    ("C[i,j] = A[i,j+1] where j in 0:3", "gather"),
    ("C[i] = sum[j] A[i,j]", "reduction"),
    ("C[i] = max[j] A[i,j]", "reduction"),
    ("C[i,j] = sum[k,l] A[i,k] * B[k,l] * B[l,j]", "contraction"),
    ("C[i,j] = sum[r] A[i,j+r] * B[r,j] where i in 0:4, j in 0:2", "contraction"),
])
def test_classify(text, kind):
    shapes = {"A": (4, 4), "B": (4, 4), "X": (2, 4, 4)}
    assert classify(ir.parse(text, tensors=shapes)) == kind


def test_operators_lists_every_scope_in_program_order():
    e = ir.parse(CHAIN.replace(";", "\n"), tensors={"A": (4, 5), "B": (5, 5), "C": (5, 2)})
    assert operators(e) == ["matmul", "matmul"]


# -- demo -------------------------------------------------------------------------------------
def test_demo_explains_checks_and_times(capsys):
    code, out, err = run(capsys, "demo", "--scale", "0.125", "--repeat", "3")
    assert code == 0, err
    for text in ("captured:", "rule chain", "derived:", "decision:", "max relative error",
                 "over torch.compile"):
        assert text in out


def test_gpu_suite_without_cuda_says_why(capsys):
    import torch
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    assert cli.main(["bench", "--suite", "gpu"]) == 2
    assert "needs a CUDA device" in capsys.readouterr().err


def test_unknown_bench_case_is_a_usage_error(capsys):
    assert cli.main(["bench", "--cases", "no_such_case"]) == 2
    assert "unknown case" in capsys.readouterr().err
