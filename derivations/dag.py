"""DAG-aware extraction: an integer linear program over the e-graph (Tensat, Korch).

Tree extraction (:class:`derivations.extract._Beam`) prices a tree: a class read from two
places is paid twice, so it can prefer two separate recomputations over one shared scope.
A program is a DAG -- each distinct scope is computed once (``ir.sub_scopes``) -- and the
ILP prices it so:

* a 0/1 variable ``x_n`` per e-node (chosen or not), costing the node's own cost (a scope
  node's ``cost(scope)``, 0 for body terms): shared nodes are paid once;
* the root class picks a node, a chosen node picks a node in each child class, each class
  at most one (so the choice is a function and decodes to one program);
* acyclicity (e-graphs have cycles, programs do not): a level ``t_c`` per class with
  ``t_c >= t_d + 1`` whenever a chosen node of ``c`` has a child class ``d``.

It is solved with scipy's ``milp`` (HiGHS) under a time limit; without a solution in time
(or without scipy) it gives None and the tree extraction alone is used. A scope node's own
cost is taken on its term over the e-graph's representatives (the cost of a scope depends
on its own structure and its sources' shapes, not on how the sources are computed).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ir.nodes import Scope
from derivations.encode import Encoding
from derivations.index_pass import representatives
from derivations.term import SCOPE_OPS, Term
from derivations.view import ENode, View, node_term

try:  # imported with the module: the first import takes 0.4-0.8 s, a quarter of a 2 s
    from scipy.optimize import Bounds, LinearConstraint, milp  # budget if paid in derive()
    from scipy.sparse import coo_array
except ImportError:  # scipy is optional: the tree extraction stands alone
    milp = None

__all__ = ["dag_extract", "TIME_LIMIT"]

TIME_LIMIT = 1.0  # seconds HiGHS may take


def dag_extract(view: View, enc: Encoding, cost: Callable[[Scope], float],
                time_limit: float = TIME_LIMIT, known: dict | None = None
                ) -> tuple[Term, list[ENode]] | None:
    """The root's term of least DAG cost and the nodes it uses, or None (no solver, no
    solution in time). ``known``: own costs of scope nodes already computed (the tree
    extraction's), reused."""
    if milp is None:
        return None
    classes = _reachable(view)
    if view.root not in classes:
        return None
    reps = representatives(view)
    nodes = [n for c in classes for n in view.classes[c] if all(k in classes for k in n.kids())]
    index = {n: i for i, n in enumerate(nodes)}
    level = {c: len(nodes) + i for i, c in enumerate(classes)}
    n_vars = len(nodes) + len(classes)
    big = float(len(classes))
    weights = np.zeros(n_vars)
    known = known or {}
    for n in nodes:
        weights[index[n]] = known[n] if n in known else _own_cost(n, reps, enc, cost)
    rows, cols, vals, lower, upper = [], [], [], [], []

    def constraint(terms: list[tuple[int, float]], lo: float, hi: float) -> None:
        r = len(lower)
        for col, v in terms:
            rows.append(r)
            cols.append(col)
            vals.append(v)
        lower.append(lo)
        upper.append(hi)

    by_class: dict[str, list[int]] = {c: [] for c in classes}
    for n in nodes:
        by_class[n.cls].append(index[n])
    if not by_class[view.root]:
        return None
    constraint([(i, 1.0) for i in by_class[view.root]], 1.0, 1.0)       # the root is computed
    for c, members in by_class.items():
        if members:
            constraint([(i, 1.0) for i in members], 0.0, 1.0)            # one form per class
    for n in nodes:
        for d in dict.fromkeys(n.kids()):
            if d == n.cls:                                               # reads itself: never
                constraint([(index[n], 1.0)], 0.0, 0.0)
                continue
            constraint([(index[n], 1.0)] + [(i, -1.0) for i in by_class[d]],
                       -np.inf, 0.0)                                     # a child is computed
            constraint([(level[n.cls], 1.0), (level[d], -1.0), (index[n], -big)],
                       1.0 - big, np.inf)                                # t_c >= t_d + 1
    matrix = coo_array((vals, (rows, cols)), shape=(len(lower), n_vars)).tocsr()
    integrality = np.r_[np.ones(len(nodes)), np.zeros(len(classes))]
    bounds_lo = np.zeros(n_vars)
    bounds_hi = np.r_[np.ones(len(nodes)), np.full(len(classes), big)]
    result = milp(weights, integrality=integrality, bounds=Bounds(bounds_lo, bounds_hi),
                  constraints=LinearConstraint(matrix, lower, upper),
                  options={"time_limit": time_limit, "disp": False})
    if result.x is None:
        return None
    chosen: dict[str, ENode] = {}
    for c, members in by_class.items():
        picked = [i for i in members if result.x[i] > 0.5]
        if picked:
            chosen[c] = nodes[picked[0]]
    return _term(chosen, view.root), list(chosen.values())


def _reachable(view: View) -> list[str]:
    out, todo = [], [view.root]
    seen = {view.root}
    while todo:
        c = todo.pop()
        out.append(c)
        for n in view.classes.get(c, ()):
            for k in n.kids():
                if k not in seen and k in view.classes:
                    seen.add(k)
                    todo.append(k)
    return out


def _own_cost(node: ENode, reps: dict[str, Term], enc: Encoding, cost) -> float:
    if node.op not in SCOPE_OPS or not all(k in reps for k in node.kids()):
        return 0.0
    try:
        return float(cost(enc.decode(node_term(node, reps.__getitem__))))
    except Exception:  # a node that does not decode is priced out
        return 1e30


def _term(chosen: dict[str, ENode], cls: str, memo: dict | None = None) -> Term:
    memo = {} if memo is None else memo
    if cls not in memo:
        memo[cls] = node_term(chosen[cls], lambda k: _term(chosen, k, memo))
    return memo[cls]
