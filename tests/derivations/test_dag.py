"""DAG-aware extraction (an ILP over the e-graph, ``derivations.dag``): a subterm read from
two places is paid once, so it can pick a program tree extraction does not."""
from __future__ import annotations

import pytest

from ir import Tensor, flops, ops, sub_scopes

from derivations import derive
from derivations.dag import dag_extract
from derivations.extract import _Beam


def program_flops(p) -> int:
    return sum(flops(s) for s in sub_scopes(p))


def shared_product():
    """``(A@B)@C * (A@B)@D``: the product ``T = A@B`` read twice. Each factor alone is cheaper
    reassociated (``A@(B@C)``: the thin C makes B@C cheap), which is what a tree prices; the
    DAG keeps T once and pays ``mkn + 2mnp`` instead of ``2(knp + mkp)``."""
    m, k, n, p = 64, 64, 64, 48
    a, b, c, d = (Tensor(x, s) for x, s in (("A", (m, k)), ("B", (k, n)), ("C", (n, p)),
                                             ("D", (n, p))))
    t = ops.mm(a, b)
    return ops.mul(ops.mm(t, c), ops.mm(t, d))


def test_the_ilp_keeps_a_shared_product_that_tree_extraction_recomputes():
    d = derive(shared_product())
    beam = _Beam(d.view, d.encoding, flops, width=6)
    tree = d.encoding.decode(beam.term(beam.run(root_width=10)[0]), d.encoding.root_order)
    term, _ = dag_extract(d.view, d.encoding, flops)
    dag = d.encoding.decode(term, d.encoding.root_order)
    assert term != beam.term(beam.run(root_width=10)[0])
    assert program_flops(dag) < program_flops(tree), (program_flops(dag), program_flops(tree))
    assert sum(1 for s in sub_scopes(dag) if s.summation) == 3  # T once, then T@C and T@D
    best = d.candidates(3, flops)[0]
    assert program_flops(best.program) == program_flops(dag) and best.verified is True


def test_without_a_solution_the_tree_extraction_stands(monkeypatch):
    import derivations.extract as extract
    monkeypatch.setattr(extract, "dag_extract", lambda *a, **k: None)
    d = derive(shared_product())
    cands = d.candidates(3, flops)
    assert d.dag_term is None and cands and all(c.verified is not False for c in cands)


@pytest.mark.parametrize("build", [
    lambda x: ops.transpose(ops.transpose(x, 0, 1), 0, 1),  # the root class reads itself
    lambda x: ops.mm(ops.mm(x, x), x),
    lambda x: ops.sum(ops.stack([x, ops.exp(x)]), 0),
], ids=["cycle", "chain", "stack"])
def test_the_ilp_pick_is_acyclic_and_equal_to_the_original(build):
    e = build(Tensor("x", (16, 16)))
    d = derive(e)
    term, nodes = dag_extract(d.view, d.encoding, flops)
    program = d.encoding.decode(term, d.encoding.root_order)
    from derivation_helpers import check_equiv
    check_equiv(program, e)
    assert len({n.cls for n in nodes}) == len(nodes)  # one form per class
