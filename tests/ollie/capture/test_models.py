"""Whole models under ``backend="ollie"``: a ResNet-18 (the bench's, ``ollie.cli.bench_models``)
and a pre-norm transformer block written here (no torchvision), in inference and for one
training step, match eager."""
import copy

import pytest
import torch
import torch.nn as nn

import ollie  # noqa: F401  (registers backend="ollie")
from ollie.cli.bench_models import ResNet18


class TransformerBlock(nn.Module):
    def __init__(self, d=32, heads=4, hidden=64):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, hidden), nn.GELU(), nn.Linear(hidden, d))

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q, k, v = (t.view(b, n, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        att = torch.softmax(q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5, dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.norm2(x))


MODELS = {
    "resnet18": (ResNet18, (2, 3, 16, 16)),
    "transformer": (TransformerBlock, (2, 6, 32)),
}
OPTIONS = {"inductor": False, "measure_cap_s": 0.05, "budget_s": 1.0}


@pytest.mark.parametrize("name", MODELS)
def test_inference_matches_eager(name):
    cls, shape = MODELS[name]
    torch.manual_seed(0)
    model = cls().eval()
    x = torch.randn(shape)
    compiled = torch.compile(model, backend="ollie", options=OPTIONS)
    with torch.no_grad():
        ref, out = model(x), compiled(x)
    assert torch.allclose(out, ref, rtol=1e-4, atol=1e-4 * ref.abs().max().item())


@pytest.mark.parametrize("name", MODELS)
def test_one_training_step_matches_eager(name):
    cls, shape = MODELS[name]
    torch.manual_seed(0)
    model = cls().train()
    twin = copy.deepcopy(model)
    x = torch.randn(shape)
    compiled = torch.compile(twin, backend="ollie", options=OPTIONS)
    results = []
    for m in (model, compiled):
        out = m(x)
        loss = out.square().mean()
        loss.backward()
        results.append((loss.item(), out.detach()))
    (ref_loss, ref_out), (loss, out) = results
    assert loss == pytest.approx(ref_loss, rel=1e-4)
    assert torch.allclose(out, ref_out, rtol=1e-4, atol=1e-4 * ref_out.abs().max().item())
    for (pname, p), q in zip(model.named_parameters(), twin.parameters()):
        assert torch.allclose(q.grad, p.grad, rtol=1e-3, atol=1e-4 * p.grad.abs().max().item()
                              + 1e-7), pname
    buffers = dict(model.named_buffers())
    for bname, b in twin.named_buffers():  # batch-norm running stats: updated exactly once
        assert torch.allclose(b.float(), buffers[bname].float(), atol=1e-5), bname
