"""Sending terms to egglog: commands built as egglog's own command objects, scopes named once.

The index pass adds its results to the e-graph as ``union`` commands. Two costs used to
dominate a pass on a wide expression (a stack of 32 pieces: 4 s of a 2 s budget):

* **Text.** A command parsed from egglog text carries, in every node's source span, the
  whole text it was parsed from; egglog-python converts each span between Rust and Python,
  so a command costs the square of its size (a 1,800-node union: 40 ms to parse and run,
  the same union built here: under 10 ms). Commands are therefore built directly as
  ``egglog.bindings`` objects with an empty span (what egglog-python does for its own).
* **Repetition.** A union spells both sides in full, and 33 results of one wide scope
  repeat the same 32 sub-scopes 33 times. Every scope term sent, and every factor of one,
  is given a *slot*: ``(set (slot_scope 7) <term>)`` once, and ``(slot_scope 7)`` in every
  later command, of this pass or a later one. A slot is a row of a function table
  (:data:`derivations.lang.slot_scope`, ``slot_body``): egglog keeps its value canonical as
  classes merge, and the serialized e-graph's readers ignore it (``derivations.view``).

The expression being derived is added the same way (``root``), so its scopes have slots
from the start; terms the egglog rules make are spelled out the first time and slotted then.
(egglog-python's own expression layer is slow on big terms: registering a 128-piece cat
through it took 1.6 s.) ``snapshot``/``restore`` follow the e-graph's ``push``/``pop``.
"""
from __future__ import annotations

from egglog import EGraph
from egglog import bindings as b

from derivations.lang import OPS
from derivations.term import SCOPE_OPS, Term

__all__ = ["Sender", "egg_names"]

_SPAN = b.RustSpan("", 0, 0)
# Every SLOT_EVERY-th level of a deep body gets a slot too: a command object copies its
# arguments when it is built, so building a chain n deep in one piece costs n^2 / 2 copies.
SLOT_EVERY = 16
_SLOTS = {"slot_scope": "slot_scope", "slot_body": "slot_body"}


def egg_names(egraph: EGraph) -> dict[str, str]:
    """Short op name (as in ``Term``) -> egglog function name, plus ``made_by``, ``Iterator``
    and the slot tables (all must be declared: ``index_pass.declare``)."""
    from egglog.pretty import pretty_callable_ref  # egglog-python 13.2 internals
    state = egraph._state
    pretty = {pretty_callable_ref(state.__egg_decls__, ref): egg
              for egg, refs in state.egg_fn_to_callable_refs.items() for ref in refs}
    short = {**{k: v for k, v in OPS.items() if k not in ("root",)}, "Iterator": "Iterator",
             "Root": "Root", **_SLOTS}
    missing = [p for p in short.values() if p not in pretty]
    assert not missing, f"not declared in the e-graph: {missing} (call declare() first)"
    return {k: pretty[p] for k, p in short.items()}


def _call(name: str, args: list) -> b.Call:
    return b.Call(_SPAN, name, args)


def _str(x: str) -> b.Lit:
    return b.Lit(_SPAN, b.String(x))


def _strings(kind: str, xs) -> b.Call:
    """``(set-of ...)`` (sorted) or ``(vec-of ...)`` of strings, or the empty one."""
    if kind == "set":
        xs = sorted(xs)
    return _call(f"{kind}-of", [_str(x) for x in xs]) if xs else _call(f"{kind}-empty", [])


class Sender:
    """Builds the commands of a pass; remembers the slots of the terms it sent."""

    def __init__(self, names: dict[str, str]):
        self.names = names
        self.slots: dict[Term, int] = {}   # term -> its slot number (scopes and factors)
        self.next_slot = 0                 # never reused: a slot number names one term
        self._memo: dict[Term, object] = {}  # term -> its expression, within a pass
        self._heights: dict[Term, int] = {}
        self._out: list = []               # commands of the batch being built
        self._fresh: list[Term] = []       # terms slotted by those commands

    # -- the e-graph's push/pop -----------------------------------------------------------
    def snapshot(self) -> dict[Term, int]:
        return dict(self.slots)

    def restore(self, snap: dict[Term, int]) -> None:
        self.slots = dict(snap)
        self._memo.clear()

    def new_pass(self) -> None:
        """Expressions are remembered within a pass only (slots stay)."""
        self._memo.clear()

    # -- commands -------------------------------------------------------------------------
    def union(self, a: Term, b_: Term) -> None:
        self._out.append(b.ActionCommand(b.Union(_SPAN, self.expr(a), self.expr(b_))))

    def made_by(self, t: Term, chain: str) -> None:
        """Provenance of the sum node ``t``: the rule chain that made it."""
        key = [_strings("set", t.args[0]), _strings("set", t.args[1]), self._factors(t)]
        self._out.append(b.ActionCommand(b.Set(_SPAN, self.names["made_by"], key, _str(chain))))

    def iterator(self, name: str) -> None:
        self._out.append(b.ActionCommand(b.Expr_(_SPAN, _call(self.names["Iterator"],
                                                              [_str(name)]))))

    def root(self, t: Term) -> None:
        """Mark scope term ``t`` (added with it) as the expression being derived."""
        self._out.append(b.ActionCommand(b.Expr_(_SPAN, _call(self.names["Root"],
                                                              [self.expr(t)]))))

    def run(self, egraph: EGraph) -> None:
        """Run the commands built so far on ``egraph`` (an error leaves their slots unset)."""
        commands, fresh = self.take()
        try:
            egraph._state.egraph.run_program(*commands)
        except Exception:
            self.forget(fresh)
            raise

    def take(self) -> tuple[list, list[Term]]:
        """The commands built since the last take, and the terms slotted by them."""
        out, self._out = self._out, []
        fresh, self._fresh = self._fresh, []
        return out, fresh

    def forget(self, terms: list[Term]) -> None:
        """``terms``' slots were not set (their commands were not run): unslot them."""
        for t in terms:
            self.slots.pop(t, None)
        self._memo.clear()

    # -- expressions ----------------------------------------------------------------------
    def expr(self, t: Term):
        """The egglog expression of ``t``: its slot if it has one, else its node."""
        hit = self._memo.get(t)
        if hit is not None:
            return hit
        if t.op in SCOPE_OPS:
            out = self._slot(t, "slot_scope")
        elif t.op in ("bin", "un") and self._height(t) % SLOT_EVERY == 0:
            out = self._slot(t, "slot_body")  # a deep body is sent in pieces (see SLOT_EVERY)
        else:
            out = self._node(t)
        self._memo[t] = out
        return out

    def _height(self, t: Term) -> int:
        """Operations on the longest path down ``t`` to a read or a constant."""
        h = self._heights.get(t)
        if h is None:
            kids = [k for k in t.kids() if k.op in ("bin", "un")] if t.op in ("bin", "un") else []
            h = self._heights[t] = 1 + max(map(self._height, kids), default=0)
        return h

    def _slot(self, t: Term, table: str):
        """``(table k)`` for ``t``'s slot ``k``, set first if ``t`` has none yet."""
        k = self.slots.get(t)
        if k is None:
            node = self._node(t)  # its children first: their slots are set before it
            k = self.slots[t] = self.next_slot
            self.next_slot += 1
            self._out.append(b.ActionCommand(b.Set(_SPAN, self.names[table],
                                                   [b.Lit(_SPAN, b.Int(k))], node)))
            self._fresh.append(t)
        return _call(self.names[table], [b.Lit(_SPAN, b.Int(k))])

    def _factors(self, t: Term) -> b.Call:
        return _call("multiset-of", [self._factor(f) for f in t.args[2]])

    def _factor(self, f: Term):
        """A factor of a sum (or a reduction's body): slotted, as the node and its
        provenance both spell it."""
        hit = self._memo.get(f)
        if hit is None:
            hit = self._memo[f] = self._slot(f, "slot_body")
        return hit

    def _node(self, t: Term):
        op, a, n = t.op, t.args, self.names
        if op == "sum":
            args = [_strings("set", a[0]), _strings("set", a[1]), self._factors(t)]
        elif op == "reduce":
            args = [_str(a[0]), _strings("set", a[1]), _strings("set", a[2]), self._factor(a[3])]
        elif op == "tensor":
            args = [_str(a[0])]
        elif op == "scope":
            args = [self.expr(a[0]), _strings("vec", a[1])]
        elif op == "acc":
            args = [self.expr(a[0]), _strings("vec", a[1]), _strings("set", a[2])]
        elif op == "use":
            args = [self.expr(a[0])]
        elif op == "const":
            args = [b.Lit(_SPAN, b.Float(float(a[0])))]
        elif op == "bin":
            args = [_str(a[0]), self.expr(a[1]), self.expr(a[2])]
        elif op == "un":
            args = [_str(a[0]), self.expr(a[1])]
        else:
            raise AssertionError(f"unknown term op {op!r}")
        return _call(n[op], args)
