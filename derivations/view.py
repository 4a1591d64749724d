"""The serialized e-graph as Python data: e-classes of ``ENode``s, plus provenance.

egglog's ``serialize`` gives every e-node with its e-class and children; primitives
(strings, floats, sets, vectors, multisets) come as nodes of their own. ``load`` keeps the
nodes of the language's sorts, with primitive arguments turned into Python values and
e-class arguments into :class:`Ref`s, in the shape of :class:`derivations.term.Term` args.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable

from egglog import EGraph

from derivations.lang import OPS
from derivations.term import Term

__all__ = ["Ref", "ENode", "View", "load"]

_SHORT = {v: k for k, v in OPS.items()}
_KIND = {"Set": frozenset, "Vec": tuple, "MultiSet": tuple}


@dataclass(frozen=True)
class Ref:
    """An e-class argument."""

    cls: str


@dataclass(frozen=True)
class ENode:
    op: str          # short op name, as in Term
    args: tuple      # Python values; Ref for e-classes; sorted tuples of Ref for multisets
    cls: str

    def kids(self) -> tuple[str, ...]:
        """E-classes of the children, in Term.kids() order."""
        out: list[str] = []
        for a in self.args:
            if isinstance(a, Ref):
                out.append(a.cls)
            elif isinstance(a, tuple) and a and isinstance(a[0], Ref):
                out.extend(r.cls for r in a)
        return tuple(out)


@dataclass
class View:
    classes: dict[str, list[ENode]] = field(default_factory=dict)
    root: str | None = None
    made_by: dict[tuple, str] = field(default_factory=dict)   # sum-node args -> rule chain

    def chain(self, node: ENode) -> tuple[str, ...] | None:
        """Rules that created ``node`` (``()`` for encoded nodes, None if unknown)."""
        if node.op != "sum":
            return None
        c = self.made_by.get(node.args)
        return None if c is None else tuple(c.split())


def load(egraph: EGraph, root_relation: str) -> View:
    """Read ``egraph``; the root is the class of the single ``root_relation`` row."""
    data = json.loads(egraph._serialize(split_primitive_outputs=False).to_json())
    nodes, types = data["nodes"], {c: d["type"] for c, d in data["class_data"].items()}
    memo: dict[str, object] = {}

    def value(nid: str):
        if nid in memo:
            return memo[nid]
        n = nodes[nid]
        tp = types[n["eclass"]]
        if tp == "String":
            v = json.loads(n["op"])
        elif tp == "f64":
            v = float(n["op"])
        elif tp == "i64":
            v = int(n["op"])
        elif tp.startswith("egglog.builtins."):
            kind = _KIND[tp[len("egglog.builtins."):].split("[", 1)[0]]
            items = [value(c) for c in n["children"]]
            if tp.startswith("egglog.builtins.MultiSet"):
                items.sort(key=lambda r: r.cls if isinstance(r, Ref) else repr(r))
            v = kind(items)
        else:
            v = Ref(n["eclass"])
        memo[nid] = v
        return v

    view = View()
    string_of: dict[str, str] = {}
    for nid, n in nodes.items():
        if types[n["eclass"]] == "String" and not n["children"]:
            string_of.setdefault(n["eclass"], json.loads(n["op"]))
    for nid, n in nodes.items():
        op = n["op"]
        if op == root_relation:
            view.root = nodes[n["children"][0]]["eclass"]
        elif op == OPS["made_by"]:
            key = tuple(value(c) for c in n["children"])
            if n["eclass"] in string_of:
                view.made_by[key] = string_of[n["eclass"]]
        elif op in _SHORT and not n.get("subsumed"):
            args = tuple(value(c) for c in n["children"])
            view.classes.setdefault(n["eclass"], []).append(ENode(_SHORT[op], args, n["eclass"]))
    return view


def first_term(view: View, cls: str, _active: frozenset = frozenset()) -> Term:
    """The term built from the first node of every class (an e-graph no rule has run on)."""
    assert cls not in _active, f"class {cls} contains itself: use extraction, not first_term"
    return node_term(view.classes[cls][0], lambda k: first_term(view, k, _active | {cls}))


def node_term(node, child: Callable[[str], Term]) -> Term:
    """The term of e-node ``node`` with ``child(class)`` as the term of each child class."""
    kids = iter([child(k) for k in node.kids()])

    def fill(a):
        if isinstance(a, Ref):
            return next(kids)
        if isinstance(a, tuple) and a and isinstance(a[0], Ref):
            return tuple(next(kids) for _ in a)
        return a

    return Term(node.op, tuple(fill(a) for a in node.args))
