"""Training through Ollie: forward and backward graphs both go through derivation, and the
gradients are eager's."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import ollie

FAST = dict(inductor=False, measure_cap_s=0.05, budget_s=1.0)


def f64(*shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g, dtype=torch.float64, requires_grad=True)
            for s in shapes]


def titles(opt):
    backend = getattr(opt, "backend", None) or opt.ollie_backend
    return [r.title for r in backend.reports]


@pytest.mark.parametrize("inductor", [False, True])
def test_gradients_through_a_matmul_chain(inductor):
    def chain(a, b, c):
        return ((a @ b) @ c).tanh()
    opt = ollie.optimize(chain, **{**FAST, "inductor": inductor})
    a, b, c = f64((24, 16), (16, 16), (16, 2))
    assert torch.autograd.gradcheck(opt, (a, b, c))
    assert any(t.startswith("forward") for t in titles(opt))
    backward = [r for r in opt.backend.reports if r.title.startswith("backward")]
    assert backward and backward[0].left  # the backward graph went through translation


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(2, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 4, 3, stride=2)
        self.fc = nn.Linear(4 * 3 * 3, 3)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        return self.fc(x.flatten(1))


def test_gradients_through_a_conv_net():
    model = ConvNet().double()
    opt = ollie.optimize(model, **FAST)
    (x,) = f64((2, 2, 8, 8))
    assert torch.autograd.gradcheck(lambda x: opt(x), (x,))
    for p, name in ((model.conv1.weight, "conv1"), (model.fc.weight, "fc")):
        p.grad = None
        opt(x).square().sum().backward()
        got = p.grad.clone()
        p.grad = None
        model(x).square().sum().backward()
        assert torch.allclose(got, p.grad, atol=1e-10), name


class Attention(nn.Module):
    def __init__(self, d=8, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (t.view(b, n, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        att = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
        return self.out((att @ v).transpose(1, 2).reshape(b, n, d))


def test_gradients_through_an_attention_block():
    model = Attention().double()
    opt = ollie.optimize(model, **FAST)
    (x,) = f64((2, 5, 8))
    assert torch.autograd.gradcheck(lambda x: opt(x), (x,))


class MLPConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.mlp = nn.Sequential(nn.Linear(4 * 6 * 6, 16), nn.ReLU(), nn.Linear(16, 3))

    def forward(self, x):
        return self.mlp(F.relu(self.conv(x)).flatten(1))


@pytest.mark.parametrize("inductor", [False, True])
def test_three_sgd_steps_give_eager_losses(inductor):
    torch.manual_seed(0)
    x, y = torch.randn(8, 1, 6, 6), torch.randint(0, 3, (8,))
    losses = {}
    for mode in ("eager", "ollie"):
        torch.manual_seed(1)
        model = MLPConv()
        run = model if mode == "eager" else ollie.optimize(model, **{**FAST,
                                                                     "inductor": inductor})
        sgd = torch.optim.SGD(model.parameters(), lr=0.1)
        losses[mode] = []
        for _ in range(3):
            sgd.zero_grad()
            loss = F.cross_entropy(run(x), y)
            loss.backward()
            sgd.step()
            losses[mode].append(loss.item())
    assert losses["eager"][0] > losses["eager"][-1]  # it trains
    assert losses["ollie"] == pytest.approx(losses["eager"], rel=1e-5)


def test_a_graph_break_in_the_middle_still_optimizes_both_halves():
    def two_chains(a, b, c):
        t = (a @ b) @ c
        print("", end="")  # Dynamo cannot trace print: the graph breaks here
        return (b @ a) @ t

    a, b, c = torch.randn(256, 256), torch.randn(256, 256), torch.randn(256, 4)
    opt = ollie.optimize(two_chains, **FAST)
    ref = two_chains(a, b, c)
    out = opt(a, b, c)
    assert torch.allclose(out, ref, rtol=1e-3, atol=1e-3 * ref.abs().max().item())
    adopted = [r for r in opt.backend.reports if r.adopted_regions]
    assert len(opt.backend.reports) >= 2 and len(adopted) == 2
    assert "graph break" in str(opt.explain())


class Projections(nn.Module):
    """Three linear maps of one input, as attention's Q, K and V."""

    def __init__(self, d=16):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        return torch.tanh(self.q(x)) * self.k(x) + self.v(x)


def test_a_training_loop_whose_last_batch_is_partial_keeps_its_merge_at_every_size(
        monkeypatch):
    """The partial batch makes Dynamo compile again with the batch symbolic: the merged
    projections (forward) and weight gradients (backward) hold for every batch size, so
    the substitutions stay, and the parameters follow eager's steps exactly."""
    from ollie.cost import measure
    monkeypatch.setattr(measure, "compare",  # the rewrite measures faster, at any size
                        lambda *a, **k: measure.Comparison(2e-3, 1e-3, 2.0, 0.0, 5))
    torch.manual_seed(0)
    model, reference = Projections(), Projections()
    reference.load_state_dict(model.state_dict())
    steps = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, reference)]
    opt = ollie.optimize(model, measure_cap_s=0.05, cache=False)
    for batch in (8, 8, 5, 8, 3):
        x = torch.randn(batch, 16)
        for fn, step in ((opt, steps[0]), (reference, steps[1])):
            step.zero_grad()
            fn(x).pow(2).mean().backward()
            step.step()
        for a, b in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    reports = opt.ollie_backend.reports
    assert [r.title.split()[0] for r in reports] == ["forward", "backward"] * 2  # 2 compiles
    for report in reports[2:]:  # the symbolic batch's
        assert report.adopted and report.substitutions, report.title
    assert reports[2].substitutions[0].startswith("shared_lhs")
    assert reports[3].substitutions[0].startswith("shared_rhs")
