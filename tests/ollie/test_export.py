"""``ollie.export``: an ExportedProgram with Ollie's rewrites, weights-only computations folded
into constants, packaged by AOTInductor and loaded back in a fresh process."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch.export.graph_signature import InputKind

import codegen.ops  # noqa: F401  (registers the ollie:: ops)
import ollie

ROOT = Path(__file__).resolve().parents[2]
FAST = {"budget_s": 1.0, "cache": False}


class LowRank(torch.nn.Module):
    """Two linear maps with nothing between, and a banded product of Ollie's own."""

    def __init__(self):
        super().__init__()
        self.down, self.up = torch.nn.Linear(256, 256), torch.nn.Linear(256, 8)

    def forward(self, x, q, k):
        return self.up(self.down(x)), torch.ops.ollie.g2bmm(q, k, 2, 1, 0)


def inputs():
    g = torch.Generator().manual_seed(1)
    return (torch.randn(512, 256, generator=g), torch.randn(2, 32, 8, generator=g),
            torch.randn(2, 32, 8, generator=g))


def kinds(ep) -> dict:
    return {s.arg.name: s.kind for s in ep.graph_signature.input_specs}


def test_folded_weight_product_replaces_the_first_linear_and_the_package_loads_elsewhere(
        tmp_path):
    torch.manual_seed(0)
    model, args = LowRank().eval(), inputs()
    reports = []
    ep = ollie.export(model, args, options=FAST, report=reports)
    assert reports[0].adopted  # x (W1ᵀ W2ᵀ): 32× fewer multiply-adds than (x W1ᵀ) W2ᵀ
    assert "down.weight" not in ep.state_dict  # read only by the folded product
    assert InputKind.CONSTANT_TENSOR in kinds(ep).values()
    targets = {n.target for n in ep.graph_module.graph.nodes if n.op == "call_function"}
    assert torch.ops.ollie.g2bmm.default in targets
    with torch.no_grad():
        expected = model(*args)
    for got, want in zip(ep.module()(*args), expected):
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-4)

    package = torch._inductor.aoti_compile_and_package(ep, package_path=str(tmp_path / "m.pt2"))
    torch.save({"args": args, "expected": expected}, tmp_path / "io.pt")
    check = textwrap.dedent(f"""
        import torch, ollie, codegen.ops
        io = torch.load({str(tmp_path / "io.pt")!r})
        run = torch._inductor.aoti_load_package({package!r})
        outs = run(*io["args"])
        print(max((a - b).abs().max().item() for a, b in zip(outs, io["expected"])))
    """)
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert float(done.stdout.strip().splitlines()[-1]) <= 1e-3


class Scaled(torch.nn.Module):
    """A batch norm's inference scale by hand, and a transposed weight."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(16, 16))
        self.register_buffer("var", torch.rand(16) + 0.5)
        self.gamma = torch.nn.Parameter(torch.randn(16))

    def forward(self, x):
        return (x @ self.w.t()) * (self.gamma / torch.sqrt(self.var + 1e-5))


def test_weights_only_arithmetic_is_folded_and_views_of_weights_are_not():
    torch.manual_seed(0)
    model, x = Scaled().eval(), torch.randn(4, 16)
    ep = ollie.export(model, (x,), options=FAST)
    assert sorted(ep.state_dict) == ["w"]  # gamma and var only fed the folded scale
    assert list(kinds(ep).values()).count(InputKind.CONSTANT_TENSOR) == 1
    with torch.no_grad():
        assert torch.allclose(ep.module()(x), model(x), atol=1e-5)


class Counting(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls.add_(1)
        return x * (self.calls * 2.0)


def test_a_buffer_the_program_updates_is_not_folded():
    x = torch.randn(3)
    run = ollie.export(Counting(), (x,), options=FAST).module()
    assert torch.allclose(run(x), x * 2) and torch.allclose(run(x), x * 4)


def test_dynamic_batch_exports_and_runs_at_other_sizes():
    torch.manual_seed(0)
    model = Scaled().eval()
    batch = torch.export.Dim("batch", min=2, max=1024)
    ep = ollie.export(model, (torch.randn(8, 16),), dynamic_shapes={"x": {0: batch}},
                      options=FAST)
    for n in (3, 100):
        x = torch.randn(n, 16)
        with torch.no_grad():
            assert torch.allclose(ep.module()(x), model(x), atol=1e-5)


def test_a_function_is_refused_with_a_clear_error():
    with pytest.raises(TypeError, match="expected an nn.Module"):
        ollie.export(lambda x: x, (torch.randn(2),))


def test_an_ollie_failure_leaves_the_export_as_torch_made_it(monkeypatch):
    from ollie.capture import graph_pass

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(graph_pass, "rewrite_graph", broken)
    torch.manual_seed(0)
    model, x = Scaled().eval(), torch.randn(4, 16)
    with pytest.warns(ollie.OllieWarning, match="a bug"):
        ep = ollie.export(model, (x,), options=FAST)
    with torch.no_grad():
        assert torch.allclose(ep.module()(x), model(x), atol=1e-5)
