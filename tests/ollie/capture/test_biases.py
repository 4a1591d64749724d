"""Biases of linear layers and convolutions carried through the generated graph rules
(``ollie.capture.biases``): a difference of layers is one layer by the weights' and the
biases' differences; a bias goes through a product on the right, never on the left."""
import warnings

import pytest
import torch
import torch.nn.functional as F

import ollie
from graph_helpers import count, generated_on, graph_of, symbolic_graph_of
from ollie.capture import generated_rules, graph_rules

aten = torch.ops.aten

DIFFERENCE = "generated: sub(conv(F, A), conv(G, A)) → conv(sub(F, G), A)"
CHAIN = "generated: mm(mm(X, Y), V) → mm(X, mm(Y, V))"


@pytest.mark.parametrize("biased", [(True, True), (True, False), (False, True)])
def test_the_biases_of_a_difference_of_convolutions_are_subtracted_alike(biased):
    def fn(x, w1, b1, w2, b2):  # conv(F, A) + b1 - (conv(G, A) + b2)
        return torch.tanh(F.conv2d(x, w1, b1 if biased[0] else None, padding=2) -
                          F.conv2d(x, w2, b2 if biased[1] else None, padding=2))
    torch.manual_seed(0)
    args = (torch.randn(2, 8, 11, 9), torch.randn(16, 8, 5, 5), torch.randn(16),
            torch.randn(16, 8, 5, 5), torch.randn(16))
    for gm, fakes in (graph_of(fn, *args), symbolic_graph_of(fn, *args)):
        new, applied = graph_rules.substitute(gm, fakes)
        assert applied == [DIFFERENCE], applied
        (conv,) = new.graph.find_nodes(op="call_function", target=aten.convolution.default)
        assert conv.args[2] is not None  # = conv(sub(F, G), A) + (b1 - b2)
        torch.testing.assert_close(new(*args), fn(*args), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("second_bias", [True, False])
def test_convolutions_of_one_input_concatenated_concatenate_their_biases(second_bias):
    def fn(x, w1, b1, w2, b2):  # an unbiased convolution's piece of the bias: zeros
        return torch.cat([F.conv2d(x, w1, b1), F.conv2d(x, w2, b2 if second_bias else None)], 1)
    torch.manual_seed(0)
    args = (torch.randn(2, 8, 9, 7), torch.randn(8, 8, 3, 3), torch.randn(8),
            torch.randn(4, 8, 3, 3), torch.randn(4))
    gm, applied = generated_on(fn, args)
    assert applied == ["generated: cat0(conv(F, A), conv(G, A)) → conv(cat0(F, G), A)"]
    assert count(gm, aten.convolution.default) == 1
    torch.testing.assert_close(gm(*args), fn(*args), rtol=1e-4, atol=1e-4)


def test_a_linear_layer_s_bias_goes_through_a_difference_and_a_product_of_weights():
    def difference(x, w1, b1, w2, b2):  # x W1ᵀ + b1 - (x W2ᵀ + b2) = x (W1 - W2)ᵀ + (b1 - b2)
        return torch.tanh(F.linear(x, w1, b1) - F.linear(x, w2, b2))

    def chain(x, w1, b1, w2, b2):  # (x W1ᵀ) W2ᵀ + b2 = x (W2 W1)ᵀ + b2
        return torch.tanh(F.linear(F.linear(x, w1), w2, b2))
    torch.manual_seed(0)
    args = (torch.randn(16, 32), torch.randn(32, 32), torch.randn(32), torch.randn(24, 32),
            torch.randn(24))
    for fn, line in ((difference, "sub(mm(X, U), mm(X, W)) → mm(X, sub(U, W))"),
                     (chain, "mm(mm(X, Y), V) → mm(X, mm(Y, V))")):
        args = args if fn is chain else args[:3] + (torch.randn(32, 32), torch.randn(32))
        for gm, fakes in (graph_of(fn, *args), symbolic_graph_of(fn, *args)):
            generated_rules.mark_weights(gm, [1, 2, 3, 4])
            new, applied = graph_rules.substitute(gm, fakes)
            assert applied == [f"generated: {line}"], applied
            assert count(new, aten.addmm.default) == 1  # (the bias, carried)
            torch.testing.assert_close(new(*args), fn(*args), rtol=1e-4, atol=1e-4)


def test_a_bias_goes_through_a_product_on_the_right_but_not_on_the_left():
    def chain(x, w1, b1, w2, b2):  # (x W1ᵀ + b1) W2ᵀ + b2 = x (W2 W1)ᵀ + (W2 b1 + b2)
        return torch.tanh(F.linear(F.linear(x, w1, b1), w2, b2))

    def left(m, x, w1, b1):  # M (x W1ᵀ + 1b1ᵀ) = (M x) W1ᵀ + (M1) b1ᵀ: no bias of rows
        return torch.tanh(m @ F.linear(x, w1, b1))
    torch.manual_seed(0)
    args = (torch.randn(16, 64), torch.randn(256, 64), torch.randn(256), torch.randn(48, 256),
            torch.randn(48))
    gm, fakes = graph_of(chain, *args)
    generated_rules.mark_weights(gm, [1, 2, 3, 4])
    new, applied = graph_rules.substitute(gm, fakes)
    assert applied[0] == CHAIN, applied  # (W2 b1 is a one-row product by W2, like W2 W1)
    assert count(new, aten.addmm.default) == 1  # one product of x, the biases carried
    torch.testing.assert_close(new(*args), chain(*args), rtol=1e-4, atol=1e-4)
    args = (torch.randn(4, 256), torch.randn(256, 64), torch.randn(128, 64), torch.randn(128))
    assert generated_on(left, args, weights=[2, 3])[1] == []  # (M x) W1ᵀ would cost less


def test_two_linear_layers_of_a_batch_of_any_length_run_as_one_with_folded_weights():
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Linear(256, 48)).eval()
    backend = ollie.OllieBackend(ollie.Options(cache=False, measure_cap_s=0.05))
    compiled = torch.compile(model, backend=backend, dynamic=True)
    with torch.no_grad():
        for rows in (16, 24):
            x = torch.randn(rows, 64)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
        assert CHAIN in backend.reports[0].substitutions
        model[0].bias.add_(1.0)  # a weight changed in place: the folded bias follows
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)


def test_a_bias_carried_through_a_product_of_inputs_compiles_under_inductor():
    def chain(x, w1, b1, w2, b2):  # (x W1 + b1) W2 + b2, the cheaper way: b1ᵀW2 per call
        return torch.addmm(b2, torch.addmm(b1, x, w1), w2)
    torch.manual_seed(0)
    args = (torch.randn(256, 64), torch.randn(64, 128), torch.randn(128),
            torch.randn(128, 64), torch.randn(64))
    backend = ollie.OllieBackend(ollie.Options(cache=False, measure_cap_s=0.05))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ollie.OllieWarning)  # (Inductor lowers no ``mv``)
        out = torch.compile(chain, backend=backend)(*args)
    torch.testing.assert_close(out, chain(*args), rtol=1e-4, atol=1e-3)
    assert CHAIN in backend.reports[0].substitutions


class BiasedDifference(torch.nn.Module):
    def __init__(self, c=8):
        super().__init__()
        self.a = torch.nn.Conv2d(c, c, 3, padding=1)
        self.b = torch.nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return torch.tanh(self.a(x) - self.b(x))


def _one_convolution(report) -> bool:
    """Whether the rewrite of the graph runs one convolution where it ran two: by the graph
    substitution, or by a region's derived program (one sum, over the difference's weights)."""
    import ir
    return DIFFERENCE in report.substitutions or any(
        r.kernel is not None and sum(bool(s.summation) for s in ir.sub_scopes(r.chosen)) == 1
        for r in report.regions)


def test_a_difference_of_conv2d_layers_is_one_convolution_in_inference_and_training():
    torch.manual_seed(0)
    model, x = BiasedDifference(), torch.randn(2, 8, 10, 10)
    backend = ollie.OllieBackend(ollie.Options(cache=False, measure_cap_s=0.05))
    with torch.no_grad():
        out = torch.compile(model.eval(), backend=backend)(x)
    torch.testing.assert_close(out, model(x), rtol=1e-5, atol=1e-5)
    assert _one_convolution(backend.reports[0])

    backend = ollie.OllieBackend(ollie.Options(cache=False))
    torch.compile(model.train(), backend=backend)(x).square().sum().backward()
    assert _one_convolution(backend.reports[0])  # (the biases' difference: per call)
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).square().sum().backward()
    for grad, p in zip(grads, model.parameters()):
        torch.testing.assert_close(grad, p.grad, rtol=1e-4, atol=1e-4)
