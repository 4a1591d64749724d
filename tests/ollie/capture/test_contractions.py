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


def test_a_convolution_with_its_bias_is_the_convolution_then_an_add():
    x, k, bias = torch.randn(1, 8, 10, 10), torch.randn(4, 8, 3, 3), torch.randn(4)
    fused = nodes(lambda x, k, bias: torch.conv2d(x, k, bias), x, k, bias)
    apart = nodes(lambda x, k, bias: torch.conv2d(x, k) + bias[:, None, None], x, k, bias)
    assert contractions.signature(fused) == contractions.signature(apart) != []


def test_a_change_to_contractions_doing_a_negligible_share_of_the_work_leaves_them_unchanged():
    # a big product kept, and a matrix-vector product on a pooled vector run another way
    big, v, m = torch.randn(256, 256), torch.randn(1, 256), torch.randn(256, 8)
    original = contractions.signature(nodes(lambda big, v, m: (big @ big, v @ m), big, v, m))
    tiny_changed = contractions.signature(
        nodes(lambda big, v, m: (big @ big, (m.t() @ v.t()).t()), big, v, m))
    assert tiny_changed != original
    assert contractions.unchanged(original, tiny_changed, 0.05)
    assert not contractions.unchanged(original, tiny_changed, 1e-4)  # share below the change
    big_changed = contractions.signature(
        nodes(lambda big, v, m: ((big.t() @ big.t()).t(), v @ m), big, v, m))
    assert not contractions.unchanged(original, big_changed, 0.05)
    assert not contractions.unchanged(original, [], 0.05)
