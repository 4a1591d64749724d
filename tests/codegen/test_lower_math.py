"""New elementwise math (pow, ...) lowered to torch and to Triton (through the interpreter)
agrees with the reference interpreter on inputs with negatives, zeros, ±1, NaN and ±inf."""
import numpy as np
import pytest
import torch

import codegen
import ir
from ir import Tensor, ops

SPECIAL = np.array([-np.inf, -8.0, -2.5, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 2.0, 3.0, np.inf,
                    np.nan])
PAIRS = [a.ravel() for a in np.meshgrid(SPECIAL, SPECIAL, indexing="ij")]


def run(scope, backend, dtype, monkeypatch, **arrays):
    """(lowered result, interpreter result on the same rounded inputs) as float64 arrays."""
    if backend == "triton":
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    kernel = codegen.lower(scope, backend=backend)
    args = [torch.tensor(arrays[n], dtype=dtype) for n in kernel.input_names]
    got = kernel(*args)
    want = ir.evaluate(scope, {n: a.double().numpy() for n, a in zip(kernel.input_names, args)})
    return got.double().numpy(), want, kernel.source


def assert_same(got, want, source, rtol):
    np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-30, equal_nan=True,
                               err_msg=source)


BACKENDS = [("torch", torch.float64, 1e-12), ("triton", torch.float32, 1e-5)]


@pytest.mark.parametrize("backend,dtype,rtol", BACKENDS, ids=["torch", "triton"])
def test_pow_of_two_tensors(backend, dtype, rtol, monkeypatch):
    x, y = (Tensor(n, PAIRS[0].shape, "float32") for n in "xy")
    assert_same(*run(ops.pow(x, y), backend, dtype, monkeypatch, x=PAIRS[0], y=PAIRS[1]),
                rtol)


@pytest.mark.parametrize("exponent", [0.5, -0.5, 2.0, 3.0, -1.0, -3.0, 0.0, 1 / 3, 7.0, 6.0,
                                      np.inf, np.nan])
@pytest.mark.parametrize("backend,dtype,rtol", BACKENDS, ids=["torch", "triton"])
def test_pow_with_a_number_exponent(exponent, backend, dtype, rtol, monkeypatch):
    x = Tensor("x", SPECIAL.shape, "float32")
    assert_same(*run(ops.pow(x, float(exponent)), backend, dtype, monkeypatch, x=SPECIAL),
                rtol)


@pytest.mark.parametrize("base", [2.0, 1.0, 0.0, -2.0, np.inf])
@pytest.mark.parametrize("backend,dtype,rtol", BACKENDS, ids=["torch", "triton"])
def test_pow_with_a_number_base(base, backend, dtype, rtol, monkeypatch):
    x = Tensor("x", SPECIAL.shape, "float32")
    assert_same(*run(ops.pow(float(base), x), backend, dtype, monkeypatch, x=SPECIAL), rtol)


@pytest.mark.parametrize("backend,dtype,rtol", BACKENDS, ids=["torch", "triton"])
def test_pow_inside_a_reduction(backend, dtype, rtol, monkeypatch):
    """Squared norms of rows: a pow under a sum, the shape research code writes."""
    a = np.random.default_rng(0).standard_normal((5, 7))
    x = Tensor("x", a.shape, "float32")
    e = ops.sum(ops.pow(ops.sub(x, 0.5), 2), dim=1)
    assert_same(*run(e, backend, dtype, monkeypatch, x=a), rtol)


@pytest.mark.parametrize("backend,dtype,rtol", BACKENDS, ids=["torch", "triton"])
def test_rsqrt(backend, dtype, rtol, monkeypatch):
    x = Tensor("x", SPECIAL.shape, "float32")
    assert_same(*run(ops.rsqrt(x), backend, dtype, monkeypatch, x=SPECIAL), rtol)


@pytest.mark.parametrize("backend,dtype,rtol", BACKENDS, ids=["torch", "triton"])
def test_sqrt_is_nan_below_zero(backend, dtype, rtol, monkeypatch):
    x = Tensor("x", SPECIAL.shape, "float32")
    got, want, source = run(ops.sqrt(x), backend, dtype, monkeypatch, x=SPECIAL)
    assert np.isnan(got[SPECIAL < 0]).all(), source
    assert_same(got, want, source, rtol)


NAN_IN = np.array([[1.0, np.nan, -2.0], [np.nan, np.nan, 3.0], [-1.0, 0.5, 2.0]])


@pytest.mark.parametrize("build", [
    lambda x: ops.relu(x), lambda x: ops.maximum(x, 0.5), lambda x: ops.minimum(x, 0.5),
    lambda x: ops.maximum(x, ops.neg(x)), lambda x: ops.amax(x, dim=1),
    lambda x: ops.amin(x, dim=0), lambda x: ops.amax(x)],
    ids=["relu", "max_number", "min_number", "max_tensors", "amax_rows", "amin_cols", "amax"])
@pytest.mark.parametrize("backend,dtype,rtol", BACKENDS, ids=["torch", "triton"])
def test_nan_in_nan_out_through_max_and_min(build, backend, dtype, rtol, monkeypatch):
    x = Tensor("x", NAN_IN.shape, "float32")
    got, want, source = run(build(x), backend, dtype, monkeypatch, x=NAN_IN)
    assert np.isnan(want).any()
    assert_same(got, want, source, rtol)


@pytest.mark.parametrize("backend,dtype,rtol", BACKENDS, ids=["torch", "triton"])
def test_erf(backend, dtype, rtol, monkeypatch):
    x = Tensor("x", SPECIAL.shape, "float32")
    assert_same(*run(ops.erf(x), backend, dtype, monkeypatch, x=SPECIAL), rtol)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("backend,dtype,rtol", BACKENDS, ids=["torch", "triton"])
def test_gelu(approximate, backend, dtype, rtol, monkeypatch):
    values = np.concatenate([SPECIAL[:-2], np.linspace(-6, 6, 25)])  # torch: NaN at inf in fp32
    x = Tensor("x", values.shape, "float32")
    got, want, source = run(ops.gelu(x, approximate), backend, dtype, monkeypatch, x=values)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-6, equal_nan=True, err_msg=source)


def T(name, *shape):
    return Tensor(name, shape, "float32")


BUILDERS = {
    "select": lambda: ops.select(T("x", 3, 4, 5), 1, -1),
    "diagonal": lambda: ops.diagonal(T("x", 2, 3, 4), 1, 2, 0),
    "diag_of_vector": lambda: ops.diag(T("v", 4), -1),
    "diag_of_matrix": lambda: ops.diag(T("x", 3, 5), 1),
    "trace": lambda: ops.trace(T("x", 4, 6)),
    "trace_of_product": lambda: ops.trace(ops.mm(T("a", 4, 6), T("b", 6, 4))),
    "var": lambda: ops.var(T("x", 3, 7), 1),
    "var_all_keepdim": lambda: ops.var(T("x", 3, 7), correction=0, keepdim=True),
    "clamp": lambda: ops.clamp(T("x", 3, 7), -0.5, 0.5),
    "clamp_tensors": lambda: ops.clamp(T("x", 3, 7), T("lo", 7), T("hi", 3, 1)),
    "full_plus": lambda: ops.add(ops.full((3, 4), 1.5), T("x", 3, 4)),
}
DATA = np.random.default_rng(0)


@pytest.mark.parametrize("case", sorted(BUILDERS))
@pytest.mark.parametrize("backend,dtype,rtol", BACKENDS, ids=["torch", "triton"])
def test_builders_lower(case, backend, dtype, rtol, monkeypatch):
    e = BUILDERS[case]()
    arrays = {n: DATA.standard_normal(t.shape) for n, t in ir.inputs(e).items()}
    got, want, source = run(e, backend, dtype, monkeypatch, **arrays)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-5, err_msg=source)


@pytest.mark.parametrize("backend,dtype,rtol", BACKENDS, ids=["torch", "triton"])
def test_clamp_keeps_nan(backend, dtype, rtol, monkeypatch):
    x = Tensor("x", SPECIAL.shape, "float32")
    got, want, source = run(ops.clamp(x, -1.0, 1.0), backend, dtype, monkeypatch, x=SPECIAL)
    assert np.isnan(got[-1])
    assert_same(got, want, source, rtol)


PICKS = {
    "where": lambda x, y: ops.where(ops.gt(x, 0), x, ops.mul(y, 0.1)),
    "where_log": lambda x, y: ops.where(ops.gt(x, 0), ops.log(x), 0.0),
    "where_numbers": lambda x, y: ops.where(ops.ge(x, y), 1.0, -1.0),
    "where_zero_first": lambda x, y: ops.where(ops.ne(x, x), 0.0, x),
    "lt": lambda x, y: ops.lt(x, y),
    "eq_number": lambda x, y: ops.eq(x, 0.0),
    "comparison_arithmetic": lambda x, y: ops.sub(ops.lt(x, y), ops.gt(x, y)),
    "count_below": lambda x, y: ops.sum(ops.le(x, 0.5)),
    "clamp_by_where": lambda x, y: ops.where(ops.lt(x, -1.0), -1.0, ops.where(ops.gt(x, 1.0),
                                                                          1.0, x)),
}


@pytest.mark.parametrize("case", sorted(PICKS))
@pytest.mark.parametrize("backend,dtype,rtol", BACKENDS, ids=["torch", "triton"])
def test_comparisons_and_where(case, backend, dtype, rtol, monkeypatch):
    x, y = (Tensor(n, PAIRS[0].shape, "float32") for n in "xy")
    e = PICKS[case](x, y)
    got, want, source = run(e, backend, dtype, monkeypatch, x=PAIRS[0], y=PAIRS[1])
    assert_same(got, want, source, rtol)


@pytest.mark.parametrize("backend,dtype,rtol", BACKENDS, ids=["torch", "triton"])
def test_a_comparison_is_a_bool_tensor_and_a_bool_input_a_condition(backend, dtype, rtol,
                                                                     monkeypatch):
    if backend == "triton":
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    x, y = (Tensor(n, PAIRS[0].shape, "float32") for n in "xy")
    kernel = codegen.lower(ops.lt(x, y), backend=backend)
    a, b = (torch.tensor(v, dtype=dtype) for v in PAIRS)
    got = kernel(a, b)
    assert got.dtype == torch.bool
    assert torch.equal(got, a < b)
    c = Tensor("c", PAIRS[0].shape, "bool")
    kernel = codegen.lower(ops.where(c, x, y), backend=backend)
    cond = a > b
    got = kernel(*({"c": cond, "x": a, "y": b}[n] for n in kernel.input_names))
    assert torch.equal(torch.isnan(got), torch.isnan(torch.where(cond, a, b)))
    np.testing.assert_array_equal(got.nan_to_num().numpy(),
                                  torch.where(cond, a, b).nan_to_num().numpy())


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_a_reassociated_float16_chain_stays_finite_like_eager(backend, monkeypatch):
    """(a @ b) @ c derives to a @ (b @ c) (far fewer flops); with inputs near float16's
    range, b @ c leaves it (256 * 1000 > 65504) where eager's order does not. The
    intermediate is kept in float32, the result cast back: finite like eager (it was 0%)."""
    tb, best, kernel = _chain(backend, torch.float16, monkeypatch)
    ta, tc = torch.full((64, 256), 1e-4, dtype=torch.float16), torch.full((256, 8), 1000.0,
                                                                            dtype=torch.float16)
    eager = (ta @ tb) @ tc
    assert torch.isfinite(eager).all() and not torch.isfinite(tb @ tc).all()
    got = kernel(*({"a": ta, "b": tb, "c": tc}[n] for n in kernel.input_names))
    assert got.dtype == torch.float16 and torch.isfinite(got).all(), kernel.source
    torch.testing.assert_close(got.float(), eager.float(), rtol=2e-2, atol=0)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_a_reassociated_bfloat16_chain_keeps_float32_intermediates(backend, monkeypatch):
    """bfloat16 has float32's exponent range, so float32 intermediates keep its precision
    (not more range): the reassociated chain is as close to the exact product as eager."""
    tb, best, kernel = _chain(backend, torch.bfloat16, monkeypatch)
    g = torch.Generator().manual_seed(1)
    ta, tc = (torch.randn(s, generator=g).to(torch.bfloat16) for s in ((64, 256), (256, 8)))
    exact = (ta.double() @ tb.double()) @ tc.double()
    eager = (ta @ tb) @ tc
    got = kernel(*({"a": ta, "b": tb, "c": tc}[n] for n in kernel.input_names))
    assert got.dtype == torch.bfloat16
    err = lambda r: ((r.double() - exact).abs().max() / exact.abs().max()).item()  # noqa: E731
    assert err(got) <= 2 * err(eager) + 1e-3, (err(got), err(eager))


def _chain(backend, dtype, monkeypatch):
    from derivations import derive
    if backend == "triton":
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    name = str(dtype).removeprefix("torch.")
    a, b, c = (Tensor(n, s, name) for n, s in (("a", (64, 256)), ("b", (256, 256)),
                                                ("c", (256, 8))))
    best = derive(ops.mm(ops.mm(a, b), c)).candidates(2, ir.analytic_cost)[0]
    assert best.rule_chain, "not reassociated"
    kernel = codegen.lower(best.program, backend=backend)
    assert "intermediate_dtype" in kernel.source or "_intermediate" in kernel.source, \
        kernel.source
    tb = torch.rand(256, 256, generator=torch.Generator().manual_seed(0)).to(dtype)
    return tb, best, kernel


@pytest.mark.parametrize("text", [
    "A: f32[4, 37]\nB: f32[4, 37]\nY[i] = sum[k] A[i,k] * recip(B[i,k])",
    "A: f32[40, 37]\nB: f32[37, 33]\nY[i,j] = sum[k] A[i,k] * recip(B[k,j])",
    "A: f32[40, 37]\nB: f32[37, 33]\nY[i,j] = sum[k] log(A[i,k]) * B[k,j]",
    "A: f32[5, 37]\nY[i] = sum[k] A[i,k] / A[i,k]",
], ids=["reduce_recip", "dot_recip", "dot_log", "reduce_quotient"])
def test_padded_lanes_add_nothing_when_a_factor_is_infinite_at_zero(text, monkeypatch):
    """Padded lanes load 0; recip(0), log(0) and 0 / 0 are not finite, and 0 times them is
    NaN: such products are masked (they were not: every output NaN)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    e = ir.parse(text)
    values = {n: np.random.default_rng(0).uniform(0.5, 1.5, t.shape)
              for n, t in ir.inputs(e).items()}
    got, want, source = run(e, "triton", torch.float32, monkeypatch, **values)
    assert not np.isnan(got).any(), source
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=source)
