"""Unrolled loops rolled back up (``ollie.capture.rolling``), alone and through the backend."""
import torch

import ollie
from graph_helpers import count, graph_of
from ollie.capture import graph_rules, rolling
from ollie.cli.bench_suite import bilinear_sum_loop, column_loop, outer_product_loop

aten = torch.ops.aten


def test_a_loop_adding_outer_products_of_rows_becomes_one_reduction():
    args = (torch.randn(6, 4), torch.randn(6, 5))
    gm, fakes = graph_of(outer_product_loop, *args)
    new, applied = rolling.roll(gm, fakes, graph_rules.ON)
    assert applied == ["rolled_sum: 6 copies of one computation on the slices of 2 tensor(s), "
                       "summed"]
    assert count(gm, aten.mul.Tensor) == 6 and count(new, aten.mul.Tensor) == 1, new.code
    assert count(new, aten.select.int) == 0 and count(new, aten.sum.dim_IntList) == 1
    torch.testing.assert_close(new(*args), gm(*args))


def test_a_loop_body_with_a_shared_weight_and_two_reads_of_one_slice_is_batched():
    def fn(x, w, b):  # the weight and bias are shared; x[:, i] is read twice
        total = b
        for i in range(x.shape[1]):
            total = total + torch.tanh(x[:, i] @ w) * x[:, i, :1]
        return total
    args = (torch.randn(3, 5, 4), torch.randn(4, 4), torch.randn(4))
    gm, fakes = graph_of(fn, *args)
    new, applied = rolling.roll(gm, fakes, graph_rules.ON)
    assert applied and "slices of 1 tensor(s)" in applied[0]
    assert count(gm, aten.tanh.default) == 5 and count(new, aten.tanh.default) == 1
    torch.testing.assert_close(new(*args), gm(*args))


def test_terms_that_differ_by_more_than_their_slices_are_not_rolled():
    def weighted(x):  # the constant i + 1 differs between the copies
        total = x[0]
        for i in range(1, x.shape[0]):
            total = total + torch.exp(x[i]) * (i + 1)
        return total

    def some_rows(x):  # rows 0..2 of 4: the positions do not cover the dim
        return sum(torch.exp(x[i]) for i in range(3))

    def random_body(x):  # a random op in the body: each copy draws its own values
        return sum(torch.nn.functional.dropout(x[i], 0.5, True) for i in range(x.shape[0]))
    for fn in (weighted, some_rows, random_body):
        gm, fakes = graph_of(fn, torch.randn(4, 3))
        assert rolling.roll(gm, fakes, graph_rules.ON) == (None, []), fn.__name__


def test_a_rolled_bilinear_loop_runs_as_one_product_through_the_backend():
    torch.manual_seed(0)
    args = (torch.randn(8, 32), torch.randn(32, 32), torch.randn(8, 32))
    backend = ollie.OllieBackend(ollie.Options(cache=False))
    compiled = torch.compile(bilinear_sum_loop, backend=backend)
    with torch.no_grad():
        torch.testing.assert_close(compiled(*args), bilinear_sum_loop(*args), rtol=1e-5,
                                   atol=1e-4)
    report = backend.reports[0]
    assert report.rolled == ["rolled_sum: 8 copies of one computation on the slices of 2 "
                             "tensor(s), summed"], report
    assert len(report.regions) == 1  # the rolled sum is one region, not eight


def test_a_loop_over_attention_heads_joined_along_a_dim_becomes_one_batched_attention():
    def heads_cat(q, k, v):
        return torch.cat([torch.softmax(q[h] @ k[h].T, -1) @ v[h] for h in range(q.shape[0])],
                         -1)

    def heads_stack(q, k, v):  # heads in dim 1, stacked into dim 1 again
        return torch.stack([torch.softmax(q[:, h] @ k[:, h].T, -1) @ v[:, h]
                            for h in range(q.shape[1])], 1)
    for fn, shape in ((heads_cat, (3, 5, 4)), (heads_stack, (5, 3, 4))):
        args = [torch.randn(*shape) for _ in range(3)]
        gm, fakes = graph_of(fn, *args)
        new, applied = rolling.roll(gm, fakes, graph_rules.ON)
        assert applied == ["rolled_cat: 3 copies of one computation on the slices of 3 "
                           f"tensor(s), {'stacked' if fn is heads_stack else 'concatenated'}"]
        assert count(gm, aten.mm.default) == 6 and count(new, aten.mm.default) == 0 and \
            count(new, aten.bmm.default) == 2, new.code
        torch.testing.assert_close(new(*args), gm(*args))


def test_copies_out_of_order_in_a_concatenation_are_not_rolled():
    def reversed_rows(x):
        return torch.cat([torch.exp(x[i]) for i in reversed(range(x.shape[0]))])
    gm, fakes = graph_of(reversed_rows, torch.randn(4, 3))
    assert rolling.roll(gm, fakes, graph_rules.ON) == (None, [])


def test_the_states_of_a_long_recurrence_are_not_a_loop_body():
    def states(x, w):  # each state reads every earlier step: no copies of one body
        h, hs = torch.zeros(x.shape[1]), []
        for t in range(x.shape[0]):
            h = torch.tanh(x[t] + h @ w)
            hs.append(h)
        return torch.stack(hs), sum(hs)
    gm, fakes = graph_of(states, torch.randn(300, 4), torch.randn(4, 4))
    assert rolling.roll(gm, fakes, graph_rules.ON) == (None, [])


def test_a_loop_over_heads_rolls_up_in_a_graph_of_any_sequence_length():
    def heads(q, k, v):
        return torch.cat([torch.softmax(q[h] @ k[h].T, -1) @ v[h] for h in range(q.shape[0])],
                         -1)
    backend = ollie.OllieBackend(ollie.Options(cache=False))
    compiled = torch.compile(heads, backend=backend, dynamic=True)
    with torch.no_grad():
        for n in (6, 9, 13):  # the heads fixed by the loop, the length symbolic
            args = [torch.randn(3, n, 4) for _ in range(3)]
            torch.testing.assert_close(compiled(*args), heads(*args))
    assert backend.graphs == 1
    assert backend.reports[0].rolled == ["rolled_cat: 3 copies of one computation on the "
                                         "slices of 3 tensor(s), concatenated"]


def test_a_body_vmap_cannot_batch_stays_unrolled_and_other_loops_still_roll(monkeypatch):
    def two_loops(x, y):
        return sum(torch.exp(x[i]) for i in range(x.shape[0])), \
            sum(torch.sin(y[i]) for i in range(y.shape[0]))
    gm, fakes = graph_of(two_loops, torch.randn(4, 3), torch.randn(5, 3))
    real_vmap, calls = torch.func.vmap, []

    def vmap(f, in_dims):  # as if the sin loop's body (rolled first: the later) had no
        calls.append(f)    # batching rule
        if len(calls) == 1:
            raise RuntimeError("Batching rule not implemented for aten::sin")
        return real_vmap(f, in_dims)
    monkeypatch.setattr(torch.func, "vmap", vmap)
    new, applied = rolling.roll(gm, fakes, graph_rules.ON)
    assert applied == ["rolled_sum: 4 copies of one computation on the slices of 1 tensor(s), "
                       "summed"]
    assert count(new, aten.exp.default) == 1 and count(new, aten.sin.default) == 5


def test_rows_taken_by_unbind_and_a_body_with_its_own_constants_roll_up():
    def outer_unbind(u, v):
        return sum(torch.outer(a, b) for a, b in zip(u.unbind(0), v.unbind(0)))

    def per_row_norm(x):  # 1e-5 becomes a tensor inside vmap
        return torch.stack([(x[i] - x[i].mean()) / (x[i].std() + 1e-5)
                            for i in range(x.shape[0])])
    for fn, args, line in (
            (outer_unbind, (torch.randn(5, 3), torch.randn(5, 4)),
             "rolled_sum: 5 copies of one computation on the slices of 2 tensor(s), summed"),
            (per_row_norm, (torch.randn(6, 8),),
             "rolled_cat: 6 copies of one computation on the slices of 1 tensor(s), stacked")):
        gm, fakes = graph_of(fn, *args)
        new, applied = rolling.roll(gm, fakes, graph_rules.ON)
        assert applied == [line], fn.__name__
        torch.testing.assert_close(new(*args), gm(*args))


def test_heads_taken_by_split_into_size_one_pieces_roll_up_keeping_their_dim():
    def heads_split(q, k, v):  # each piece keeps the heads dim, of size 1
        return torch.cat([torch.softmax(a @ b.transpose(-1, -2), -1) @ c
                          for a, b, c in zip(q.split(1, 1), k.split(1, 1), v.split(1, 1))], 1)
    args = [torch.randn(2, 3, 5, 4) for _ in range(3)]
    gm, fakes = graph_of(heads_split, *args)
    new, applied = rolling.roll(gm, fakes, graph_rules.ON)
    assert applied == ["rolled_cat: 3 copies of one computation on the slices of 3 tensor(s), "
                       "concatenated"]
    assert count(new, aten._softmax.default) + count(new, aten.amax.default) == 1, new.code
    torch.testing.assert_close(new(*args), gm(*args))


def test_columns_taken_by_slices_of_one_roll_up_as_a_product():
    args = (torch.randn(5, 4), torch.randn(4, 3))  # x[:, i:i+1] keeps its dim
    gm, fakes = graph_of(column_loop, *args)
    new, applied = rolling.roll(gm, fakes, graph_rules.ON)
    assert applied == ["rolled_sum: 4 copies of one computation on the slices of 2 tensor(s), "
                       "summed"]
    assert count(gm, aten.mul.Tensor) == 4 and count(new, aten.mul.Tensor) == 1, new.code
    torch.testing.assert_close(new(*args), gm(*args))


def test_slices_longer_than_one_or_strided_are_not_loop_positions():
    def pairs(x):
        return x[:, 0:2] * 2 + x[:, 2:4] * 2 + x[:, 0:4:2] * 2
    args = (torch.randn(5, 4),)
    gm, fakes = graph_of(pairs, *args)
    new, applied = rolling.roll(gm, fakes, graph_rules.ON)
    assert applied == []
