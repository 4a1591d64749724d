"""einsum's and batched spellings' products read as matrix products
(``ollie.capture.matrix_views``)."""
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from graph_helpers import count, graph_of, symbolic_graph_of
from ollie.capture import generated_rules, graph_rules, matrix_views

aten = torch.ops.aten


def einsum_chain(x, a, b):
    return torch.einsum("bi,ij,jk->bk", x, a, b).relu()


def test_an_einsum_of_three_matrices_reads_as_two_matrix_products():
    args = (torch.randn(6, 5), torch.randn(5, 4), torch.randn(4, 3))
    gm, _ = graph_of(einsum_chain, *args)
    assert count(gm, aten.bmm.default) == 2 and count(gm, aten.mm.default) == 0
    assert matrix_views.normalise(gm.graph) > 0
    gm.recompile()
    products = list(gm.graph.find_nodes(op="call_function", target=aten.mm.default))
    assert count(gm, aten.bmm.default) == 0 and len(products) == 2
    x, a, b = gm.graph.find_nodes(op="placeholder")
    assert products[0].args == (x, a) and products[1].args == (products[0], b)
    torch.testing.assert_close(gm(*args), einsum_chain(*args))


def test_with_weights_the_einsum_reads_one_product_of_the_weights():
    args = (torch.randn(4, 16), torch.randn(16, 16), torch.randn(16, 8))
    gm, fakes = graph_of(einsum_chain, *args)
    generated_rules.mark_weights(gm, [1, 2])
    new, applied = graph_rules.substitute(gm, fakes)
    assert applied == ["generated: mm(mm(X, Y), V) → mm(X, mm(Y, V))"], applied
    torch.testing.assert_close(new(*args), einsum_chain(*args), rtol=1e-4, atol=1e-5)


def test_a_chain_of_views_that_transposes_reads_as_a_transpose():
    def fn(x):
        return x.unsqueeze(0).permute(2, 0, 1).reshape(4, 6).exp()
    x = torch.randn(6, 4)
    gm, _ = graph_of(fn, x)
    assert matrix_views.normalise(gm.graph) == 1
    gm.recompile()
    (view,) = [n for n in gm.graph.nodes if n.op == "call_function" and n.target != aten.exp.default]
    assert view.target == aten.permute.default and view.args[1] == [1, 0]
    torch.testing.assert_close(gm(x), fn(x))


def test_a_reshape_that_is_neither_the_matrix_nor_its_transpose_is_kept():
    def fn(x):  # 6×4 read as 4×6 in row-major order: not xᵀ
        return x.unsqueeze(0).reshape(4, 6).exp()
    gm, _ = graph_of(fn, torch.randn(6, 4))
    assert matrix_views.normalise(gm.graph) == 0


def test_a_product_of_several_batches_stays_batched():
    def fn(p, q):
        return torch.einsum("bij,bjk->bik", p, q)
    gm, _ = graph_of(fn, torch.randn(2, 3, 4), torch.randn(2, 4, 5))
    matrix_views.normalise(gm.graph)
    assert count(gm, aten.bmm.default) == 1 and count(gm, aten.mm.default) == 0


def test_at_symbolic_sizes_the_einsum_reads_as_matrix_products_without_a_guard():
    gm, fakes = symbolic_graph_of(einsum_chain, torch.randn(6, 5), torch.randn(5, 4),
                                  torch.randn(4, 3))
    shape_env = fakes[0].shape[0].node.shape_env
    guards = len(shape_env.guards)
    assert matrix_views.normalise(gm.graph) > 0
    assert len(shape_env.guards) == guards  # it holds for every size, not the sampled one
    gm.recompile()
    assert count(gm, aten.bmm.default) == 0 and count(gm, aten.mm.default) == 2
    for b, i, j, k in [(6, 5, 4, 3), (9, 2, 7, 5)]:
        args = (torch.randn(b, i), torch.randn(i, j), torch.randn(j, k))
        torch.testing.assert_close(gm(*args), einsum_chain(*args))


def test_at_symbolic_sizes_a_reshape_that_is_the_matrix_only_at_some_sizes_is_kept():
    def fn(x):  # x.T's sizes, read in x's order: x itself only where a side is 1
        return x.unsqueeze(0).reshape(x.shape[1], x.shape[0]).exp()
    gm, _ = symbolic_graph_of(fn, torch.randn(6, 4))
    assert matrix_views.normalise(gm.graph) == 0


def lm_head_last(h, w):  # a batch of one sequence: the last position's logits
    return torch.log_softmax(torch.nn.functional.linear(h, w)[:, -1], dim=-1)


def lm_head_last_three(h, w):
    return torch.nn.functional.linear(h, w)[:, -3:].softmax(-1)


def test_the_positions_a_batch_of_one_keeps_are_rows_of_the_product_at_every_length():
    for fn, rule in ((lm_head_last, "tail0(mm(cat0(X, Z), U)) → mm(Z, U)"),
                     (lm_head_last_three, "tail0(mm(cat0(X, Z), U)) → mm(Z, U)")):
        gm = make_fx(fn, tracing_mode="symbolic")(torch.randn(1, 12, 8), torch.randn(16, 8))
        fakes = [n.meta["val"] for n in gm.graph.find_nodes(op="placeholder")]
        assert not isinstance(fakes[0].shape[1], int)  # the length is a symbol (the batch: 1)
        new, applied = graph_rules.substitute(gm, fakes)
        assert applied == [f"generated: {rule}"], applied
        mm = next(iter(new.graph.find_nodes(op="call_function", target=aten.mm.default)))
        assert mm.meta["val"].shape[0] in (1, 3)  # only the rows kept are multiplied
        for length in (12, 5, 2):
            args = (torch.randn(1, length, 8), torch.randn(16, 8))
            torch.testing.assert_close(new(*args), fn(*args), rtol=1e-5, atol=1e-5)


def test_a_position_of_a_batch_of_several_sequences_is_not_a_row_range():
    gm, _ = graph_of(lm_head_last, torch.randn(2, 12, 8), torch.randn(16, 8))
    assert matrix_views.normalise(gm.graph) == 0


def test_the_last_position_of_a_linear_layer_with_a_bias_is_one_row_of_its_product():
    def fn(h, w, b):
        return torch.nn.functional.linear(h, w, b)[:, -1].relu()
    args = (torch.randn(1, 12, 8), torch.randn(16, 8), torch.randn(16))
    gm = make_fx(fn, tracing_mode="symbolic")(*args)
    fakes = [n.meta["val"] for n in gm.graph.find_nodes(op="placeholder")]
    new, applied = graph_rules.substitute(gm, fakes)
    assert applied == ["generated: tail0(mm(cat0(X, Z), U)) → mm(Z, U)"], applied
    mm = next(iter(new.graph.find_nodes(op="call_function", target=aten.mm.default)))
    assert mm.meta["val"].shape[0] == 1
    for length in (12, 5):
        args = (torch.randn(1, length, 8), torch.randn(16, 8), torch.randn(16))
        torch.testing.assert_close(new(*args), fn(*args), rtol=1e-5, atol=1e-5)


class EinsumWeights(torch.nn.Module):
    def __init__(self, d=256):
        super().__init__()
        self.a = torch.nn.Parameter(torch.randn(d, d) / d ** 0.5)
        self.b = torch.nn.Parameter(torch.randn(d, d) / d ** 0.5)

    def forward(self, x):
        return torch.einsum("bi,ij,jk->bk", x, self.a, self.b)


def test_through_the_backend_the_einsum_runs_the_weights_product_folded():
    # The region's rewrite of the einsum and the substitution compete, each compiled as it
    # would run: the weights' product folded, half the multiply-adds per call, wins.
    import ollie
    torch.manual_seed(0)
    model, x = EinsumWeights().eval(), torch.randn(16, 256)
    backend = ollie.OllieBackend(ollie.Options(cache=False, measure_cap_s=0.05))
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
        model.b.mul_(2)  # the folded product is stale now: computed again
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
    (report,) = backend.reports
    assert report.substitutions == ["generated: mm(mm(X, Y), V) → mm(X, mm(Y, V))"]
    assert report.folded == 1 and report.adopted


def test_a_rewrite_is_compiled_for_comparison_with_its_weights_product_folded():
    from ollie.capture import folding

    def graph(x, a, b):
        return (x @ (a @ b),)
    x, a, b = torch.randn(4, 8), torch.randn(8, 8), torch.randn(8, 3)
    gm, fakes = graph_of(graph, x, a, b)
    compiled = folding.compiled(gm, fakes, {"is_inference": True, "static_input_idxs": [1, 2]})
    assert isinstance(compiled, folding.FoldedWeights)  # a @ b is an input it computes once
    torch.testing.assert_close(compiled([x, a, b])[0], x @ (a @ b))
    assert len(gm.graph.find_nodes(op="call_function", target=aten.mm.default)) == 2  # a copy
