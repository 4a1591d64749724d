"""``ollie repl``: declare tensors, write expressions, derive, inspect and check candidates.

    ollie> A = tensor(512, 1024)
    ollie> B = tensor(1024, 1024)
    ollie> C = tensor(1024, 16)
    ollie> T[i,j] = sum[k] A[i,k] * B[k,j]
    ollie> D[i,l] = sum[j] T[i,j] * C[j,l]
    ollie> derive
    ollie> show 1
    ollie> run 1

Statements accumulate into one program (later ones may read earlier ones by name); the last
one entered is *current*. Mistakes print one message (parse errors with a caret) and the
session goes on. ``Repl(stdin=..., stdout=...)`` runs a scripted session, for tests.
"""
from __future__ import annotations

import cmd
import math
import os
import re
import sys

import ir
from ir.errors import IRError, ParseError, did_you_mean
from ollie.cli.args import INT64_MAX
from ollie.cli.classify import describe
from ollie.cli.derive import (
    cost_unit, derive_candidates, egraph_summary, format_cost, relative, report_dict,
)
from ollie.cli.torch_text import TorchExprError, build as build_torch

_TENSOR = re.compile(r"^\s*([A-Za-z_]\w*)\s*=\s*tensor\s*\((.*)\)\s*$")
_CALL = re.compile(r"^\s*([A-Za-z_]\w*)\s*=\s*([A-Za-z_][\w.]*)\s*\(")
_STATEMENT = re.compile(r"^\s*([A-Za-z_]\w*)\s*\[")

HELP = """\
commands:
  A = tensor(512, 1024)       declare an input tensor
  C[i,j] = sum[k] A[i,k] * B[k,j]
                              add a statement to the program; it becomes current
  torch EXPR                  make a torch expression current, e.g. torch F.conv2d(x, w)
  derive [budget_s]           derive equivalent forms of the current expression
  show N [latex]              candidate N (0: the original) with its rule chain
  run [N]                     check candidate N (default: all) against the original
  tensors                     declared tensors and statements
  history                     lines entered so far
  clear                       forget statements and candidates (tensors stay)
  help, quit"""


class ReplError(Exception):
    """A mistake in a REPL command: printed, and the session continues."""


class Repl(cmd.Cmd):
    DEFAULT_HISTORY = os.path.join(os.path.expanduser("~"), ".ollie_history")
    intro = ("Ollie REPL. Declare tensors (A = tensor(512, 1024)), write a statement "
             "(C[i,j] = sum[k] A[i,k] * B[k,j]), then `derive`. Type `help` for commands.")
    prompt = "ollie> "

    def __init__(self, stdin=None, stdout=None, history_file: str | None = None,
                 budget_s: float = 3.0, nodes: int = 20_000, k: int = 5):
        super().__init__(stdin=stdin, stdout=stdout)
        # scripted (a stream, or piped input): show each line after its prompt
        self.echo = stdin is not None or not sys.stdin.isatty()
        if stdin is not None:
            self.use_rawinput = False  # read lines from the stream, not input()
        self.history_file = history_file
        self.budget_s, self.nodes, self.k = budget_s, nodes, k
        self.tensors: dict[str, ir.Tensor] = {}
        self.statements: dict[str, str] = {}  # name -> statement text, program order
        self.current: ir.Scope | None = None
        self.candidates: list = []
        self.lines: list[str] = []

    # -- plumbing ------------------------------------------------------------------------
    def say(self, text: str = "") -> None:
        self.stdout.write(text + "\n")

    def preloop(self):
        if self.history_file and self.use_rawinput:
            try:
                import readline
                if os.path.exists(self.history_file):
                    readline.read_history_file(self.history_file)
            except (ImportError, OSError):
                pass

    def postloop(self):
        if self.history_file and self.use_rawinput:
            try:
                import readline
                readline.write_history_file(self.history_file)
            except (ImportError, OSError):
                pass

    def cmdloop(self, intro=None):
        while True:
            try:
                return super().cmdloop(intro)
            except KeyboardInterrupt:  # ^C abandons the line, not the session
                self.say("^C (type quit to leave)")
                intro = ""

    def precmd(self, line: str) -> str:
        if self.echo:
            self.say(line if line != "EOF" else "")
        if line.strip() and line != "EOF":
            self.lines.append(line.rstrip("\n"))
        return line

    def onecmd(self, line: str):
        try:
            return super().onecmd(line)
        except ParseError as e:
            shown, caret = e.excerpt()
            self.say(f"error: {e.message}\n  {shown}\n  {' ' * (caret - 1)}^")
        except (IRError, ReplError, TorchExprError) as e:
            self.say(f"error: {e}")
        except Exception as e:  # an internal failure: report it, keep the session
            text = str(e).strip().splitlines()
            self.say(f"error: {type(e).__name__}: {text[0][:300] if text else ''}")
        return False

    def emptyline(self):
        return False  # cmd's default repeats the last command

    # -- declarations and statements -------------------------------------------------------
    def default(self, line: str):
        m = _TENSOR.match(line)
        if m:
            return self._declare(m.group(1), m.group(2))
        m = _STATEMENT.match(line)
        if m and "=" in line:
            return self._statement(m.group(1), line.strip())
        m = _CALL.match(line)
        if m:  # `X = tensr(3, 4)`: a declaration with a misspelt function
            raise ReplError(f"unknown function {m.group(2)!r}"
                            f"{did_you_mean(m.group(2), ['tensor'])} (declare a tensor like "
                            f"{m.group(1)} = tensor(3, 4); a statement looks like "
                            f"{m.group(1)}[i,j] = A[i,j] * 2)")
        word = line.split()[0] if line.split() else line
        if "=" in line:
            raise ReplError("not a declaration or a statement: declare a tensor like "
                            "A = tensor(3, 4); a statement looks like "
                            "C[i,j] = sum[k] A[i,k] * B[k,j]")
        commands = [n[3:] for n in self.get_names() if n.startswith("do_") and n != "do_EOF"]
        raise ReplError(f"unknown command {word!r}{did_you_mean(word, commands)} (type help); "
                        "a statement looks like C[i,j] = sum[k] A[i,k] * B[k,j]")

    def _declare(self, name: str, dims: str):
        if name in self.statements:
            raise ReplError(f"{name!r} is already a statement")
        try:
            shape = tuple(int(d) for d in dims.replace(" ", "").split(",") if d)
        except ValueError:
            raise ReplError(f"tensor(...) takes integer sizes, got ({dims})") from None
        if any(d < 0 for d in shape):
            raise ReplError(f"sizes must be >= 0, got ({dims})")
        if any(d > INT64_MAX for d in shape) or math.prod(shape) > INT64_MAX:
            raise ReplError(f"the shape ({dims}) does not fit in int64")
        self.tensors[name] = ir.Tensor(name, shape)
        if self.statements:  # re-check the program against the new shape
            self._reparse(self.statements, next(reversed(self.statements)))
        self.say(f"{name}: {list(shape)}")

    def _statement(self, name: str, text: str):
        if name in self.tensors:
            raise ReplError(f"{name!r} is an input tensor; pick another statement name")
        statements = dict(self.statements)
        statements[name] = text  # a redefinition keeps its place in the program
        self._reparse(statements, name)
        self.say(f"{name}: {list(self.current.shape)}  {describe(self.current)}; "
                 f"{self._cost(self.current)}")

    def _reparse(self, statements: dict[str, str], name: str):
        program = ir.parse_all("\n".join(statements.values()), tensors=self.tensors)
        scope = program[name]
        ir.check(scope)
        self.statements, self.current, self.candidates = statements, scope, []

    def do_torch(self, arg: str):
        """torch EXPR: make a torch expression over the declared tensors current."""
        if not arg.strip():
            raise ReplError("usage: torch F.conv2d(x, w, padding=1)")
        self.current, self.candidates = build_torch(arg, self.tensors), []
        ir.check(self.current)
        self.say(ir.to_text(self.current))
        self.say(f"{list(self.current.shape)}  {describe(self.current)}; "
                 f"{self._cost(self.current)}")

    def _cost(self, program) -> str:
        """``cost est. 12.3 µs``: the ranking cost, in the unit ``ollie derive`` shows."""
        from ollie import cost as cost_model
        cost = cost_model.default()
        return f"cost {format_cost(ir.program_cost(program, cost), cost_unit(cost))}"

    # -- derivation ----------------------------------------------------------------------
    def _need_current(self) -> ir.Scope:
        if self.current is None:
            raise ReplError("no current expression: write a statement first, e.g. "
                            "C[i,j] = sum[k] A[i,k] * B[k,j]")
        return self.current

    def do_derive(self, arg: str):
        """derive [budget_s]: derive equivalent forms of the current expression."""
        expr = self._need_current()
        budget = self.budget_s
        if arg.strip():
            try:
                budget = float(arg)
            except ValueError:
                raise ReplError(f"derive takes a time budget in seconds, got {arg!r}") from None
            if not math.isfinite(budget) or budget <= 0:
                raise ReplError(f"the time budget must be a finite number > 0, got {arg!r}")
        cands, report, seconds, cost = derive_candidates(expr, budget, self.nodes, self.k)
        cands = [c for c in cands if c.rule_chain]  # the original is listed as 0 already
        self.candidates = cands
        base, unit = ir.program_cost(expr, cost), cost_unit(cost)
        self.say(f"derived {len(cands)} candidate(s) in {seconds:.2f} s "
                 f"(e-graph: {egraph_summary(report_dict(report))})")
        self.say(f"  0  cost {format_cost(base, unit):<16} {describe(expr)}  (the original)")
        for n, c in enumerate(cands, 1):
            note = relative(c.cost, base)
            self.say(f"  {n}  cost {format_cost(c.cost, unit):<16} {describe(c.program)}  "
                     f"({note})")

    def _candidate(self, text: str):
        if not self.candidates:
            raise ReplError("no candidates yet: run `derive` first")
        try:
            n = int(text)
        except ValueError:
            raise ReplError(f"expected a candidate number, got {text!r}") from None
        if n == 0:
            return n, None
        if not 1 <= n <= len(self.candidates):
            raise ReplError(f"no candidate {n}: choose 0..{len(self.candidates)}")
        return n, self.candidates[n - 1]

    def do_show(self, arg: str):
        """show N [latex]: candidate N (0 is the original) with its rule chain."""
        words = arg.split()
        if not words or len(words) > 2 or (len(words) == 2 and words[1] != "latex"):
            raise ReplError("usage: show N [latex]")
        n, cand = self._candidate(words[0])
        program = ir.readable(self.current if cand is None else cand.program)
        if len(words) == 2:
            self.say(ir.to_latex(program))
            return
        self.say(ir.to_text(program))
        self.say(f"  operators: {describe(program)}")
        if cand is not None:
            self.say(f"  rule chain: {' → '.join(cand.rule_chain) or '(none)'}")
            from ollie import cost as cost_model
            self.say(f"  cost: {format_cost(cand.cost, cost_unit(cost_model.default()))}")

    def do_run(self, arg: str):
        """run [N]: evaluate candidate N (default: every one) against the original."""
        expr = self._need_current()
        if arg.strip():
            picked = [self._candidate(arg.strip())]
        elif self.candidates:
            picked = list(enumerate(self.candidates, 1))
        else:
            raise ReplError("no candidates yet: run `derive` first")
        for n, cand in picked:
            program = expr if cand is None else cand.program
            result = ir.compare(expr, program)
            verdict = "ok" if result.ok else f"MISMATCH: {result.reason}"
            self.say(f"candidate {n}: max abs error {result.max_abs_error:.3g} ({verdict})")

    # -- session -------------------------------------------------------------------------
    def do_tensors(self, arg: str):
        """tensors: the declared tensors and the statements of the program."""
        for t in self.tensors.values():
            self.say(f"{t.name}: {list(t.shape)} {t.dtype}")
        for name, text in self.statements.items():
            self.say(("* " if self.current is not None and self.current.name == name else "  ")
                     + text)
        if not self.tensors and not self.statements:
            self.say("nothing declared yet: A = tensor(512, 1024)")

    def do_history(self, arg: str):
        """history: the lines entered in this session."""
        for n, line in enumerate(self.lines, 1):
            self.say(f"{n:4d}  {line}")

    def do_clear(self, arg: str):
        """clear: forget the statements and candidates (tensors stay)."""
        self.statements, self.current, self.candidates = {}, None, []

    def do_help(self, arg: str):
        """help: list the commands."""
        if arg.strip() and getattr(self, f"do_{arg.strip()}", None):
            self.say(getattr(self, f"do_{arg.strip()}").__doc__ or HELP)
        else:
            self.say(HELP)

    def do_quit(self, arg: str):
        """quit: leave the REPL."""
        return True

    do_exit = do_quit

    def do_EOF(self, arg: str):
        if not self.echo:
            self.say()
        return True


def main(argv: list[str] | None = None) -> int:
    Repl(history_file=Repl.DEFAULT_HISTORY).cmdloop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
