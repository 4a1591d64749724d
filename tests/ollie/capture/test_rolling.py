"""Unrolled loops rolled back up (``ollie.capture.rolling``), alone and through the backend."""
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import ollie
from ollie.capture import rolling
from ollie.cli.bench_suite import bilinear_sum_loop, outer_product_loop

aten = torch.ops.aten


def graph_of(fn, *args):
    gm = make_fx(fn, tracing_mode="fake")(*args)
    return gm, [n.meta["val"] for n in gm.graph.find_nodes(op="placeholder")]


def count(gm, target) -> int:
    return sum(n.target == target for n in gm.graph.nodes)


def test_a_loop_adding_outer_products_of_rows_becomes_one_reduction():
    args = (torch.randn(6, 4), torch.randn(6, 5))
    gm, fakes = graph_of(outer_product_loop, *args)
    new, applied = rolling.roll(gm, fakes)
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
    new, applied = rolling.roll(gm, fakes)
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
        assert rolling.roll(gm, fakes) == (None, []), fn.__name__


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
