"""Graph substitutions (``ollie.capture.graph_rules``) and folded weights
(``ollie.capture.folding``): each rule on an ATen graph, and through the backend."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import ollie
from graph_helpers import count, graph_of, symbolic_graph_of
from ollie.capture import compilers, folding, graph_rules, substitution
from ollie.cli.bench_fragments import GroupMatmulSlices, SlicesOneWeight

aten = torch.ops.aten


def same_outputs(gm, new, args):
    for a, b in zip(torch.utils._pytree.tree_leaves(gm(*args)),
                    torch.utils._pytree.tree_leaves(new(*args))):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)


def test_products_of_slices_by_one_weight_become_one_product_on_the_whole_input():
    def fn(x, w):  # an unrolled recurrence's input side: x_t @ W for every step t
        return [torch.tanh(x[t] @ w) for t in range(x.shape[0])]
    args = (torch.randn(6, 3, 8), torch.randn(8, 5))
    gm, fakes = graph_of(fn, *args)
    new, applied = graph_rules.substitute(gm, fakes)
    assert count(gm, aten.mm.default) == 6 and count(new, aten.mm.default) == 1
    assert count(new, aten.cat.default) == 0  # the steps tile x: no copy of the input
    assert any(a.startswith("shared_rhs") for a in applied)
    same_outputs(gm, new, args)


def test_linear_maps_of_one_input_become_one_product_of_concatenated_weights():
    def fn(x, wq, bq, wk, bk, wv, bv):
        return F.linear(x, wq, bq), F.linear(x, wk, bk), F.linear(x, wv, bv)
    args = (torch.randn(4, 16), *[t for _ in range(3)
                                  for t in (torch.randn(8, 16), torch.randn(8))])
    gm, fakes = graph_of(fn, *args)
    new, applied = graph_rules.substitute(gm, fakes)
    assert count(new, aten.addmm.default) == 1, new.code
    assert applied[0].startswith("shared_lhs")
    same_outputs(gm, new, args)


def test_einsum_projections_of_one_input_become_one_product():
    def fn(x, wq, wk, wv):  # einsum lowers to bmm of one batch (read as mm, ``matrix_views``)
        q, k, v = (torch.einsum("bnd,ed->bne", x, w) for w in (wq, wk, wv))
        return torch.softmax(q @ k.transpose(1, 2), -1) @ v
    torch.manual_seed(0)  # (logits of a few units: the softmax keeps the products' rounding)
    args = (torch.randn(2, 6, 16) / 4, *(torch.randn(8, 16) for _ in range(3)))
    gm, fakes = graph_of(fn, *args)
    new, applied = graph_rules.substitute(gm, fakes)
    assert count(gm, aten.bmm.default) == 5 and count(gm, aten.mm.default) == 0
    assert count(new, aten.bmm.default) == 2 and count(new, aten.mm.default) == 1, applied
    assert applied[0] == "shared_lhs: 3 × mm.default → 1", applied
    same_outputs(gm, new, args)


def test_an_unrolled_lstm_s_input_side_merges_over_time_and_its_state_side_stays():
    def fn(x, w_ih, b_ih, w_hh, b_hh):  # gates from chunk(4) of one Linear of x_t, one of h
        h = c = x.new_zeros(x.shape[1], w_hh.shape[1])
        for t in range(x.shape[0]):
            i, f, g, o = (F.linear(x[t], w_ih, b_ih) + F.linear(h, w_hh, b_hh)).chunk(4, -1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
        return h
    args = (torch.randn(5, 3, 8), torch.randn(24, 8), torch.randn(24), torch.randn(24, 6),
            torch.randn(24))
    gm, fakes = graph_of(fn, *args)
    new, applied = graph_rules.substitute(gm, fakes)
    assert "shared_rhs: 5 × addmm.default → 1" in applied, applied
    assert count(new, aten.addmm.default) == 1 + 5, new.code  # the h products depend in turn
    same_outputs(gm, new, args)


def test_a_gru_s_gate_products_merge_on_each_side():
    def fn(x, h, wr, wz, wn, ur, uz, un):
        r = torch.sigmoid(x @ wr + h @ ur)
        z = torch.sigmoid(x @ wz + h @ uz)
        n = torch.tanh(x @ wn + r * (h @ un))
        return (1 - z) * n + z * h
    args = (torch.randn(4, 8), torch.randn(4, 8), *(torch.randn(8, 8) for _ in range(6)))
    gm, fakes = graph_of(fn, *args)
    new, applied = graph_rules.substitute(gm, fakes)
    assert count(gm, aten.mm.default) == 6 and count(new, aten.mm.default) == 2, applied
    assert applied.count("shared_lhs: 3 × mm.default → 1") == 2, applied
    same_outputs(gm, new, args)


def test_a_recurrence_is_not_merged_with_itself():
    def fn(h, u):  # each product reads the previous one
        for _ in range(4):
            h = torch.tanh(h @ u)
        return h
    gm, fakes = graph_of(fn, torch.randn(2, 8), torch.randn(8, 8))
    new, applied = graph_rules.substitute(gm, fakes)
    assert new is None and applied == []


def test_a_loop_of_convolutions_over_channel_groups_becomes_one_grouped_convolution():
    def fn(x, *ws):
        return torch.cat([F.conv2d(p, w, padding=1) for p, w in zip(x.chunk(4, 1), ws)], 1)
    args = (torch.randn(2, 8, 6, 6), *[torch.randn(3, 2, 3, 3) for _ in range(4)])
    gm, fakes = graph_of(fn, *args)
    new, applied = graph_rules.substitute(gm, fakes)
    convs = [n for n in new.graph.nodes if n.target == aten.convolution.default]
    assert len(convs) == 1 and convs[0].args[8] == 4, new.code
    assert count(new, aten.cat.default) == 1  # the weights'; the outputs' cat is gone
    same_outputs(gm, new, args)


@pytest.mark.parametrize("used", [4, 3])
def test_a_loop_of_products_over_column_groups_becomes_one_batched_product(used):
    def fn(x, w):  # each column group of x times its own weight (w[i]); all groups, or 3 of 4
        return torch.cat([torch.relu(p @ w[i]) for i, p in enumerate(x.chunk(4, -1)[:used])], -1)
    args = (torch.randn(6, 32), torch.randn(4, 8, 5))
    gm, fakes = graph_of(fn, *args)
    new, applied = graph_rules.substitute(gm, fakes)
    if used < 4:  # the pieces do not tile x: no batched view of it
        assert new is None, applied
        return
    assert count(new, aten.mm.default) == 0 and count(new, aten.bmm.default) == 1, new.code
    assert applied == ["grouped_mm: 4 × mm.default → 1"], applied
    same_outputs(gm, new, args)


def test_linear_maps_of_the_column_groups_of_an_input_become_one_batched_product():
    def fn(x, ws, bs):  # a linear layer (weight and bias) per column group of x
        return torch.cat([F.linear(p, w, b) for p, w, b in zip(x.chunk(4, -1), ws, bs)], -1)
    args = (torch.randn(6, 32), torch.randn(4, 5, 8), torch.randn(4, 5))
    gm, fakes = graph_of(fn, *args)
    new, applied = graph_rules.substitute(gm, fakes)
    assert count(gm, aten.addmm.default) == 4 and count(new, aten.bmm.default) == 1, new.code
    assert count(new, aten.addmm.default) == 0
    assert applied == ["grouped_mm: 4 × addmm.default → 1"], applied
    same_outputs(gm, new, args)


def test_convolutions_of_one_input_merge_and_convolutions_of_different_kernels_do_not():
    def fn(x, a, b, c):  # Inception-style 1×1 branches, and a 3×3 one
        return F.conv2d(x, a), F.conv2d(x, b), F.conv2d(x, c, padding=1)
    args = (torch.randn(1, 4, 5, 5), torch.randn(2, 4, 1, 1), torch.randn(3, 4, 1, 1),
            torch.randn(2, 4, 3, 3))
    gm, fakes = graph_of(fn, *args)
    new, _ = graph_rules.substitute(gm, fakes)
    assert count(new, aten.convolution.default) == 2
    same_outputs(gm, new, args)


def test_computations_on_weights_alone_fold_and_views_of_weights_do_not():
    def fn(x, w1, w2, b):
        return x @ (w1 @ w2) + b.t()
    gm, _ = graph_of(fn, torch.randn(2, 4), torch.randn(4, 4), torch.randn(4, 4),
                     torch.randn(4, 1))
    x, w1, w2, b = gm.graph.find_nodes(op="placeholder")
    folded = folding.foldable(gm, {w1, w2, b})
    assert [n.target for n in folded] == [aten.mm.default]  # w1 @ w2, not b.t()


def test_a_loop_of_products_by_one_weight_runs_as_one_product_through_the_backend():
    torch.manual_seed(0)
    model, x = SlicesOneWeight(d=32).eval(), torch.randn(12, 4, 32)
    backend = ollie.OllieBackend(ollie.Options(cache=False))
    with torch.no_grad():
        out = torch.compile(model, backend=backend)(x)
        torch.testing.assert_close(out, model(x), rtol=1e-5, atol=1e-5)
    applied = [s for r in backend.reports for s in r.substitutions]
    assert any(s.startswith("shared_rhs: 12 ×") for s in applied), applied


def test_a_grouped_product_in_a_training_graph_compiles_and_keeps_its_gradients():
    """In training nothing folds the stacked weights: the merge must leave only operators
    Inductor compiles (it knows ``aten.stack`` only decomposed, before Ollie's pass)."""
    import warnings
    torch.manual_seed(0)
    model, x = GroupMatmulSlices(d=64, groups=4), torch.randn(8, 64, requires_grad=True)
    backend = ollie.OllieBackend(ollie.Options(cache=False))
    x2 = x.detach().clone().requires_grad_(True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ollie.OllieWarning)
        torch.compile(model, backend=backend)(x2).square().sum().backward()
    grad = model.w.grad.clone()
    model.w.grad = None
    model(x).square().sum().backward()
    torch.testing.assert_close(x2.grad, x.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grad, model.w.grad, rtol=1e-5, atol=1e-5)
    applied = [s for r in backend.reports for s in r.substitutions]
    assert "grouped_mm: 4 × mm.default → 1" in applied, applied


def test_no_graph_is_read_after_inductor_compiled_it(monkeypatch):
    # Inductor's passes change the graph they compile in place (a BERT stack's then failed
    # ``folding.saves_work``): weights, a substitution and no stored comparison take the whole
    # path to the second compile
    import warnings

    import torch._inductor.compile_fx as compile_fx
    from ollie.cli.bench_models import BertLayer
    compiled, real_compile, real_saves = set(), compile_fx.compile_fx_inner, folding.saves_work

    def compile_inner(gm, *args, **kwargs):
        compiled.add(id(gm))
        return real_compile(gm, *args, **kwargs)

    def saves_work(gm, *args):
        assert id(gm) not in compiled, "read after Inductor's compile"
        return real_saves(gm, *args)

    monkeypatch.setattr(compile_fx, "compile_fx_inner", compile_inner)
    monkeypatch.setattr(folding, "saves_work", saves_work)
    torch.manual_seed(0)
    model, x = BertLayer(d=32, heads=2, hidden=64).eval(), torch.randn(1, 8, 32)
    backend = ollie.OllieBackend(ollie.Options(cache=False, measure_cap_s=0.05))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", ollie.OllieWarning)  # an Ollie failure warns
        out = torch.compile(model, backend=backend)(x)
        torch.testing.assert_close(out, model(x), rtol=1e-5, atol=1e-5)
    assert any(s.startswith("shared_lhs") for r in backend.reports for s in r.substitutions)


def test_a_folded_value_is_computed_again_exactly_when_a_weight_changes():
    def fn(x, a, b, c):
        return (x @ (a @ b) + c,)
    x, a, b, c = torch.randn(3, 4), torch.randn(4, 5), torch.randn(5, 2), torch.randn(2)
    gm, _ = graph_of(fn, x, a, b, c)
    program, graph, positions = folding.fold(gm, [1, 2, 3])
    assert positions == [1, 2]  # only the weights the fold reads are checked on each call
    runs = []
    def fold_program(*weights):
        runs.append(1)
        return program(*weights)
    folded = folding.FoldedWeights(lambda args: graph(*args), fold_program, positions)
    for _ in range(3):
        torch.testing.assert_close(folded([x, a, b, c])[0], fn(x, a, b, c)[0])
    assert len(runs) == 1  # the weights did not change
    with torch.no_grad():
        a.mul_(-2)  # in place: the version counter moves
    torch.testing.assert_close(folded([x, a, b, c])[0], fn(x, a, b, c)[0])
    other = torch.randn(4, 5)  # another tensor of the same shape (another layer's weight)
    torch.testing.assert_close(folded([x, other, b, c])[0], fn(x, other, b, c)[0])
    assert len(runs) == 3


class WeightProduct(nn.Module):
    """A product of two parameter matrices, recomputed on every call as written."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Parameter(torch.randn(512, 512)), nn.Parameter(torch.randn(512, 8))

    def forward(self, x):
        return x @ (self.a @ self.b)


def compiled_weight_product_follows_a_loaded_state() -> ollie.OllieBackend:
    """Compile ``WeightProduct``, check it, load other weights, check again; the backend."""
    torch.manual_seed(0)
    # (the weights' product is 16× the work of x's: folding it wins clearly at any noise)
    model, x = WeightProduct().eval(), torch.randn(32, 512)
    backend = ollie.OllieBackend(ollie.Options(cache=False))
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-3)
        model.load_state_dict(WeightProduct().state_dict())
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-3)
    return backend


def test_a_product_of_parameters_is_folded_and_follows_a_loaded_state_through_the_backend():
    backend = compiled_weight_product_follows_a_loaded_state()
    assert [r.folded for r in backend.reports if r.adopted] == [1]


def test_outputs_keep_their_layout_after_a_merge():
    def fn(x, a, b):  # each product is a column slice of the merged one: made contiguous
        return x @ a, x @ b
    args = (torch.randn(4, 8), torch.randn(8, 3), torch.randn(8, 5))
    gm, fakes = graph_of(fn, *args)
    new, _ = graph_rules.substitute(gm, fakes)
    assert count(new, aten.mm.default) == 1
    assert all(out.is_contiguous() for out in new(*args))
    same_outputs(gm, new, args)


def test_an_inference_batch_norm_folds_into_the_convolution_before_it():
    def fn(x, w, mean, var, gamma, beta):
        y = F.conv2d(x, w, padding=1)
        return torch.relu(F.batch_norm(y, mean, var, gamma, beta, training=False, eps=1e-5))
    args = (torch.randn(2, 3, 6, 6), torch.randn(4, 3, 3, 3), torch.randn(4),
            torch.rand(4) + 0.5, torch.randn(4), torch.randn(4))
    gm = make_fx(fn, tracing_mode="fake", decomposition_table=compilers.decompositions())(*args)
    fakes = [n.meta["val"] for n in gm.graph.find_nodes(op="placeholder")]
    new, applied = graph_rules.substitute(gm, fakes)
    assert sum(a.startswith("affine_into_conv") for a in applied) >= 3, applied
    conv = next(n for n in new.graph.nodes if n.target == aten.convolution.default)
    assert [u.target for u in conv.users] == [aten.relu.default]  # nothing left between
    same_outputs(gm, new, args)
    # the new bias (a zero, minus the mean, …) reads weights alone: all of it folds
    weights = new.graph.find_nodes(op="placeholder")[1:]
    bias_and_weight = {a for a in conv.args[1:3]}
    assert bias_and_weight <= set(folding.foldable(new, set(weights)))


def test_a_scale_and_shift_fold_into_a_matmul_but_a_scale_that_reads_its_result_does_not():
    def fn(x, w, s, t):
        y, z = x @ w, x @ w.t()
        return (y * s + t, z * z.sum(0))
    args = (torch.randn(5, 4), torch.randn(4, 4), torch.randn(4), torch.randn(4))
    gm, fakes = graph_of(fn, *args)
    new, applied = graph_rules.substitute(gm, fakes)
    assert [a.split(":")[0] for a in applied] == ["affine_into_matmul"] * 2, applied
    same_outputs(gm, new, args)


def test_an_affine_map_spelled_addcmul_or_addcdiv_folds_but_stays_whole_in_half_precision():
    def fn(x, y, w, s, t):
        return torch.addcmul(t, x @ w, s), torch.addcdiv(t, y @ w, s, value=0.5)
    args = (torch.randn(5, 4), torch.randn(3, 4), torch.randn(4, 4), torch.rand(4) + 0.5,
            torch.randn(4))
    gm, fakes = graph_of(fn, *args)
    new, applied = graph_rules.substitute(gm, fakes)
    assert sum(a.startswith("affine_into_matmul") for a in applied) >= 4, applied
    products = [n for n in new.graph.nodes if n.target in (aten.mm.default, aten.addmm.default)]
    assert len(products) == 2 and all(u.op == "output" for n in products for u in n.users)
    same_outputs(gm, new, args)
    half, fakes = graph_of(fn, *(a.half() for a in args))
    half, _ = graph_rules.substitute(half, fakes)  # eager rounds it once: kept whole
    assert count(half, aten.addcmul.default) == count(half, aten.addcdiv.default) == 1


def test_a_merge_that_would_move_a_random_op_is_refused():
    def fn(x, y, w):  # merging the products would draw y's dropout mask before x's product
        return F.dropout(x, 0.5) @ w, F.dropout(y, 0.5) @ w
    gm, fakes = graph_of(fn, torch.randn(3, 4), torch.randn(3, 4), torch.randn(4, 4))
    with pytest.raises(ValueError, match="random"):
        graph_rules.substitute(gm, fakes)


def test_a_rewritten_graph_chosen_to_run_uncompiled_runs_with_its_folded_weights(monkeypatch):
    from ollie.capture import graph_pass
    keys = []

    def every_rewrite_wins(original, rewritten, example_inputs, report, options, key, at=None,
                           **_):
        keys.append(key)
        report.timing = (2.0, 1.0)
        return True
    monkeypatch.setattr(graph_pass, "compare", every_rewrite_wins)
    backend = compiled_weight_product_follows_a_loaded_state()
    report = next(r for r in backend.reports if r.adopted)
    assert report.runs_eagerly and report.folded == 1
    # x @ (a b)'s rewrite is one library call, compiled to be timed against the original:
    # timed uncompiled too, it runs uncompiled where that wins
    assert [k.endswith("-eagerly") for k in keys] == [False, True]


def test_a_product_scaled_by_itself_does_not_fold():
    def fn(x, w):  # one output channel per column and a single row: y is "per channel"
        y = x @ w
        return y * y + 1.0
    args = (torch.randn(1, 4), torch.randn(4, 3))
    gm, fakes = graph_of(fn, *args)
    assert graph_rules.substitute(gm, fakes) == (None, [])


def test_a_running_sum_over_the_rows_of_a_tensor_is_one_reduction():
    def fn(x, b):
        total = b
        for row in x.unbind(0):  # a Python loop: one addition per row, plus the start b
            total = total + row
        return (total * 2,)
    args = (torch.randn(9, 5), torch.randn(5))
    gm, fakes = graph_of(fn, *args)
    new, applied = graph_rules.substitute(gm, fakes)
    assert applied == ["tiling_sum: a sum of the 9 rows of a tensor"]
    assert count(new, aten.add.Tensor) == 1 and count(new, aten.sum.dim_IntList) == 1
    same_outputs(gm, new, args)


def test_a_sum_of_some_rows_only_stays_as_written():
    def fn(x):
        return (x[0] + x[1] + x[3],)
    gm, fakes = graph_of(fn, torch.randn(4, 3))
    assert graph_rules.substitute(gm, fakes) == (None, [])


def test_the_substitutions_alone_stand_against_regions_that_took_in_their_contractions():
    from types import SimpleNamespace

    from ollie.capture import graph_pass

    def fn(x, w):
        return [torch.tanh(x[t] @ w) for t in range(x.shape[0])]
    gm, fakes = graph_of(fn, torch.randn(6, 3, 8), torch.randn(8, 5))
    report = graph_pass.GraphReport("inference graph 1")  # as if a region took every product
    from ollie.decision import Decision, Outcome
    region = SimpleNamespace(kernel=object(), decision=Decision(Outcome.ADOPTED))
    report.regions = [region]
    substitution.substitutions_alone(gm, gm, fakes, report, graph_pass.GraphReport("alone"),
                                     inductor=True)
    assert report.alternative is not None and report.substitutions == []
    chosen = substitution.take_alternative(report)
    assert count(chosen, aten.mm.default) == 1 and report.substitutions[0].startswith("shared_rhs")
    assert region.kernel is None and region.decision.text.startswith("kept: the graph substitutions")


def test_linear_maps_of_a_batch_of_any_size_merge_where_the_split_sizes_are_fixed():
    wq, bq, wk, bk, wv, bv = [t for _ in range(3) for t in (torch.randn(8, 16), torch.randn(8))]

    def fn(x):  # the weights are constants of fixed sizes, the batch a size symbol
        return F.linear(x, wq, bq), F.linear(x, wk, bk), F.linear(x, wv, bv)
    gm, fakes = symbolic_graph_of(fn, torch.randn(5, 16))
    new, applied = graph_rules.substitute(gm, fakes)
    assert count(new, aten.addmm.default) == 1 and applied[0].startswith("shared_lhs"), applied
    for batch in (3, 7, 40):  # one graph for every batch
        same_outputs(gm, new, (torch.randn(batch, 16),))


def test_products_split_by_symbolic_sizes_merge_reading_the_sizes_from_the_graph():
    w = torch.randn(8, 4)

    def fn(x1, x2, w):  # rows of two batches of any sizes: the split sizes are symbols
        return x1 @ w, x2 @ w
    gm, fakes = symbolic_graph_of(fn, torch.randn(5, 8), torch.randn(6, 8), w)
    new, applied = graph_rules.substitute(gm, fakes)
    assert applied == ["shared_rhs: 2 × mm.default → 1"], applied
    assert count(new, aten.mm.default) == 1 and count(new, aten.sym_size.int) == 2
    for rows in ((3, 9), (40, 1), (2, 2)):
        same_outputs(gm, new, (torch.randn(rows[0], 8), torch.randn(rows[1], 8), w))


def test_a_batch_norm_folds_into_a_convolution_of_images_of_any_size():
    w, mean, var = torch.randn(4, 3, 3, 3), torch.randn(4), torch.rand(4) + 0.5
    gamma, beta = torch.randn(4), torch.randn(4)

    def fn(x):  # batch, height and width are size symbols; the channels are fixed
        y = F.conv2d(x, w, padding=1)
        return torch.relu(F.batch_norm(y, mean, var, gamma, beta, training=False, eps=1e-5))
    gm = make_fx(fn, tracing_mode="symbolic", decomposition_table=compilers.decompositions(),
                 _allow_non_fake_inputs=True)(torch.randn(2, 3, 6, 6))
    fakes = [n.meta["val"] for n in gm.graph.find_nodes(op="placeholder")]
    new, applied = graph_rules.substitute(gm, fakes)
    assert sum(a.startswith("affine_into_conv") for a in applied) >= 3, applied
    conv = next(n for n in new.graph.nodes if n.target == aten.convolution.default)
    assert [u.target for u in conv.users] == [aten.relu.default]  # nothing left between
    for shape in ((1, 3, 5, 9), (3, 3, 12, 7)):
        same_outputs(gm, new, (torch.randn(shape),))
