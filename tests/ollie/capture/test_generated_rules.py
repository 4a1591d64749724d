"""Generated graph rules (``ollie.capture.generated_rules``) on ATen graphs and through the
backend."""
import pytest
import torch
import torch.nn.functional as F

import ollie
from graph_helpers import count, generated_on, graph_of, symbolic_graph_of
from ollie.capture import generated_rules, graph_rules
from ollie.cli.bench_fragments import LSTMCellLinears

aten = torch.ops.aten
MERGE = "generated: add(mm(X, U), mm(Y, V)) → mm(cat1(X, Y), cat0(U, V))"


def products(gm) -> int:
    return count(gm, aten.mm.default) + count(gm, aten.addmm.default)


def two_linears(x, h, w1, b1, w2, b2):
    return torch.tanh(F.linear(x, w1, b1) + F.linear(h, w2, b2))


def linear_args():
    torch.manual_seed(0)
    return (torch.randn(3, 8), torch.randn(3, 6), torch.randn(16, 8), torch.randn(16),
            torch.randn(16, 6), torch.randn(16))


def test_products_of_two_inputs_by_weights_become_one_product_of_concatenations():
    args = linear_args()
    gm, fakes = graph_of(two_linears, *args)
    generated_rules.mark_weights(gm, [2, 3, 4, 5])
    new, applied = graph_rules.substitute(gm, fakes)
    assert applied[0] == MERGE, applied
    assert products(gm) == 2 and products(new) == 1
    torch.testing.assert_close(new(*args), two_linears(*args), rtol=1e-5, atol=1e-5)
    # the Linears' weights are read transposed: so is their concatenation (transposed_cat),
    # a transpose of the weights joined side by side, as each product read its own
    product = next(n for n in new.graph.nodes if n.target in (aten.mm.default,
                                                               aten.addmm.default))
    weight = product.args[-1]
    assert weight.target == aten.permute.default and weight.args[0].target == \
        aten.cat.default and weight.args[0].args[1] == 1, weight.format_node()


def test_without_weights_the_merge_would_cost_a_concatenation_of_them_every_call():
    args = linear_args()
    gm, fakes = graph_of(two_linears, *args)  # a training graph: nothing is marked
    new, applied = graph_rules.substitute(gm, fakes)
    assert not any(a.startswith("generated") for a in applied), applied


def test_products_of_one_input_by_two_matrices_share_one_product_of_their_sum():
    def fn(x, w1, w2):  # fewer multiply-adds: applied with or without weights
        return x @ w1 + x @ w2
    args = (torch.randn(4, 8), torch.randn(8, 5), torch.randn(8, 5))
    gm, fakes = graph_of(fn, *args)
    new, applied = graph_rules.substitute(gm, fakes)
    assert applied == ["generated: add(mm(X, U), mm(X, W)) → mm(X, add(U, W))"], applied
    assert products(new) == 1
    torch.testing.assert_close(new(*args), fn(*args), rtol=1e-5, atol=1e-5)


def chain_of_three(x, a, b, c):
    return torch.tanh(((x @ a) @ b) @ c)


def test_a_chain_of_products_by_weights_reads_one_product_of_the_weights():
    # mm(mm(X, U), V) = mm(X, mm(U, V)): the instance of a generated rule that reads its
    # third operand transposed; with weights the products of weights are free
    args = (torch.randn(4, 16), torch.randn(16, 16), torch.randn(16, 16), torch.randn(16, 16))
    gm, fakes = graph_of(chain_of_three, *args)
    generated_rules.mark_weights(gm, [1, 2, 3])
    new, applied = graph_rules.substitute(gm, fakes)
    assert applied == ["generated: mm(mm(X, Y), V) → mm(X, mm(Y, V))"] * 2, applied
    x = next(iter(new.graph.find_nodes(op="placeholder")))
    x_products = [n for n in new.graph.find_nodes(op="call_function", target=aten.mm.default)
                  if x in n.args]
    assert len(x_products) == 1  # x is multiplied once, by the product of the three weights
    torch.testing.assert_close(new(*args), chain_of_three(*args), rtol=1e-4, atol=1e-5)


def test_without_weights_a_chain_keeps_its_cheaper_order():
    args = (torch.randn(4, 16), torch.randn(16, 16), torch.randn(16, 16), torch.randn(16, 16))
    gm, fakes = graph_of(chain_of_three, *args)  # 4 rows: left to right is cheapest
    new, applied = graph_rules.substitute(gm, fakes)
    assert not any(a.startswith("generated") for a in applied), applied


def test_a_difference_of_products_of_one_input_is_one_product_of_the_difference():
    def fn(x, w1, w2):
        return torch.relu(x @ w1 - x @ w2)
    args = (torch.randn(4, 8), torch.randn(8, 5), torch.randn(8, 5))
    gm, fakes = graph_of(fn, *args)
    new, applied = graph_rules.substitute(gm, fakes)
    assert applied == ["generated: sub(mm(X, U), mm(X, W)) → mm(X, sub(U, W))"], applied
    assert products(new) == 1
    torch.testing.assert_close(new(*args), fn(*args), rtol=1e-5, atol=1e-5)


def test_a_product_used_elsewhere_is_not_merged_away():
    def fn(x, h, w1, w2):
        a = x @ w1
        return a + h @ w2, a.sum()
    args = (torch.randn(3, 8), torch.randn(3, 6), torch.randn(8, 5), torch.randn(6, 5))
    gm, fakes = graph_of(fn, *args)
    generated_rules.mark_weights(gm, [2, 3])
    new, applied = graph_rules.substitute(gm, fakes)
    assert not any(a.startswith("generated") for a in applied), applied


def test_operands_whose_sizes_the_proof_does_not_cover_are_not_matched():
    def fn(x, z, w):  # X and Z of the rule have one shape; a row broadcast is not that
        return x @ w + z @ w
    args = (torch.randn(1, 8), torch.randn(4, 8), torch.randn(8, 5))
    gm, fakes = graph_of(fn, *args)
    new, applied = graph_rules.substitute(gm, fakes)
    assert not any(a.startswith("generated") for a in applied), applied


def test_an_lstm_cell_merges_its_two_linears_through_the_backend_and_refolds_new_weights():
    torch.manual_seed(0)
    cell = LSTMCellLinears(d_in=16, d=8).eval()
    x, h, c = torch.randn(2, 16), torch.randn(2, 8), torch.randn(2, 8)
    backend = ollie.OllieBackend(ollie.Options(cache=False, measure_cap_s=0.05))
    compiled = torch.compile(cell, backend=backend)
    with torch.no_grad():
        for a, b in zip(compiled(x, h, c), cell(x, h, c)):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
        cell.hh.weight.mul_(2)  # the folded concatenation of the weights is stale now
        for a, b in zip(compiled(x, h, c), cell(x, h, c)):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert MERGE in [s for r in backend.reports for s in r.substitutions]


def test_three_branches_of_one_input_become_one_product_two_at_a_time():
    def fn(x, w1, w2, w3):
        return x @ w1 + x @ w2 + x @ w3
    args = (torch.randn(4, 8), torch.randn(8, 5), torch.randn(8, 5), torch.randn(8, 5))
    gm, fakes = graph_of(fn, *args)
    new, applied = graph_rules.substitute(gm, fakes)
    assert applied == ["generated: add(mm(X, U), mm(X, W)) → mm(X, add(U, W))"] * 2, applied
    assert products(new) == 1
    torch.testing.assert_close(new(*args), fn(*args), rtol=1e-5, atol=1e-5)


def test_with_symbolic_sizes_a_rule_applies_where_it_costs_less_at_every_size():
    def branches(x, w1, w2):  # 2mkn multiply-adds against mkn, whatever m, k, n are
        return x @ w1 + x @ w2
    args = (torch.randn(4, 8), torch.randn(8, 5), torch.randn(8, 5))
    gm, fakes = symbolic_graph_of(branches, *args)
    assert not all(isinstance(d, int) for d in fakes[0].shape)
    new, applied = graph_rules.substitute(gm, fakes)
    assert applied == ["generated: add(mm(X, U), mm(X, W)) → mm(X, add(U, W))"], applied
    torch.testing.assert_close(new(*args), branches(*args), rtol=1e-5, atol=1e-5)


def test_a_reassociation_applies_at_fixed_sizes_and_not_where_its_choice_depends_on_them():
    def chain(x, u, v):  # x@(u@vᵀ) is cheaper here; with other sizes (x@u)@vᵀ is
        return (x @ u) @ v.t()
    args = (torch.randn(64, 8), torch.randn(8, 64), torch.randn(2, 64))
    gm, fakes = graph_of(chain, *args)
    _, applied = graph_rules.substitute(gm, fakes)
    assert applied == ["generated: mm(mm(X, Y), V) → mm(X, mm(Y, V))"], applied  # vᵀ a view
    gm, fakes = symbolic_graph_of(chain, *args)
    assert graph_rules.substitute(gm, fakes) == (None, [])


def test_parallel_branches_share_one_product_at_every_batch_size_through_the_backend():
    from ollie.cli.bench_fragments import ParallelLinears
    torch.manual_seed(0)
    model = ParallelLinears(d=32).eval()
    backend = ollie.OllieBackend(ollie.Options(cache=False, measure_cap_s=0.05))
    compiled = torch.compile(model, backend=backend, dynamic=True)
    with torch.no_grad():
        for batch in (8, 16, 5):
            x = torch.randn(batch, 32)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    report = backend.reports[0]
    assert len(backend.reports) == 1  # one graph serves every batch size
    # found on the symbolic graph; whether it runs after the region's program or on the
    # original graph instead is a timed choice, so either list may hold it
    assert "generated: add(mm(X, U), mm(X, W)) → mm(X, add(U, W))" in \
        report.substitutions + report.alternative_substitutions


def test_branches_of_a_batch_of_sequences_are_matched_through_their_views():
    def fn(x, w1, b1, w2, b2):  # linear maps of (batch, sequence, d): flattened, viewed back
        return torch.relu(F.linear(x, w1, b1) + F.linear(x, w2, b2))
    args = (torch.randn(2, 5, 8), torch.randn(6, 8), torch.randn(6), torch.randn(6, 8),
            torch.randn(6))
    gm, fakes = graph_of(fn, *args)
    new, applied = graph_rules.substitute(gm, fakes)
    assert applied[0] == "generated: add(mm(X, U), mm(X, W)) → mm(X, add(U, W))", applied
    assert products(gm) == 2 and products(new) == 1
    torch.testing.assert_close(new(*args), fn(*args), rtol=1e-5, atol=1e-5)


def test_terms_viewed_to_different_shapes_are_not_summed_as_one():
    def fn(x, w1, w2):
        return (x @ w1).view(2, 10) + (x @ w2).view(10, 2).t().reshape(2, 10)
    args = (torch.randn(4, 3), torch.randn(3, 5), torch.randn(3, 5))
    gm, fakes = graph_of(fn, *args)
    new, applied = graph_rules.substitute(gm, fakes)
    assert not any(a.startswith("generated") for a in applied), applied


def test_a_cost_is_lower_only_where_it_is_lower_at_every_size():
    import sympy
    from torch.utils._sympy.functions import FloorDiv
    from ollie.capture.generated_rules import _cheaper
    m, n = sympy.symbols("m n", positive=True, integer=True)
    assert _cheaper((4 * m, 1, 1), (8 * m, 2, 2), products_only=True)
    assert not _cheaper((m * n, 1, 1), (4 * m, 1, 1), products_only=False)  # n < 4 or not
    assert not _cheaper((3 * FloorDiv(m, 2), 1, 1), (8 * m, 1, 1), products_only=False)
    assert _cheaper((4, 1, 1), (4, 2, 1), products_only=False)  # one kernel fewer
    assert not _cheaper((4, 1, 1), (4, 2, 1), products_only=True)


def product_rows(gm) -> list:
    """The row counts of the products ``gm`` computes."""
    return [n.args[0].meta["val"].shape[0]
            for n in gm.graph.find_nodes(op="call_function", target=aten.mm.default)]


def test_the_first_rows_of_a_product_are_the_product_of_the_first_rows():
    def fn(x, w):  # head0(mm(cat0(X, Z), U)) = mm(X, U): only the rows kept are computed
        return torch.tanh((x @ w)[:16])
    args = (torch.randn(128, 32), torch.randn(32, 48))
    gm, fakes = graph_of(fn, *args)
    new, applied = graph_rules.substitute(gm, fakes)
    assert applied == ["generated: head0(mm(cat0(X, Z), U)) → mm(X, U)"], applied
    assert product_rows(gm) == [128] and product_rows(new) == [16]
    torch.testing.assert_close(new(*args), fn(*args), rtol=1e-5, atol=1e-5)


def test_the_last_columns_and_the_last_rows_of_a_product_slice_its_operands():
    def columns(x, w):  # tail1(mm(X, cat1(U, W))) = mm(X, W)
        return torch.relu(F.linear(x, w)[:, 40:])
    def last_rows(x, w):  # a negative start: the last row only
        return torch.relu((x @ w)[-1:])
    args = (torch.randn(16, 32), torch.randn(48, 32))
    gm, fakes = graph_of(columns, *args)
    new, applied = graph_rules.substitute(gm, fakes)
    assert applied == ["generated: tail1(mm(X, cat1(U, W))) → mm(X, W)"], applied
    mm = next(iter(new.graph.find_nodes(op="call_function", target=aten.mm.default)))
    assert tuple(mm.meta["val"].shape) == (16, 8)
    torch.testing.assert_close(new(*args), columns(*args), rtol=1e-5, atol=1e-5)
    args = (torch.randn(16, 32), torch.randn(32, 48))
    gm, fakes = graph_of(last_rows, *args)
    new, applied = graph_rules.substitute(gm, fakes)
    assert applied == ["generated: tail0(mm(cat0(X, Z), U)) → mm(Z, U)"], applied
    assert product_rows(new) == [1]
    torch.testing.assert_close(new(*args), last_rows(*args), rtol=1e-5, atol=1e-5)


def test_a_slice_of_a_product_read_whole_elsewhere_or_with_a_step_is_left_alone():
    def shared(x, w):  # the whole product is computed anyway
        y = x @ w
        return y[:4].sum(0) + y.sum(0)
    def strided(x, w):  # every other row: not a concatenation's piece
        return torch.tanh((x @ w)[::2])
    args = (torch.randn(16, 8), torch.randn(8, 6))
    for fn in (shared, strided):
        gm, fakes = graph_of(fn, *args)
        new, applied = graph_rules.substitute(gm, fakes)
        assert not any(a.startswith("generated") for a in applied), (fn.__name__, applied)


def test_slices_apply_at_symbolic_sizes_and_clamp_as_the_original_does():
    def last(x, w):  # the last 3 rows of a product of any number of rows
        return torch.tanh((x @ w)[-3:])
    def first(x, w):  # the first 3: fewer rows than 3 clamp, in both programs
        return torch.tanh((x @ w)[:3])
    for fn, rule in ((last, "tail0(mm(cat0(X, Z), U)) → mm(Z, U)"),
                     (first, "head0(mm(cat0(X, Z), U)) → mm(X, U)")):
        gm, fakes = symbolic_graph_of(fn, torch.randn(8, 4), torch.randn(4, 6))
        new, applied = graph_rules.substitute(gm, fakes)
        assert applied == [f"generated: {rule}"], applied
        for rows in (8, 5, 2):
            args = (torch.randn(rows, 4), torch.randn(4, 6))
            torch.testing.assert_close(new(*args), fn(*args), rtol=1e-5, atol=1e-5)
        assert max(product_rows(new)) != max(product_rows(gm))  # sizes: expressions


def test_a_scale_moves_to_the_smaller_operand_of_a_product():
    def fn(x, w):  # mm(scale(X), U) = mm(X, scale(U)): 8 divisions, not 512
        return torch.tanh((x / 3.0) @ w)
    args = (torch.randn(64, 8), torch.randn(8, 1))
    gm, fakes = graph_of(fn, *args)
    new, applied = graph_rules.substitute(gm, fakes)
    assert applied == ["generated: mm(scale(X), U) → mm(X, scale(U))"], applied
    div = next(iter(new.graph.find_nodes(op="call_function", target=aten.div.Tensor)))
    assert div.args[1] == 3.0 and tuple(div.meta["val"].shape) == (8, 1)
    torch.testing.assert_close(new(*args), fn(*args), rtol=1e-5, atol=1e-5)


def test_under_inductor_a_scale_stays_where_an_elementwise_kernel_computes_it_anyway():
    def fn(x, w, y, u):  # hard-swish, then a convolution: ``/ 6`` is in hard-swish's kernel
        h = x * torch.clamp(x + 3, 0, 6)
        return torch.nn.functional.conv2d(h / 6, w), (y / 3.0) @ u
    args = (torch.randn(2, 8, 5, 8), torch.randn(8, 8, 1, 1), torch.randn(64, 8),
            torch.randn(8, 1))
    gm, fakes = graph_of(fn, *args)
    _, eager = graph_rules.substitute(gm, fakes)
    _, inductor = graph_rules.substitute(gm, fakes, orchestrate=True)
    moved = "generated: conv(F, scale(A)) → conv(scale(F), A)"
    assert moved in eager and moved not in inductor, (eager, inductor)
    # a scale of a graph input is a kernel of its own under Inductor too: it still moves
    assert "generated: mm(scale(X), U) → mm(X, scale(U))" in inductor, inductor


def test_a_language_model_head_computes_only_the_last_position_at_every_length():
    class LastToken(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.head = torch.nn.Linear(64, 1024, bias=False)

        def forward(self, h):
            return torch.log_softmax(self.head(h)[:, -1, :], dim=-1)

    torch.manual_seed(0)
    model = LastToken().eval()
    backend = ollie.OllieBackend(ollie.Options(cache=False, measure_cap_s=0.05))
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad():
        for length in (96, 128, 160):  # Dynamo makes the length a symbol at the second
            h = torch.randn(1, length, 64)
            torch.testing.assert_close(compiled(h), model(h), rtol=1e-5, atol=1e-5)
    assert len(backend.reports) == 2
    assert "generated: tail0(mm(cat0(X, Z), U)) → mm(Z, U)" in backend.reports[1].substitutions


@pytest.mark.parametrize("spatial", [(11, 9), (32,), (6, 7, 5)])
def test_a_difference_of_convolutions_of_one_input_is_one_convolution(spatial):
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[len(spatial)]

    def fn(x, w1, w2):  # sub(conv(F, A), conv(G, A)) = conv(sub(F, G), A)
        return torch.relu(conv(x, w1, stride=2, padding=1) - conv(x, w2, stride=2, padding=1))
    kernel = (3,) * len(spatial)
    args = (torch.randn(2, 8, *spatial), torch.randn(16, 8, *kernel),
            torch.randn(16, 8, *kernel))
    for gm, fakes in (graph_of(fn, *args), symbolic_graph_of(fn, *args)):
        new, applied = graph_rules.substitute(gm, fakes)
        assert applied == ["generated: sub(conv(F, A), conv(G, A)) → conv(sub(F, G), A)"]
        assert count(new, aten.convolution.default) == 1
        torch.testing.assert_close(new(*args), fn(*args), rtol=1e-4, atol=1e-4)


def test_convolutions_of_other_kernels_groups_or_batches_are_not_merged():
    x, w = torch.randn(2, 8, 10, 10), torch.randn(16, 8, 3, 3)
    cases = [  # kernels of two sizes, a grouped convolution, two batches
        (lambda x, w, v: F.conv2d(x, w, stride=2) - F.conv2d(x, v, stride=2),
         (torch.randn(2, 8, 9, 9), w, torch.randn(16, 8, 2, 2))),  # kernels 3, 2: 4×4 both
        (lambda x, w, v: F.conv2d(x, w, padding=1) - F.conv2d(x, v, padding=1, dilation=1,
                                                              stride=1, groups=2),
         (x, w, torch.randn(16, 4, 3, 3))),
        (lambda x, y, w: F.conv2d(x, w) - F.conv2d(y, w), (x, torch.randn(1, 8, 10, 10), w)),
    ]
    for fn, args in cases:
        gm, fakes = graph_of(fn, *args)
        new, applied = graph_rules.substitute(gm, fakes)
        assert not any(line.startswith("generated: ") and "conv" in line for line in applied)
        if new is not None:  # (another rule's rewrite)
            torch.testing.assert_close(new(*args), fn(*args))


def test_convolution_rules_merge_summed_branches_on_weights():
    def fn(x, y, w1, w2):  # add(conv(F, A), conv(G, B)) = conv(cat1(F, G), cat0(A, B))
        return F.conv2d(x, w1) + F.conv2d(y, w2)
    args = (torch.randn(2, 8, 10, 10), torch.randn(2, 4, 10, 10), torch.randn(16, 8, 3, 3),
            torch.randn(16, 4, 3, 3))
    gm, applied = generated_on(fn, args, weights=[2, 3])  # (the filters' cat is folded)
    assert applied == ["generated: add(conv(F, A), conv(G, B)) → conv(cat1(F, G), cat0(A, B))"]
    assert count(gm, aten.convolution.default) == 1
    torch.testing.assert_close(gm(*args), fn(*args), rtol=1e-4, atol=1e-4)


def low_rank_adapted(x, w, b, a, bb):  # peft's spelling, on a batch of sequences
    return F.linear(x, w, b) + F.linear(F.linear(x, a), bb) * 2.0


def products_of_input(gm) -> int:
    """How many products read the first input (through views: a batch of rows)."""
    x = next(iter(gm.graph.find_nodes(op="placeholder")))
    count = 0
    for n in gm.graph.nodes:
        if n.target in (aten.mm.default, aten.addmm.default):
            lhs = n.args[-2]
            while lhs is not x and lhs.target in generated_rules.VIEWS:
                lhs = lhs.args[0]
            count += lhs is x
    return count


def test_a_low_rank_adapter_merges_into_its_weight_in_two_steps_judged_as_one():
    # (x Aᵀ) Bᵀ → x (Aᵀ Bᵀ) alone costs more; with x Wᵀ beside it the two are one product
    torch.manual_seed(0)
    args = (torch.randn(2, 16, 32), torch.randn(48, 32), torch.randn(48), torch.randn(4, 32),
            torch.randn(48, 4))
    gm, fakes = graph_of(low_rank_adapted, *args)
    generated_rules.mark_weights(gm, [1, 2, 3, 4])
    new, applied = graph_rules.substitute(gm, fakes)
    assert "affine_into_matmul: mul.Tensor folded into mm.default" in applied, applied
    assert any(a.startswith("generated: add(mm(mm(") for a in applied), applied
    assert products_of_input(gm) == 2 and products_of_input(new) == 1
    torch.testing.assert_close(new(*args), low_rank_adapted(*args), rtol=1e-4, atol=1e-4)


def test_without_weights_a_few_rows_keep_the_adapter_apart():
    torch.manual_seed(0)  # 4 rows: the product of the adapter's weights costs more per call
    args = (torch.randn(4, 32), torch.randn(32, 32), torch.randn(32), torch.randn(4, 32),
            torch.randn(32, 4))
    gm, fakes = graph_of(low_rank_adapted, *args)
    new, applied = graph_rules.substitute(gm, fakes)
    assert not any(a.startswith("generated: add(mm(mm(") for a in applied), applied
