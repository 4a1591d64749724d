"""Affine maps folded into the contraction before them (``ollie.capture.affine_fold``) where
a view stands between: a linear layer on a batch of sequences. The folds on bare
contractions are tested with the other graph rules (``test_graph_rules``)."""
import torch
import torch.nn.functional as F

from graph_helpers import count, graph_of
from ollie.capture import graph_rules

aten = torch.ops.aten


def test_a_scale_and_shift_per_feature_fold_through_the_view_of_a_linear_layer():
    def fn(x, w, b, gamma, beta):  # a layer scale, then a shift
        return torch.relu(F.linear(x, w, b) * gamma + beta)
    torch.manual_seed(0)
    args = (torch.randn(2, 16, 32), torch.randn(24, 32), torch.randn(24), torch.rand(24) + 0.5,
            torch.randn(24))
    gm, fakes = graph_of(fn, *args)
    new, applied = graph_rules.substitute(gm, fakes)
    assert applied == ["affine_into_matmul: mul.Tensor folded into addmm.default",
                       "affine_into_matmul: add.Tensor folded into addmm.default"], applied
    # what is left of the scale and shift reads the weights alone
    x_side = [n for n in new.graph.nodes if n.target in (aten.mul.Tensor, aten.add.Tensor)
              and n.meta["val"].dim() == 3]
    assert count(gm, aten.mul.Tensor) == 1 and x_side == []
    torch.testing.assert_close(new(*args), fn(*args), rtol=1e-5, atol=1e-5)


def test_a_factor_per_position_of_the_sequence_does_not_fold_into_the_weights():
    def fn(x, y, w, v, s):  # s scales rows, not the layer's features: no weight holds it
        return F.linear(x, w) * s, F.linear(y, v) * 3.0
    args = (torch.randn(2, 16, 32), torch.randn(4, 16, 32), torch.randn(32, 32),
            torch.randn(32, 32), torch.randn(16, 1))
    gm, fakes = graph_of(fn, *args)
    new, applied = graph_rules.substitute(gm, fakes)
    assert applied == ["affine_into_matmul: mul.Tensor folded into mm.default"], applied
    torch.testing.assert_close(new(*args), fn(*args), rtol=1e-5, atol=1e-5)
