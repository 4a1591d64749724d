"""The command line never shows a traceback: every mistake is one error line (a parse error
adds its source excerpt and caret) and exit status 2; it starts without importing torch,
sympy or egglog; errors say what was meant."""
import io
import time

import pytest

from ollie import cli
from reliability_helpers import run_python

NESTED = "C[i,j] = " + "(" * 5000 + "A[i,j]" + ")" * 5000
LONG_SUM = "C[i,j] = " + " + ".join(["A[i,j]"] * 8000)
STATEMENTS = "; ".join(f"T{n}[i,j] = {'A' if n == 0 else f'T{n - 1}'}[i,j] * 2"
                       for n in range(300))


def run(capsys, *argv):
    start = time.perf_counter()
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err, time.perf_counter() - start


def one_error(err: str, command: str) -> str:
    """The error line; the rest may only be a source excerpt and its caret, each short."""
    lines = err.rstrip("\n").splitlines()
    assert lines and lines[0].startswith(f"ollie {command}: error: "), err[:500]
    assert "Traceback" not in err and len(lines) <= 3, err[:500]
    assert all(len(line) <= 200 for line in lines[1:]), [len(x) for x in lines]
    return lines[0]


@pytest.mark.parametrize("argv, says", [
    (["demo", "--repeat", "0"], "--repeat"),
    (["demo", "--budget-s", "0"], "--budget-s"),
    (["demo", "--budget-s", "nan"], "--budget-s"),
    (["demo", "--budget-s", "inf"], "--budget-s"),
    (["demo", "--scale", "0"], "--scale"),
    (["demo", "--scale", "-2"], "--scale"),
    (["bench", "--repeat", "0"], "--repeat"),
    (["bench", "--scale", "nan"], "--scale"),
    (["derive", "C[i]=A[i]", "--shape", "A=4", "--budget-s", "-1"], "--budget-s"),
    (["derive", "C[i]=A[i]", "--shape", "A=4", "-k", "0"], "-k"),
    (["tune", "--cases", "0"], "--cases"),
    (["derive", "C[i]=A[i]", "--shape", "A=99999999999999999999"], "int64"),
    (["derive", "C[i,j]=A[i,j]", "--shape", "A=4294967296,4294967296"], "int64"),
])
def test_bad_numbers_are_one_line_and_exit_2(capsys, argv, says):
    code, out, err, seconds = run(capsys, *argv)
    assert code == 2
    line = one_error(err, argv[0])
    assert says in line and len(err.splitlines()) == 1
    assert seconds < 5  # refused before any work


@pytest.mark.parametrize("text, says", [
    (NESTED, "nested more than 200 levels"),
    (LONG_SUM, "operations deep"),
    (STATEMENTS, "operations deep"),
    ("A: f32[99999999999999999999]\nC[i] = A[i]", "int64"),
])
def test_huge_or_deep_text_is_one_error_and_exit_2(capsys, text, says):
    code, out, err, seconds = run(capsys, "derive", text, "--shape", "A=4,4", "--budget-s", "1")
    assert code == 2
    assert says in one_error(err, "derive")
    assert seconds < 10


@pytest.mark.parametrize("expression, says", [
    ("(" * 5000 + "x" + ")" * 5000, "nested"),
    (" + ".join(["x"] * 8000), "nested"),
    ("x @@ w", "did you mean '@'"),
    ("F.rellu(x)", "did you mean 'relu'"),
])
def test_torch_text_errors_are_one_error_and_exit_2(capsys, expression, says):
    code, out, err, _ = run(capsys, "derive", "--torch", expression, "--shape", "x=4,4",
                            "--shape", "w=4,4")
    assert code == 2
    line = one_error(err, "derive")
    assert says in line and "invalid syntax: invalid syntax" not in err


@pytest.mark.skipif(not hasattr(__import__("os"), "getuid"), reason="POSIX permissions")
def test_tune_refuses_a_cache_folder_others_can_write(capsys, tmp_path):
    import os
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    code, out, err, _ = run(capsys, "tune", "--cases", "1", "--dir", str(shared))
    assert code == 2
    assert "writable by" in one_error(err, "tune") and len(err.splitlines()) == 1
    assert os.listdir(shared) == []


def test_a_misspelt_reduction_says_what_was_meant(capsys):
    code, out, err, _ = run(capsys, "derive", "C[i,j] = summ[k] A[i,k] * B[k,j]",
                            "--shape", "A=4,4", "--shape", "B=4,4")
    assert code == 2
    assert "unknown reduction 'summ' — did you mean 'sum'?" in one_error(err, "derive")


def test_the_repl_says_what_was_meant():
    from ollie.cli.repl import Repl
    out = io.StringIO()
    Repl(stdin=io.StringIO("X = tensr(3,4)\nderiv\nquit\n"), stdout=out).cmdloop()
    text = out.getvalue()
    assert "unknown command 'X'" not in text
    assert "unknown function 'tensr' — did you mean 'tensor'?" in text
    assert "did you mean 'derive'?" in text


IMPORTS = """
import sys, time
t0 = time.perf_counter()
from ollie.cli.main import build_parser
parser = build_parser()
for argv in (["demo"], ["derive", "C[i]=A[i]", "--shape", "A=4"], ["bench", "--scale", "0.1"],
             ["repl"], ["cache", "info"], ["tune", "--cases", "3"]):
    parser.parse_args(argv)
heavy = sorted(m for m in ("torch", "sympy", "egglog", "lightgbm", "numpy", "ir")
               if m in sys.modules)
print(heavy, round(time.perf_counter() - t0, 3))
"""


def test_argument_parsing_imports_nothing_heavy():
    r = run_python(IMPORTS, timeout=60)
    assert r.returncode == 0, r.stderr[-800:]
    heavy, seconds = r.stdout.rsplit(" ", 1)
    assert heavy == "[]", heavy
    assert float(seconds) < 0.5


def test_ollie_help_starts_well_under_a_second():
    r = run_python(None, ["--help"], module="ollie", timeout=60)
    assert r.returncode == 0 and "derive" in r.stdout
    best = min(run_python(None, ["--help"], module="ollie", timeout=60).seconds
               for _ in range(3))
    assert best < 1.0, best
