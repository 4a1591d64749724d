"""The contractions of a graph as data: a rewrite that only moves elementwise work around
them keeps the signature; one that changes a product's work or layout does not."""
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from ollie.capture import contractions


def nodes(fn, *args):
    return make_fx(fn)(*args).graph.nodes


a, b, w = torch.randn(64, 32), torch.randn(32, 16), torch.randn(16)


def test_scaling_before_or_after_a_product_keeps_its_signature():
    before = nodes(lambda a, b, w: (a @ b) * w, a, b, w)
    after = nodes(lambda a, b, w: a @ (b * w), a, b, w)
    assert contractions.signature(before) == contractions.signature(after) != []


def test_another_order_or_layout_changes_it():
    c = torch.randn(16, 8)
    left = nodes(lambda a, b, c: (a @ b) @ c, a, b, c)
    right = nodes(lambda a, b, c: a @ (b @ c), a, b, c)
    assert contractions.signature(left) != contractions.signature(right)
    transposed = nodes(lambda a, b: a @ b.t().contiguous().t(), a, b)
    assert contractions.signature(nodes(lambda a, b: a @ b, a, b)) != \
        contractions.signature(transposed)


def test_flops_are_counted_per_contraction():
    ((node, count),) = contractions.counted(nodes(lambda a, b: torch.relu(a @ b), a, b))
    assert node.target == torch.ops.aten.mm.default and count == 2 * 64 * 32 * 16  # flops


def test_a_product_with_its_bias_is_the_product_then_an_add():
    fused = nodes(lambda a, b, w: torch.addmm(w, a, b), a, b, w)
    apart = nodes(lambda a, b, w: a @ b + w, a, b, w)
    assert contractions.signature(fused) == contractions.signature(apart) != []


def test_calls_recorded_at_dispatch_sign_like_the_graph():
    # what the region compares before measuring: a lowering's calls against the graph's nodes
    from torch.utils._python_dispatch import TorchDispatchMode

    class Record(TorchDispatchMode):
        calls = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            self.calls.append((func, args, kwargs or {}, out))
            return out

    with Record() as rec:
        torch.relu(a @ b) * 2
    graph = nodes(lambda a, b: torch.relu(a @ b) * 2, a, b)
    assert contractions.call_signature(rec.calls) == contractions.signature(graph) != []


def test_a_symbolic_graph_signs_at_its_hints_without_guards():
    symbolic = make_fx(lambda a, b, w: (a @ b) * w, tracing_mode="symbolic")(a, b, w)
    shape_env = next(n.meta["val"].shape[0] for n in symbolic.graph.nodes
                     if n.op == "placeholder").node.shape_env
    guards = len(shape_env.guards)
    at_hints = nodes(lambda a, b, w: (a @ b) * w, a, b, w)
    assert contractions.signature(symbolic.graph.nodes) == contractions.signature(at_hints)
    assert len(shape_env.guards) == guards  # nothing was specialised to compare
