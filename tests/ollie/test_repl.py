"""The REPL, driven by a script on a stream: declare, write, derive, show, run, recover."""
import io

from ollie.cli.repl import Repl


def session(*lines: str) -> str:
    out = io.StringIO()
    Repl(stdin=io.StringIO("\n".join(lines) + "\n"), stdout=out).cmdloop()
    return out.getvalue()


CHAIN = ["A = tensor(32, 64)", "B = tensor(64, 64)", "C = tensor(64, 4)",
         "T[i,j] = sum[k] A[i,k] * B[k,j]", "D[i,l] = sum[j] T[i,j] * C[j,l]"]


def test_declare_and_write_a_statement():
    out = session("A = tensor(8, 16)", "B = tensor(16, 4)", "C[i,j] = sum[k] A[i,k] * B[k,j]")
    assert "A: [8, 16]" in out
    assert "C: [8, 4]  matmul" in out


def test_derive_show_and_run():
    out = session(*CHAIN, "derive 2", "show 1", "show 1 latex", "run 1", "quit")
    assert "derived" in out and "(the original)" in out
    assert "  1  cost" in out
    assert "rule chain:" in out
    assert r"\sum" in out
    assert "candidate 1: max abs error" in out and "(ok)" in out


def test_run_checks_every_candidate():
    out = session(*CHAIN, "derive 2", "run")
    assert out.count("(ok)") >= 1 and "MISMATCH" not in out


def test_a_typo_does_not_end_the_session():
    out = session("A = tensor(4, 4)", "dervie", "C[i,j] = A[i,j] * * 2", "show 1",
                  "C[i,j] = A[i,j] * 2", "tensors")
    assert "unknown command 'dervie'" in out
    assert "C[i,j] = A[i,j] * * 2" in out and "^" in out  # the parse error, with a caret
    assert "no candidates yet" in out
    assert "C: [4, 4]  elementwise" in out  # still going after three mistakes
    assert "* C[i,j] = A[i,j] * 2" in out


def test_redefining_a_statement_replaces_it():
    out = session("A = tensor(4, 4)", "C[i,j] = A[i,j]", "C[i,j] = A[j,i] + 1", "tensors")
    assert "* C[i,j] = A[j,i] + 1" in out and "  C[i,j] = A[i,j]\n" not in out


def test_torch_command_makes_an_expression_current():
    out = session("x = tensor(2, 3)", "w = tensor(3, 5)", "torch torch.relu(x @ w)")
    assert "[2, 5]" in out and "elementwise" in out


def test_history_and_help():
    out = session("A = tensor(4, 4)", "history", "help")
    assert "1  A = tensor(4, 4)" in out
    assert "derive [budget_s]" in out
