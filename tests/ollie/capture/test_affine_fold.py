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


def test_under_inductor_folds_that_leave_the_products_work_as_it_was_are_not_kept():
    """A shift folded into a product makes ``mm`` an ``addmm`` of the same work; Inductor
    fuses the addition in either form, so judging it would be a second compile for nothing."""
    from ollie.capture import graph_pass, substitution

    def fn(x, w, t):
        return torch.tanh(x @ w + t)
    args = (torch.randn(16, 32), torch.randn(32, 24), torch.randn(24))
    gm, fakes = graph_of(fn, *args)
    report = graph_pass.GraphReport("g")
    assert substitution.substitute(gm, gm, fakes, report, inductor=True) is None
    assert any("not kept" in line[2] for line in report.left), report.left
    report = graph_pass.GraphReport("g")
    assert substitution.substitute(gm, gm, fakes, report, inductor=False) is not None
    assert report.substitutions == ["affine_into_matmul: add.Tensor folded into mm.default"]
