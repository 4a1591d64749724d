"""The core-ATen → ir table: every row means what ATen means, and the coverage is stated."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import ir
from ollie.capture import aten, regions
from ollie.capture.compilers import decompositions
from ollie.region import as_program, exact_value

# (name, torch function, input shapes): each is traced to core ATen the way the backend
# traces, translated, and every region's expression is evaluated by the reference
# interpreter against the graph's own values.
CASES = [
    ("mm", lambda a, b: a @ b, [(5, 4), (4, 3)]),
    ("bmm", lambda a, b: torch.bmm(a, b), [(2, 5, 4), (2, 4, 3)]),
    ("addmm", lambda x, w, b: F.linear(x, w, b), [(5, 4), (3, 4), (3,)]),
    ("addmm_scaled", lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2.0),
     [(5, 3), (5, 4), (4, 3)]),
    ("baddbmm", lambda c, a, b: torch.baddbmm(c, a, b, beta=0.5, alpha=2.0),
     [(5, 1), (2, 5, 4), (2, 4, 3)]),
    ("conv2d", lambda x, w, b: F.conv2d(x, w, b, padding=1, stride=2), [(1, 3, 7, 7),
                                                                        (4, 3, 3, 3), (4,)]),
    ("conv1d_dilated", lambda x, w: F.conv1d(x, w, dilation=2), [(2, 3, 9), (4, 3, 3)]),
    ("conv_transpose2d", lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1),
     [(1, 4, 5, 5), (4, 2, 4, 4)]),
    ("arithmetic", lambda x, y: (x + 2 * y - y / 3) * x - torch.neg(y), [(3, 4), (3, 4)]),
    ("add_alpha", lambda x, y: torch.add(x, y, alpha=3), [(3, 4), (4,)]),
    ("multiply_adds", lambda x, y, z: torch.addcmul(x, y, z) + torch.addcdiv(x, y, z.abs() + 1,
                                                                             value=-0.5),
     [(3, 4), (3, 4), (4,)]),
    ("pow", lambda x: x ** 2 + torch.pow(x, 3) + 2 ** x, [(3, 4)]),
    ("unary", lambda x: torch.exp(x).log() + torch.tanh(x) + torch.sigmoid(x) + torch.relu(x)
     + x.abs().sqrt() + (x.abs() + 1).rsqrt() + torch.erf(x), [(3, 4)]),
    ("gelu", lambda x: F.gelu(x) + F.gelu(x, approximate="tanh"), [(3, 4)]),
    ("clamp", lambda x: x.clamp(-0.5, 0.5) + x.clamp(min=0.1), [(3, 4)]),
    ("where", lambda x, y: torch.where(x > y, x, y * 2) + (x <= 0).float(), [(3, 4), (3, 4)]),
    ("reductions", lambda x: x.sum(1) + x.mean(1) + x.amax(1) + x.amin(1), [(3, 4)]),
    ("var", lambda x: x.var(1) + x.var(0, correction=0).sum(), [(3, 4)]),
    ("cumsum", lambda x: torch.cumsum(x, 0) * 2 + x.cumsum(-1), [(3, 4)]),
    ("softmax", lambda x: torch.softmax(x, -1) + torch.log_softmax(x, 0), [(3, 4)]),
    ("views", lambda x: x.view(4, 3).t().permute(1, 0).unsqueeze(0).expand(2, 4, 3)
     .reshape(8, 3)[1:7:2, 1] * 2, [(3, 4)]),
    ("cat_pad", lambda x, y: F.pad(torch.cat([x, y], 1), (1, 2)) * 2, [(3, 4), (3, 2)]),
    ("avg_pool2d", lambda x: F.avg_pool2d(x, 3, 2, padding=1) * 2, [(1, 2, 7, 9)]),
    ("diagonal_trace", lambda x: x.diagonal() * 2 + torch.trace(x), [(4, 4)]),
    ("select", lambda x: x[:, 2] * x[1], [(4, 4)]),
]


def traced(fn, shapes):
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(*s, generator=g) for s in shapes]
    gm = make_fx(fn, decomposition_table=decompositions())(*xs)
    return gm, xs


def translated(fn, shapes, **options):
    """The regions of ``fn``'s ATen graph and every node's value on random inputs."""
    gm, xs = traced(fn, shapes)
    gm.graph.eliminate_dead_code()
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp
    FakeTensorProp(gm).propagate(*xs)
    translation = regions.translate(gm, **options)
    assert translation.regions, f"nothing translated: {translation.left}"
    values = {}

    class Record(torch.fx.Interpreter):
        def run_node(self, n):
            values[n] = super().run_node(n)
            return values[n]

    Record(gm).run(*xs)
    return translation, values


@pytest.mark.parametrize("name,fn,shapes", CASES, ids=[c[0] for c in CASES])
def test_every_region_means_what_the_aten_graph_computes(name, fn, shapes):
    translation, values = translated(fn, shapes)
    for region in translation.regions:
        env = {name: values[node].double().numpy() for name, node in region.inputs.items()}
        got = ir.evaluate(region.expr, env)
        want = values[region.root].double().numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=str(region.expr))
        # the region as one generated function (what its adoption timing runs) computes it too
        torch.testing.assert_close(as_program(region, values)(), values[region.root])
    untranslated = {aten_name for aten_name in map(regions.describe, translation.left)}
    assert not untranslated - {"aten._to_copy"}, translation.left


def test_a_region_making_a_float32_tensor_has_a_float64_value_too():
    """An RNN's zero state (``aten.full`` in float32) is made in float64 in the region's
    float64 run, so a derived program is allowed the region's own rounding error, not the
    bare tolerance (the float64 run failed on a float32 operand, and had no value)."""
    def rnn(x, w, u):
        h = torch.zeros(x.shape[0], u.shape[0])
        for t in range(3):
            h = torch.tanh(x[:, t] @ w + h @ u)
        return h
    translation, values = translated(rnn, [(4, 3, 8), (8, 8), (8, 8)])
    [region] = translation.regions
    assert any(m.target is torch.ops.aten.full.default for m in region.members)
    exact = exact_value(region, values)
    assert exact is not None and exact.dtype == torch.float64
    torch.testing.assert_close(exact.float(), values[region.root], rtol=1e-4, atol=1e-5)


def test_coverage_of_core_aten():
    core = set(aten.core_aten_ops())
    translated = core & set(aten.translated_ops())
    # The rows a user can count on (README, "What Ollie sees"); data-dependent indexing
    # (gather, index, scatter, embedding), sorting, RNG and pooling with indices have no
    # index-summation meaning and stay with Inductor.
    expected = {
        "aten._log_softmax", "aten._softmax", "aten._to_copy", "aten.abs", "aten.add",
        "aten.addmm", "aten.alias", "aten.amax", "aten.amin", "aten.as_strided", "aten.avg_pool2d",
        "aten.bmm",
        "aten.cat", "aten.clamp", "aten.clone", "aten.constant_pad_nd", "aten.convolution",
        "aten.cumsum",
        "aten.diagonal", "aten.div", "aten.eq", "aten.erf", "aten.exp", "aten.expand",
        "aten.full", "aten.ge", "aten.gelu", "aten.gt", "aten.le", "aten.log", "aten.lt",
        "aten.maximum", "aten.mean", "aten.minimum", "aten.mm", "aten.mul", "aten.ne",
        "aten.neg", "aten.permute", "aten.pow", "aten.reciprocal", "aten.relu", "aten.rsqrt",
        "aten.scalar_tensor", "aten.select", "aten.sigmoid", "aten.slice", "aten.sqrt",
        "aten.squeeze", "aten.sub", "aten.sum", "aten.tanh", "aten.unsqueeze", "aten.var",
        "aten.view", "aten.where",
    }
    assert translated == expected
    assert len(core) > 150  # the list really is torch's core opset


def test_an_op_without_a_row_stays_with_a_reason():
    gm, xs = traced(lambda x: torch.sort(x @ x, dim=0).values, [(4, 4)])
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp
    FakeTensorProp(gm).propagate(*xs)
    translation = regions.translate(gm)
    reasons = {regions.describe(n): why for n, why in translation.left.items()}
    assert "no row for aten.sort" in reasons["aten.sort"]
    assert [regions.describe(m) for r in translation.regions for m in r.members] == ["aten.mm"]


def test_a_forced_node_still_takes_in_its_single_use_producers():
    # relu is materialised (forced, as when its consumer refuses it): the product it alone
    # reads is still composed into relu's region, not cut into a region of its own
    gm = make_fx(lambda x, w: torch.relu(x @ w).exp())(torch.randn(4, 3), torch.randn(3, 5))
    relu = next(n for n in gm.graph.nodes if n.target == torch.ops.aten.relu.default)
    translation, _ = regions._translate_once(gm, {relu}, False)
    by_root = {r.root.name: [m.name for m in r.members] for r in translation.regions}
    assert by_root == {"relu": ["mm", "relu"], "exp": ["exp"]}


def _rnn(linear_state):
    def rnn(x, w, u):  # h = tanh(x_t W + h U), or without the tanh on the state's path
        h = torch.zeros(x.shape[0], u.shape[0])
        for t in range(3):
            step = x[:, t] @ w + h @ u
            h = step if linear_state else torch.tanh(step)
        return torch.tanh(h)
    return rnn


@pytest.mark.parametrize("fn, apart", [
    (_rnn(linear_state=False), True),   # each step's products pass an activation
    (_rnn(linear_state=True), False),   # (h U) U: a reassociation
    (lambda x, a, b: torch.tanh(torch.relu(x @ a) @ b), True),
    (lambda x, a, b: torch.tanh((x @ a) @ b * 2), False),  # a chain
    (lambda x, a, b: torch.tanh(x @ a + x @ b), False),  # a common factor: x (A + B)
    (lambda x, a, b: torch.tanh(x @ a) + torch.tanh(x @ b), True),
    (lambda x, a, b: torch.relu(x @ a).mean(0, keepdim=True) @ b, True),  # pooled, then a head
    (lambda x, a, b: (x @ a).mean(0, keepdim=True) @ b, False),  # a chain through the mean
    (lambda x, a, b: torch.cat([x, torch.relu(x @ a) @ b], 1), True),  # a dense block's layer
    (lambda x, a, b: torch.cat([x @ a, x @ b], 1), False),  # x [A B]: one product
], ids=["rnn", "linear_rnn", "activation_between", "chain", "common_factor", "activations",
        "pooled_head", "mean_chain", "dense_layer", "shared_operand"])
def test_under_inductor_contractions_no_linear_step_joins_are_not_derived(fn, apart):
    shapes = [(16, 3, 32) if fn.__name__ == "rnn" else (64, 32), (32, 32), (32, 32)]
    [region] = translated(fn, shapes)[0].regions
    why = regions.worth_deriving(region, inductor=True)
    assert (why is not None and "activations between them" in why) == apart, why
    assert regions.worth_deriving(region, inductor=False) is None or not apart


@pytest.mark.parametrize("fn, kept", [
    (lambda x, a: torch.relu(x @ a).sum(0), True),    # summed after an activation
    (lambda x, a: torch.tanh((x @ a).sum(0)), False),  # x.sum(0) @ a: the sum moves inward
    (lambda x, a: torch.tanh((x @ a).mean(1)), False),  # x @ a.mean(1)
], ids=["after_activation", "rows", "columns"])
def test_under_inductor_a_sum_no_contraction_reaches_is_not_derived(fn, kept):
    [region] = translated(fn, [(64, 32), (32, 32)])[0].regions
    why = regions.worth_deriving(region, inductor=True)
    assert (why is not None and "a single aten.mm" in why) == kept, why
    assert regions.worth_deriving(region, inductor=False) is None


@pytest.mark.parametrize("middle, apart", [
    (4, True),    # 32 → 4 → 32: merged, 32·32 a row, more than 32·4 + 4·32
    (64, False),  # 32 → 64 → 32: merged, less
])
def test_under_inductor_a_chain_through_a_bottleneck_is_not_derived(middle, apart):
    def chain(x, a, b):
        return torch.tanh((x @ a) * 2 @ b)
    [region] = translated(chain, [(64, 32), (32, middle), (middle, 32)])[0].regions
    why = regions.worth_deriving(region, inductor=True)
    assert (why is not None) == apart, why


def test_under_inductor_a_linear_bottleneck_between_convolutions_is_not_derived():
    # MobileNet's block end and the next one's start: project (1×1, 32 → 8), scale and
    # shift, residual add, expand (1×1, 8 → 32): merging the two does 32·32 a pixel, more
    # than 32·8 + 8·32; with a wide middle (32 → 64 → 32) a merge could do less
    def block_end(h, x, p, e):
        return torch.tanh(F.conv2d(F.conv2d(h, p) * 0.5 + x, e))
    for middle, derived in ((8, False), (64, True)):
        shapes = [(1, 32, 8, 8), (1, middle, 8, 8), (middle, 32, 1, 1), (32, middle, 1, 1)]
        [region] = translated(block_end, shapes)[0].regions
        why = regions.worth_deriving(region, inductor=True)
        assert (why is None) == derived, why


def test_a_batched_chain_ending_in_baddbmm_is_one_region_worth_deriving():
    """``baddbmm(c, x @ y, z)`` with ``z`` thin: ``x @ (y @ z)`` does a quarter of the work."""
    def chain(c, x, y, z):
        return torch.baddbmm(c, torch.bmm(x, y), z)
    [region] = translated(chain, [(2, 16, 4), (2, 16, 16), (2, 16, 16), (2, 16, 4)])[0].regions
    assert sum(map(regions._contraction, region.members)) == 2
    assert regions.worth_deriving(region, inductor=True) is None


@pytest.mark.parametrize("fn, apart", [
    (lambda x, w: F.avg_pool2d(F.conv2d(x, w), 2), False),  # conv(pool(x)): a quarter the pixels
    (lambda x, w: F.conv2d(F.avg_pool2d(x, 2), w), True),   # pooled first already
], ids=["pool_after", "pool_before"])
def test_under_inductor_a_window_mean_is_derived_only_after_a_contraction(fn, apart):
    [region] = translated(fn, [(2, 8, 8, 8), (16, 8, 1, 1)])[0].regions
    assert len(region.members) == 2
    why = regions.worth_deriving(region, inductor=True)
    assert (why is not None) == apart, why


def test_under_inductor_a_region_ends_at_an_activation_between_contractions():
    """A DenseNet layer's end, then its transition: the pool after the second convolution is
    derived alone (no derivation moves the first convolution's work across the ReLU)."""
    def layer(x, w1, w2):
        return F.avg_pool2d(F.conv2d(torch.relu(F.conv2d(x, w1)), w2), 2)
    shapes = [(1, 8, 8, 8), (8, 8, 1, 1), (4, 8, 1, 1)]
    assert len(translated(layer, shapes)[0].regions) == 1
    first, then = translated(layer, shapes, cut_at_activations=True)[0].regions
    assert first.root.target is torch.ops.aten.relu.default
    assert [m.target for m in then.members] == [torch.ops.aten.convolution.default,
                                                 torch.ops.aten.avg_pool2d.default]
    assert regions.worth_deriving(first, inductor=True) is not None
    assert regions.worth_deriving(then, inductor=True) is None
    # an activation after the last contraction ends nothing
    [tail] = translated(lambda x, w: torch.relu(F.conv2d(x, w)) * 2, shapes[:2],
                        cut_at_activations=True)[0].regions
    assert len(tail.members) == 3


@pytest.mark.parametrize("fn, inner, derived", [
    (lambda x, a: (x @ a).pow(2).sum(), 4, True),  # ‖XA‖²: tr(XᵀX·AAᵀ), 4×4 Grams
    (lambda x, a: torch.linalg.norm(x @ a), 4, True),
    (lambda x, a: torch.tanh((x @ a).pow(2).mean(-1)), 4, True),  # each row: x (AAᵀ) xᵀ
    (lambda x, a: torch.tanh((x @ a).pow(2).mean(-1)), 64, False),  # no narrower: a norm
], ids=["squared_norm", "norm", "row_norms", "norm_after_a_layer"])
def test_under_inductor_a_sum_of_squares_of_a_product_is_derived_where_its_inner_size_is_smaller(
        fn, inner, derived):
    [region] = translated(fn, [(64, inner), (inner, 64)])[0].regions
    why = regions.worth_deriving(region, inductor=True)
    assert (why is None) == derived, why


@pytest.mark.parametrize("fn, rewritten", [
    (lambda x, w: torch.cumsum(x @ w, 0)[-1], True),  # the whole sum: x.sum(0) @ w
    (lambda x, w: torch.cumsum(x @ w, 0)[40] * 2, True),  # the first 41 rows summed
    (lambda x, w: torch.cumsum(x @ w, 0), False),  # every prefix: nothing to save
])
def test_a_running_sum_of_a_product_read_at_one_entry_is_rewritten(fn, rewritten):
    import ollie

    backend = ollie.OllieBackend(ollie.Options(cache=False, measure_cap_s=0.05))
    compiled = torch.compile(fn, backend=backend)
    x, w = torch.randn(512, 128), torch.randn(128, 128)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, w), fn(x, w), rtol=1e-4, atol=1e-3)
    [report] = backend.reports
    outcomes = [r.decision.outcome.value for r in report.regions]
    assert (outcomes == ["adopted"]) == rewritten, [r.decision.text for r in report.regions]
