"""The capture issue's reproducers: each one gave wrong numbers or crashed under the old
symbolic-trace capture; under Dynamo + AOTAutograd each returns eager's numbers (or raises
eager's error)."""
import functools

import pytest
import torch

import ollie

FAST = dict(inductor=False, measure_cap_s=0.05, budget_s=1.0)


def chain_args(m=64, k=48, n=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(m, k, generator=g), torch.randn(k, k, generator=g),
            torch.randn(k, n, generator=g))


def close(a, b):
    return torch.allclose(a, b, rtol=1e-4, atol=1e-4 * max(1.0, b.abs().max().item()))


def test_star_args_bind_every_tensor():
    def f(a, *rest):
        return a * rest[0] + rest[1]
    x, y, z = torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4)
    assert close(ollie.optimize(f, **FAST)(x, y, z), x * y + z)


def test_value_computed_before_an_in_place_op_is_not_recomputed_after_it():
    def f(a, b, c):
        t = a @ b
        a.relu_()
        return t @ c
    a, b, c = chain_args()
    expected = f(a.clone(), b, c)
    got_a = a.clone()
    out = ollie.optimize(f, **FAST)(got_a, b, c)
    assert close(out, expected) and torch.equal(got_a, a.relu())


def test_in_place_update_of_an_input_happens_exactly_once():
    def g(a, b, c):
        a.add_(1)
        return (a @ b) @ c
    a, b, c = chain_args()
    mine = a.clone()
    out = ollie.optimize(g, **FAST)(mine, b, c)
    assert torch.equal(mine, a + 1)
    assert close(out, ((a + 1) @ b) @ c)


@pytest.mark.parametrize("inductor", [False, True])
def test_random_ops_under_a_fixed_seed_draw_what_eager_draws(inductor):
    def f(x, w):
        return torch.nn.functional.dropout(x @ w, p=0.5, training=True) + torch.rand_like(x)
    x, w = torch.randn(16, 16), torch.randn(16, 16)
    torch.manual_seed(123)
    expected = f(x, w)
    opt = ollie.optimize(f, **{**FAST, "inductor": inductor})
    torch.manual_seed(123)
    assert close(opt(x, w), expected)
    torch.manual_seed(7)
    again = f(x, w)
    torch.manual_seed(7)
    assert close(opt(x, w), again)


SCALE = 2.0


def test_module_level_constant_changed_after_the_first_call_is_seen():
    global SCALE

    def f(a, b, c):
        return (a @ b) @ c * SCALE
    opt = ollie.optimize(f, **FAST)
    args = chain_args()
    opt(*args)
    SCALE = 5.0
    try:
        assert close(opt(*args), f(*args))
    finally:
        SCALE = 2.0


def test_closure_value_changed_after_the_first_call_is_seen():
    scale = [2.0]

    def f(a, b, c):
        return (a @ b) @ c * scale[0]
    opt = ollie.optimize(f, **FAST)
    args = chain_args()
    opt(*args)
    scale[0] = -3.0
    assert close(opt(*args), f(*args))


def test_reassigned_parameter_is_seen():
    lin = torch.nn.Linear(48, 48, bias=False)

    def f(a, b, c):
        return lin(a @ b) @ c
    opt = ollie.optimize(f, **FAST)
    args = chain_args()
    opt(*args)
    lin.weight = torch.nn.Parameter(torch.randn(48, 48))
    with torch.no_grad():
        assert close(opt(*args), f(*args))


def test_view_of_a_non_contiguous_input_raises_like_eager():
    def f(x):
        return x.view(-1) * 2
    opt = ollie.optimize(f, **FAST)
    opt(torch.randn(4, 8))
    bad = torch.randn(8, 4).t()
    with pytest.raises(RuntimeError, match="view"):
        f(bad)
    with pytest.raises(RuntimeError, match="view"):
        opt(bad)


def test_omitted_default_arguments():
    def h(q, k, w=3, d=2):
        return (q @ k.transpose(-1, -2)) * w + d
    q, k = torch.randn(2, 8, 4), torch.randn(2, 8, 4)
    assert close(ollie.optimize(h, **FAST)(q, k), h(q, k))


def test_keyword_arguments():
    def f(a, **kw):
        return (a @ kw["b"]) @ kw["c"]
    a, b, c = chain_args()
    assert close(ollie.optimize(f, **FAST)(a, b=b, c=c), f(a, b=b, c=c))


def test_decorated_method():
    class Model:
        def __init__(self):
            self.scale = 3.0

        @ollie.optimize(**FAST)
        def forward(self, a, b, c):
            return (a @ b) @ c * self.scale
    m, args = Model(), chain_args()
    assert close(m.forward(*args), ((args[0] @ args[1]) @ args[2]) * 3.0)


def test_functools_partial():
    def f(a, b, c, scale):
        return (a @ b) @ c * scale
    a, b, c = chain_args()
    opt = ollie.optimize(functools.partial(f, scale=0.5), **FAST)
    assert close(opt(a, b, c), f(a, b, c, 0.5))


def test_meta_tensors_run_like_eager_with_a_one_line_warning():
    def f(a, b, c):
        return (a @ b) @ c
    args = [torch.empty(64, 48, device="meta"), torch.empty(48, 48, device="meta"),
            torch.empty(48, 4, device="meta")]
    with pytest.warns(ollie.OllieWarning, match="meta tensors"):
        out = ollie.optimize(f, **FAST)(*args)
    assert out.device.type == "meta" and out.shape == (64, 4)


def test_explain_on_a_module():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = ollie.optimize(model, **FAST)
    x = torch.randn(4, 8)
    with torch.no_grad():
        assert close(opt(x), model(x))
    text = str(opt.explain())
    assert text.startswith("ollie.explain(Sequential)") and "graph 1" in text


def test_a_spliced_program_reading_an_index_constant_compiles_under_inductor():
    """A derived program that gathers reads real index tensors; spliced into an ATen graph,
    Inductor's fake tensor propagation must take them (it failed with "Please convert all
    Tensors to FakeTensors" on a masked attention layer)."""
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner
    from torch.fx.experimental.proxy_tensor import make_fx

    from ollie.capture import rewrite

    rows, cols = torch.tensor([[2], [0]]), torch.tensor([[1, 0, 2]])
    gathered = make_fx(lambda x: x[rows, cols] * 2)(torch.randn(3, 3))
    assert gathered.graph.find_nodes(op="get_attr")  # the indices are constants

    def inner(gm, example_inputs, **kwargs):
        (root,) = gm.graph.output_node().args[0]  # tanh(x) + 1, replaced by a gather of tanh
        rewrite.splice(gm, root, [root.args[0]], gathered)
        rewrite.finish(gm, example_inputs)
        return compile_fx_inner(gm, example_inputs, **kwargs)

    def f(x):
        return torch.tanh(x) + 1
    compiled = torch.compile(f, backend=lambda gm, xs: compile_fx(gm, xs, inner_compile=inner))
    x = torch.randn(3, 3)
    # (the caches key on the graph before ``inner`` changes it: compile it here)
    with torch.no_grad(), torch._functorch.config.patch(enable_autograd_cache=False), \
            torch._inductor.config.patch(fx_graph_cache=False):
        torch.testing.assert_close(compiled(x), torch.tanh(x)[rows, cols] * 2)
