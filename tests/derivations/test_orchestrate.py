"""Korch's binary program over candidate kernels (``derivations.orchestrate``)."""
from derivations.orchestrate import Kernel, orchestrate


def shared_value(recompute_cost: float, write_cost: float) -> list[Kernel]:
    """``v`` read by the kernels of ``a`` and ``b``: each computes ``v`` itself (reading
    ``x``) or reads it from memory, where ``v``'s own kernel wrote it."""
    return [Kernel("v", frozenset({"x"}), write_cost),
            Kernel("a", frozenset({"x"}), recompute_cost), Kernel("a", frozenset({"v"}), 1.0),
            Kernel("b", frozenset({"x"}), recompute_cost), Kernel("b", frozenset({"v"}), 1.0)]


def test_a_value_costly_to_recompute_is_written_once_and_read_by_both():
    chosen = orchestrate(shared_value(recompute_cost=5.0, write_cost=2.0), {"a", "b"})
    assert {(k.root, k.reads) for k in chosen} == {
        ("v", frozenset({"x"})), ("a", frozenset({"v"})), ("b", frozenset({"v"}))}


def test_a_value_cheap_to_recompute_is_computed_in_each_reader_and_never_written():
    chosen = orchestrate(shared_value(recompute_cost=1.5, write_cost=2.0), {"a", "b"})
    assert {(k.root, k.reads) for k in chosen} == {
        ("a", frozenset({"x"})), ("b", frozenset({"x"}))}


def test_a_kernel_may_recompute_a_value_another_reads_from_memory():
    kernels = shared_value(recompute_cost=5.0, write_cost=2.0)
    kernels.append(Kernel("c", frozenset({"x"}), 0.5))  # (recomputing is cheaper for c)
    kernels.append(Kernel("c", frozenset({"v"}), 1.0))
    chosen = orchestrate(kernels, {"a", "b", "c"})
    assert ("c", frozenset({"x"})) in {(k.root, k.reads) for k in chosen}
    assert "v" in {k.root for k in chosen}


def test_nothing_required_chooses_nothing():
    assert orchestrate(shared_value(1.0, 1.0), set()) == []
