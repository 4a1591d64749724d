"""Convolutions of one input, summed, as one convolution (``ollie.capture.conv_sums``)."""
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

import ollie
from graph_helpers import count, graph_of, symbolic_graph_of
from ollie.capture import graph_rules

aten = torch.ops.aten
MERGED = "summed_convs: 2 × convolution.default → 1"


def branches(x, w3, b3, w1, b1):  # RepVGG's branches: 3×3, 1×1 and the identity
    return torch.relu(F.conv2d(x, w3, b3, padding=1) + F.conv2d(x, w1, b1) + x)


def branch_args():
    torch.manual_seed(0)
    return (torch.randn(2, 8, 9, 7), torch.randn(8, 8, 3, 3), torch.randn(8),
            torch.randn(8, 8, 1, 1), torch.randn(8))


def test_a_3x3_and_a_1x1_convolution_of_one_input_become_one_3x3_convolution():
    args = branch_args()
    gm, fakes = graph_of(branches, *args)
    new, applied = graph_rules.substitute(gm, fakes)
    assert applied == [MERGED], applied
    (conv,) = new.graph.find_nodes(op="call_function", target=aten.convolution.default)
    assert conv.args[4] == [1, 1] and count(new, aten.constant_pad_nd.default) == 1
    torch.testing.assert_close(new(*args), branches(*args), rtol=1e-5, atol=1e-5)


def test_windows_that_read_other_input_positions_are_not_summed():
    def fn(x, w3, b3, w1, b1):  # both 3×3 outputs, but the 3×3 reads one row and column
        return F.conv2d(x, w3, b3, stride=3) + F.conv2d(x, w1, b1, stride=3)  # further on
    args = (torch.randn(1, 8, 9, 9), *branch_args()[1:])
    gm, fakes = graph_of(fn, *args)
    assert fn(*args).shape == (1, 8, 3, 3)
    _, applied = graph_rules.substitute(gm, fakes)
    assert not any(a.startswith("summed_convs") for a in applied), applied


def test_strided_convolutions_sum_and_convolutions_of_other_groups_do_not():
    def strided(x, w3, b3, w1, b1):
        return F.conv2d(x, w3, b3, padding=1, stride=2) + F.conv2d(x, w1, b1, stride=2)
    args = branch_args()
    gm, fakes = graph_of(strided, *args)
    new, applied = graph_rules.substitute(gm, fakes)
    assert applied == [MERGED], applied
    torch.testing.assert_close(new(*args), strided(*args), rtol=1e-5, atol=1e-5)

    def grouped(x, w3, b3, w1, b1):  # a grouped 3×3 and a dense 1×1: other weight layouts
        return F.conv2d(x, w3[:, :4], b3, padding=1, groups=2) + F.conv2d(x, w1, b1)
    gm, fakes = graph_of(grouped, *args)
    _, applied = graph_rules.substitute(gm, fakes)
    assert not any(a.startswith("summed_convs") for a in applied), applied


def test_a_convolution_used_elsewhere_is_kept():
    def fn(x, w3, b3, w1, b1):
        y = F.conv2d(x, w1, b1)
        return F.conv2d(x, w3, b3, padding=1) + y, y.sum()
    gm, fakes = graph_of(fn, *branch_args())
    _, applied = graph_rules.substitute(gm, fakes)
    assert not any(a.startswith("summed_convs") for a in applied), applied


def test_images_of_any_size_sum_their_convolutions():
    w3, b3, w1, b1 = branch_args()[1:]

    def fn(x):  # the weights are fixed; batch, height and width are size symbols
        return branches(x, w3, b3, w1, b1)
    x = torch.randn(2, 8, 9, 7)
    gm, fakes = symbolic_graph_of(fn, x)
    new, applied = graph_rules.substitute(gm, fakes)
    assert applied == [MERGED], applied
    for size in ((1, 8, 5, 6), (3, 8, 12, 4)):
        x = torch.randn(size)
        torch.testing.assert_close(new(x), fn(x), rtol=1e-5, atol=1e-5)


class RepVGGBlock(nn.Module):
    def __init__(self, c=8):
        super().__init__()
        self.a, self.b = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.Conv2d(c, c, 1, bias=False)
        self.bn_a, self.bn_b = nn.BatchNorm2d(c), nn.BatchNorm2d(c)

    def forward(self, x):
        return F.relu(self.bn_a(self.a(x)) + self.bn_b(self.b(x)) + x)


def test_a_repvgg_block_sums_its_branches_through_the_backend_and_trains_alike():
    torch.manual_seed(0)
    block = RepVGGBlock()
    for bn in (block.bn_a, block.bn_b):
        bn.running_mean.uniform_(-1, 1), bn.running_var.uniform_(0.5, 2)
    x = torch.randn(2, 8, 10, 10)
    backend = ollie.OllieBackend(ollie.Options(cache=False, measure_cap_s=0.05))
    with torch.no_grad():
        out = torch.compile(block.eval(), backend=backend)(x)
    torch.testing.assert_close(out, block(x), rtol=1e-5, atol=1e-5)
    assert any(s.startswith("summed_convs") for s in backend.reports[0].substitutions)

    trained = copy.deepcopy(block).train()  # batch statistics: the sum is of raw convolutions
    compiled = torch.compile(trained, backend=ollie.OllieBackend(ollie.Options(cache=False)))
    compiled(x).square().sum().backward()
    block.train()(x).square().sum().backward()
    for p, q in zip(trained.parameters(), block.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4)
