"""The ``ollie::`` custom ops: they pass ``torch.library.opcheck``, give the dense banded
product's numbers, and a lowered banded kernel traces to one ``ollie`` node that Inductor
compiles around."""
import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import codegen
import codegen.ops  # noqa: F401  (registers the ops)
from ir import Tensor, ops


def dense_g2bmm(q, k, w, d, offset):
    rows, keys = q.shape[-2], k.shape[-2]
    out = q.new_zeros((*q.shape[:-1], 2 * w + 1))
    for j in range(2 * w + 1):
        for i in range(rows):
            t = i + d * (j - w) + offset
            if 0 <= t < keys:
                out[..., i, j] = (q[..., i, :] * k[..., t, :]).sum(-1)
    return out


CASES = [(2, 1, 0), (2, 3, 0), (1, 2, 3), (3, 1, -2)]  # (w, d, offset)


@pytest.mark.parametrize("w, d, offset", CASES)
def test_g2bmm_and_gbmm_pass_opcheck(w, d, offset):
    q, k = torch.randn(2, 11, 4), torch.randn(2, 9, 4)
    a, v = torch.randn(2, 11, 2 * w + 1), torch.randn(2, 9, 3)
    torch.library.opcheck(torch.ops.ollie.g2bmm.default, (q, k, w, d, offset))
    torch.library.opcheck(torch.ops.ollie.gbmm.default, (a, v, w, d, offset))


@pytest.mark.parametrize("w, d, offset", CASES)
def test_g2bmm_is_the_banded_part_of_the_dense_product(w, d, offset):
    q, k = torch.randn(3, 10, 5, dtype=torch.float64), torch.randn(3, 8, 5, dtype=torch.float64)
    got = torch.ops.ollie.g2bmm(q, k, w, d, offset)
    assert torch.allclose(got, dense_g2bmm(q, k, w, d, offset))


def test_gbmm_is_the_adjoint_of_g2bmm_in_its_first_operand():
    # <g2bmm(q, k), a> = <q, gbmm(a, k)>: both are sum_{i,j,c} a[i,j] q[i,c] k[i+d(j-w)+o,c]
    q, k = torch.randn(2, 12, 4, dtype=torch.float64), torch.randn(2, 12, 4, dtype=torch.float64)
    a = torch.randn(2, 12, 7, dtype=torch.float64)
    lhs = (torch.ops.ollie.g2bmm(q, k, 3, 2, 1) * a).sum()
    rhs = (q * torch.ops.ollie.gbmm(a, k, 3, 2, 1)).sum()
    assert torch.allclose(lhs, rhs)


def test_fake_sizes_follow_symbolic_shapes():
    def f(q, k):
        return torch.ops.ollie.g2bmm(q, k, 2, 1, 0)

    gm = make_fx(f, tracing_mode="symbolic")(torch.randn(2, 16, 4), torch.randn(2, 16, 4))
    shape = gm.graph.output_node().args[0].meta["val"].shape
    assert isinstance(shape[1], torch.SymInt) and shape[2] == 5


def test_a_lowered_banded_kernel_is_one_ollie_node_that_inductor_compiles_around():
    kernel = codegen.lower(ops.g2bmm(Tensor("q", (2, 24, 8)), Tensor("k", (2, 24, 8)), 3, 2))
    q, k = torch.randn(2, 24, 8), torch.randn(2, 24, 8)
    gm = make_fx(lambda k, q: torch.relu(kernel(k, q)))(k, q)
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert torch.ops.ollie.g2bmm.default in targets
    assert not any("as_strided" in str(t) or "diagonal" in str(t) for t in targets)
    compiled = torch.compile(gm, backend="inductor", fullgraph=True)
    assert torch.allclose(compiled(k, q), torch.relu(dense_g2bmm(q, k, 3, 2, 0)), atol=1e-5)
