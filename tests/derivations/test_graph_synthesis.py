"""The generator over graph operators (derivations.synthesis.graph) and its checked-in file."""
import numpy as np
import pytest

from derivations.rules import graph_generated
from derivations.synthesis import graph
from derivations.synthesis.graph_terms import size
from ir.interpreter import evaluate


def rule(text: str) -> graph.GraphRule:
    lhs, rhs = (graph.parse(side) for side in text.split("="))
    return graph.GraphRule(lhs, rhs)


@pytest.fixture(scope="module")
def synthesis():
    return graph.synthesize(3)


def test_terms_print_as_they_parse():
    for text in ["mm(cat1(X, Y), cat0(U, V))", "T(add(U, W))", "X", "head0(cat0(X, Z))",
                 "scale(mul(X, Z))"]:
        assert graph.to_text(graph.parse(text)) == text
    for bad in ["mm(X)", "mm(X, Y)", "cat0(X, Y)", "foo(X, U)", "mm(X, U", "head0(X)",
                "tail1(cat0(X, Z))", "mul(X, U)", "scale(X, Z)"]:
        with pytest.raises(ValueError):
            graph.parse(bad)


def test_terms_mean_what_numpy_computes():
    sizes = {"m": 2, "k": 3, "n": 4, "p": 5}
    t = graph.parse("add(mm(X, U), T(mm(T(V), T(Y))))")
    rng = np.random.default_rng(1)
    values = {v: rng.standard_normal(tuple(sizes[s] for s in graph.VARS[v]))
              for v in ("X", "U", "V", "Y")}
    expected = values["X"] @ values["U"] + (values["V"].T @ values["Y"].T).T
    got = evaluate(graph.to_ir(t, sizes), {k: v for k, v in values.items()})
    np.testing.assert_allclose(got, expected, rtol=1e-12)


@pytest.mark.parametrize("text", [
    "add(mm(X, U), mm(Y, V)) = mm(cat1(X, Y), cat0(U, V))",    # TASO's enlarge-and-concat
    "cat1(mm(X, U), mm(X, W)) = mm(X, cat1(U, W))",           # shared left operand
    "cat0(T(U), T(W)) = T(cat1(U, W))",
])
def test_true_rules_are_proven_at_their_most_general_sizes(text):
    proven, why = graph.proven(rule(text))
    assert proven is not None, why
    dims = proven.dims
    if text.startswith("cat1(mm"):  # W and U need not be as wide as each other
        assert dims["U"][1] != dims["W"][1] and dims["U"][0] == dims["W"][0]


@pytest.mark.parametrize("text", [
    "add(mm(X, U), mm(Z, W)) = mm(cat1(X, Z), cat0(W, U))",   # pieces paired wrongly
    "cat0(mm(X, U), mm(Z, U)) = mm(cat0(Z, X), U)",
    "mm(X, add(U, W)) = add(mm(X, U), mm(X, U))",
])
def test_false_rules_are_not_proven(text):
    proven, why = graph.proven(rule(text))
    assert proven is None and why


def test_a_rule_that_holds_only_at_some_sizes_is_caught_by_the_proof_sizes():
    # a 1×1 matrix is its own transpose; a square matrix of any other size is not
    r = graph.GraphRule(graph.parse("T(U)"), graph.parse("U"), (("U", ("a", "a")),))
    assert {s["a"] for s in graph.proof_sizes(r)} >= {1, 2}
    assert "a': 2" in graph.verify(r)


def test_synthesis_finds_the_merges_written_by_hand(synthesis):
    kept = {str(graph.GraphRule(r.lhs, r.rhs)) for r in synthesis.kept}
    assert "cat1(mm(X, U), mm(X, W)) = mm(X, cat1(U, W))" in kept      # shared_lhs
    assert "cat0(mm(X, U), mm(Z, U)) = mm(cat0(X, Z), U)" in kept      # shared_rhs
    assert "cat0(T(U), T(W)) = T(cat1(U, W))" in kept                  # transposed_cat
    assert "mm(cat1(X, Y), cat0(U, V)) = add(mm(X, U), mm(Y, V))" in kept
    # fingerprints on random integers propose no rule false on finite values: what fails is
    # a cancellation (U + (W - U) = W), true over the reals but dropping a NaN in U
    assert synthesis.failed and all("NaN" in why for why in synthesis.failed)
    assert "add(U, sub(W, U)) = W" not in kept
    assert "sub(mm(X, U), mm(X, W)) = mm(X, sub(U, W))" in kept


def test_synthesis_finds_slices_scales_and_products_through_graph_operators(synthesis):
    kept = {str(graph.GraphRule(r.lhs, r.rhs)) for r in synthesis.kept}
    assert "head0(mm(cat0(X, Z), U)) = mm(X, U)" in kept     # TASO's split through a matmul
    assert "tail1(mm(X, cat1(U, W))) = mm(X, W)" in kept
    assert "mm(scale(X), U) = mm(X, scale(U))" in kept
    assert "mul(T(U), T(W)) = T(mul(U, W))" in kept
    # rules of elementwise arithmetic alone are the region derivation's, not kept here
    assert not any(graph.operators(r.lhs) | graph.operators(r.rhs) <= graph.POINTWISE
                   for r in synthesis.kept)


def test_a_slice_that_takes_the_wrong_piece_or_a_scale_that_is_a_square_is_not_proven():
    for text in ["head0(mm(cat0(X, Z), U)) = mm(Z, U)", "mul(X, X) = scale(X)"]:
        proven, why = graph.proven(rule(text))
        assert proven is None and "values differ" in why, text


def test_synthesis_finds_the_channel_algebra_of_convolutions(synthesis):
    kept = {str(graph.GraphRule(r.lhs, r.rhs)) for r in synthesis.kept}
    assert {"cat0(conv(F, A), conv(G, A)) = conv(cat0(F, G), A)",       # one input, merged
            "conv(cat1(F, G), cat0(A, B)) = add(conv(F, A), conv(G, B))",  # summed branches
            "sub(conv(F, A), conv(G, A)) = conv(sub(F, G), A)",
            "head0(conv(cat0(F, G), A)) = conv(F, A)",                  # channels of an output
            "scale(conv(F, A)) = conv(F, scale(A))"} <= kept


def test_convolutions_take_filters_and_images_only():
    for bad in ["conv(A, F)", "conv(X, U)", "mm(F, A)", "T(F)", "cat1(A, B)",
                "add(conv(F, A), A)", "cat0(F, X)"]:
        with pytest.raises(ValueError):
            graph.parse(bad)
    assert graph.shape(graph.parse("conv(cat1(F, H), cat0(A, C))")) == (("o",), ("q",))
    proven, why = graph.proven(rule("cat0(conv(F, A), conv(G, A)) = conv(cat0(G, F), A)"))
    assert proven is None and why   # the output's channel pieces in the wrong order


def _convolved(t, values, dims, sizes):
    """Term ``t`` with ``conv`` a real 2-d convolution (kernel 3, stride 2, padding 1,
    dilation 2) on filters (out, in, 3, 3) and images (batch 2, channels, 9, 7)."""
    import torch
    from derivations.synthesis import graph_terms
    if t[0] == "var":
        return values[t[1]]
    args = [_convolved(c, values, dims, sizes) for c in t[1:]]
    kind = graph_terms.kind(t)
    dim = {"0": 0 if kind == "filter" else 1, "1": 1}[t[0][-1]] if t[0][-1] in "01" else None
    if t[0] == "conv":
        return torch.nn.functional.conv2d(args[1], args[0], stride=2, padding=1, dilation=2)
    if t[0] in ("add", "sub", "mul"):
        return getattr(torch, t[0])(*args)
    if t[0] == "scale":
        return 7 * args[0]
    if t[0].startswith("cat"):
        return torch.cat(args, dim)
    first = sizes[graph.shape(t[1], dims)[int(t[0][-1])][0]]
    return args[0].narrow(dim, 0, first) if t[0].startswith("head") else \
        args[0].narrow(dim, first, args[0].shape[dim] - first)


def test_every_convolution_rule_holds_for_real_convolutions():
    """The rules are proven with ``conv`` read as a product (``derivations.synthesis.graph``
    says why that covers every kernel, stride, padding and dilation): check them on real
    ones, exactly (small integers in float64)."""
    import torch
    from derivations.synthesis import graph_terms
    checked = 0
    for r in graph.loaded_rules():
        if "conv" not in graph.to_text(r.lhs) + graph.to_text(r.rhs):
            continue
        dims = r.dims
        sizes = {s: 2 + i for i, s in enumerate(sorted({s for d in dims.values() for s in d}))}
        gen = torch.Generator().manual_seed(checked)
        values = {}
        for v, (rows, cols) in dims.items():
            shape = (sizes[rows], sizes[cols], 3, 3) if v in graph_terms.FILTERS else \
                (2, sizes[rows], 9, 7)
            values[v] = torch.randint(-3, 4, shape, generator=gen).double()
        lhs = _convolved(r.lhs, values, dims, sizes)
        rhs = _convolved(r.rhs, values, dims, sizes)
        assert torch.equal(lhs, rhs), str(r)
        checked += 1
    assert checked >= 10


def test_pruning_drops_rules_the_kept_ones_derive(synthesis):
    kept = {str(graph.GraphRule(r.lhs, r.rhs)) for r in synthesis.kept}
    assert synthesis.candidates > 5 * len(synthesis.kept)
    # T(T(U)) = U derives the same with any operand inside
    assert "T(T(X)) = X" not in kept and "T(T(U)) = U" in kept
    # a commutation inside a context follows from the commutation (ordered rewriting)
    assert "mm(Z, mul(W, scale(U))) = mm(Z, mul(U, scale(W)))" not in kept


def test_the_checked_in_file_is_what_the_generator_writes(synthesis):
    assert graph.GRAPH_PATH.read_text() == graph.render(synthesis), \
        "regenerate: ollie rules synthesize --graph"
    assert graph_generated.SIZE == synthesis.size


def test_every_checked_in_rule_verifies_at_its_sizes():
    loaded = graph.loaded_rules()
    assert len(loaded) == len(graph_generated.RULES) > 20
    for r in loaded:
        assert graph.verify(r) == "", str(r)


def test_rules_that_read_an_operand_only_transposed_have_an_instance_without_the_transpose():
    rule = graph.parse_rule("mm(mm(X, U), T(V)) = mm(X, mm(U, T(V)))", "U: a b, V: c b, X: e a")
    plain = graph.untransposed(rule)
    assert str(plain) == "mm(mm(X, U), V) = mm(X, mm(U, V))"
    assert plain.dims["V"] == ("b", "c") and graph.verify(plain) == ""
    assert graph.untransposed(graph.parse_rule("T(mm(U, T(V))) = mm(V, T(U))",
                                               "U: a b, V: c b")) is None  # V is read bare
    for r in graph.loaded_rules():
        instance = graph.untransposed(r)
        assert instance is None or graph.verify(instance) == "", str(instance)


def test_a_regrouping_then_a_merge_compose_into_one_proven_rule():
    regroup = graph.untransposed(graph.parse_rule("mm(mm(X, U), T(V)) = mm(X, mm(U, T(V)))",
                                                  "U: a b, V: c b, X: e a"))
    merge = graph.parse_rule("add(mm(X, U), mm(X, W)) = mm(X, add(U, W))",
                             "U: a b, W: a b, X: e a")
    assert graph.regroups(regroup.lhs, regroup.rhs) and not graph.regroups(merge.lhs, merge.rhs)
    rules = graph.composed((regroup.lhs, regroup.rhs), (merge.lhs, merge.rhs))
    # either product of the merge is the regrouping's result: (x @ A) @ B + x @ W
    assert [str(r) for r in rules] == [
        "add(mm(mm(V, Y), Z), mm(V, W)) = mm(V, add(mm(Y, Z), W))",
        "add(mm(V, U), mm(mm(V, Y), Z)) = mm(V, add(U, mm(Y, Z)))"]
    assert rules[0].dims == {"V": ("a", "b"), "W": ("b", "d"), "Y": ("b", "f"),
                             "Z": ("f", "d")}  # the rank f is a size of its own
    assert all(graph.verify(r) == "" for r in rules)


def test_the_composed_rules_the_matcher_loads_are_proven():
    from ollie.capture import generated_rules
    composed = [r for _, _, r in generated_rules._directions() if size(r.lhs) > 3]
    assert len(composed) >= 8
    for r in composed[::len(composed) // 8]:  # (a proof takes about a second: eight of them)
        assert graph.verify(r) == "", str(r)
