"""Matched operators lowered as library calls: same numbers as ir.evaluate, the library form in
``kernel.forms``, and speed side by side with the library (or the dense alternative)."""
import contextlib
import itertools
import statistics
import time

import pytest
import torch
import torch.nn.functional as F

import codegen
from ir import Iter, Scope, Tensor, iterator_symbol, ops

from lowering_helpers import calls, check_lowering

b, i, j, k, m, n, c, f, h, w, r, s = (iterator_symbol(v) for v in "bijkmncfhwrs")


def T(name, *shape):
    return Tensor(name, shape, "float64")


def its(**extents):
    return tuple(Iter(nm, *(e if isinstance(e, tuple) else (0, e))) for nm, e in extents.items())


# -- conv ------------------------------------------------------------------------------------
CONV2D = [(st, p, d, g) for st, p, d, g in itertools.product(
    [1, 2, (1, 3)], [0, 1, (2, 0), "same"], [1, 2], [1, 2]) if p != "same" or st == 1]


@pytest.mark.parametrize("stride, padding, dilation, groups", CONV2D, ids=str)
def test_conv2d_is_f_conv2d(stride, padding, dilation, groups):
    scope = ops.conv2d(T("x", 2, 4, 9, 8), T("w", 6, 4 // groups, 3, 2), stride=stride,
                       padding=padding, dilation=dilation, groups=groups)
    kernel = check_lowering(scope)
    assert kernel.forms == ("conv2d",) and calls(kernel)["conv2d"] == 1


@pytest.mark.parametrize("build, form", [
    (lambda: ops.conv1d(T("x", 2, 3, 11), T("w", 4, 3, 3), stride=2, padding=1), "conv1d"),
    (lambda: ops.conv1d(T("x", 3, 11), T("w", 4, 3, 2), padding="same", dilation=3), "conv1d"),
    (lambda: ops.conv2d(T("x", 4, 7, 7), T("w", 8, 1, 3, 3), padding=1, groups=4), "conv2d"),
], ids=["conv1d", "unbatched-same", "depthwise-unbatched"])
def test_conv1d_unbatched_and_depthwise(build, form):
    kernel = check_lowering(build())
    assert kernel.forms == (form,)


def test_conv_in_channels_last_layout_permutes_around_the_call():
    x, wt = T("x", 2, 6, 7, 3), T("wt", 3, 3, 3, 5)
    scope = Scope(its(n=2, h=6, w=7, f=5), its(r=3, s=3, c=3),
                  wt[r, s, c, f] * x[n, h + r - 1, w + s - 1, c])
    kernel = check_lowering(scope)
    assert kernel.forms == ("conv2d",)
    [conv] = [n for n in kernel.graph.nodes if n.target is torch.conv2d]
    assert [(a.target, a.args) for a in conv.args] == [
        ("permute", (conv.args[0].args[0], 0, 3, 1, 2)),
        ("permute", (conv.args[1].args[0], 3, 2, 0, 1))]
    assert conv.kwargs == {"padding": 1}
    [out] = conv.users
    assert (out.target, out.args[1:]) == ("permute", (0, 2, 3, 1))


def test_conv_over_shifted_ranges_and_a_computed_input():
    # h, w in 1:7 (the window starts at h + r - 2), input a relu scope
    x = ops.relu(T("x", 1, 2, 8, 8))
    scope = Scope(its(n=1, f=3, h=(1, 7), w=(1, 7)), its(c=2, r=3, s=3),
                  x[n, c, h + r - 2, w + s - 2] * T("w", 3, 2, 3, 3)[f, c, r, s])
    kernel = check_lowering(scope)
    assert kernel.forms == ("map", "conv2d")


@pytest.mark.parametrize("stride", [1, 2])
def test_conv_transpose_is_a_conv_with_a_flipped_kernel(stride):
    scope = ops.conv_transpose2d(T("x", 1, 4, 5, 5), T("w", 4, 3, 3, 3), stride=stride, padding=1)
    kernel = check_lowering(scope)
    assert kernel.forms[-1] == "conv2d" and "w.flip(2, 3)" in kernel.source


# -- banded ----------------------------------------------------------------------------------
@pytest.mark.parametrize("wd, dil, rows, keys", [
    (0, 1, 9, 9), (2, 1, 17, 17), (2, 3, 17, 17), (4, 2, 33, 20), (1, 5, 6, 40)])
def test_g2bmm_and_gbmm_are_banded_calls(wd, dil, rows, keys):
    kernel = check_lowering(ops.g2bmm(T("q", 2, rows, 4), T("k", 2, keys, 4), wd, dil))
    assert kernel.forms == ("g2bmm",) and "torch.ops.ollie.g2bmm.default(q, k, " in kernel.source
    kernel = check_lowering(ops.gbmm(T("a", 2, rows, 2 * wd + 1), T("v", 2, keys, 3), wd, dil))
    assert kernel.forms == ("gbmm",) and "torch.ops.ollie.gbmm.default(a, v, " in kernel.source


def test_banded_layouts_batch_axes_and_shifts():
    scope = Scope(its(j=5, i=9), its(c=3), T("q", 9, 3)[i, c] * T("k", 3, 12)[c, i + j])
    kernel = check_lowering(scope)
    assert kernel.forms == ("g2bmm",)
    [band] = [n for n in kernel.graph.nodes if n.target is torch.ops.ollie.g2bmm.default]
    assert band.args[0].name == "q" and band.args[1].target == "t" and \
        band.kwargs == {"w": 2, "offset": 2}
    assert [u.target for u in band.users] == ["t"]
    scope = Scope(its(b=2, h=3, i=7, c=4), its(j=(-1, 2)),
                  T("a", 2, 3, 7, 3)[b, h, i, j + 1] * T("v", 2, 3, 7, 4)[b, h, i + 2 * j, c])
    assert check_lowering(scope).forms == ("gbmm",)


# -- running sums ----------------------------------------------------------------------------
@pytest.mark.parametrize("shape, dim", [((6,), 0), ((5, 4), 0), ((5, 4), 1), ((2, 3, 4), 1)])
def test_cumsum_is_one_torch_cumsum(shape, dim):
    kernel = check_lowering(ops.cumsum(T("x", *shape), dim))
    assert kernel.forms == ("cumsum",) and calls(kernel) == {"cumsum": 1}


def test_a_shorter_or_transposed_running_sum_is_cumsum_and_a_window_sum_is_not():
    scope = Scope(its(j=4, i=5), its(r=6), T("x", 6, 4)[i - r, j])  # 5 of 6 prefixes, .T
    assert check_lowering(scope).forms == ("cumsum",)
    window = Scope(its(i=6, j=4), its(r=3), T("x", 6, 4)[i - r, j])  # the last 3 rows only
    assert check_lowering(window).forms != ("cumsum",)


# -- softmax ---------------------------------------------------------------------------------
@pytest.mark.parametrize("kind, shape, dim", [
    ("softmax", (3, 4, 5), 1), ("softmax", (7,), 0), ("log_softmax", (3, 4, 5), -1),
    ("log_softmax", (4, 1), 1)])
def test_softmax_chain_is_one_call(kind, shape, dim):
    kernel = check_lowering(getattr(ops, kind)(T("x", *shape), dim))
    assert kernel.forms == (kind,)
    [call] = [n for n in kernel.graph.nodes if n.op == "call_function"]
    assert call.target is getattr(torch, kind) and call.kwargs == {"dim": dim % len(shape)}


def test_softmax_keeps_inner_scopes_read_elsewhere():
    sm = ops.softmax(ops.tanh(T("x", 3, 6)), 1)
    exp = sm.body.lhs.source
    scope = ops.add(sm, exp)  # the exp scope is needed, so it and the max are computed
    kernel = check_lowering(scope)
    assert kernel.forms == ("map", "amax", "map", "softmax", "map")


# -- matmul ----------------------------------------------------------------------------------
@pytest.mark.parametrize("build, form", [
    (lambda: ops.einsum("imk,kjn->ijmn", T("a", 2, 3, 4), T("b", 4, 5, 6)), "mm"),
    (lambda: ops.einsum("ikl,lkj->ij", T("a", 2, 3, 4), T("b", 4, 3, 5)), "mm"),
    (lambda: ops.matmul(T("a", 2, 1, 4, 6), T("b", 3, 6, 5)), "mm"),
    (lambda: ops.einsum("bhik,bhjk->bhji", T("q", 2, 3, 4, 5), T("k", 2, 3, 6, 5)), "matmul"),
    (lambda: ops.einsum("ikl,kl->i", T("a", 2, 3, 4), T("v", 3, 4)), "mv"),
    (lambda: ops.einsum("kl,kl->", T("u", 3, 4), T("v", 3, 4)), "dot"),
    (lambda: Scope(its(i=3, j=5), its(k=4),
                   T("a", 4, 6)[i + 1, k + 2] * -0.5 * T("b", 6, 5)[k, j]), "mm"),
])
def test_matmul_roles_flatten_into_one_library_call(build, form):
    kernel = check_lowering(build())
    assert kernel.forms == (form,) and f"torch.{form}(" in kernel.source


def test_equal_programs_built_twice_lower_alike():
    # matches are cached per scope object: each program's own sources come back
    build = lambda: ops.matmul(ops.relu(T("a", 4, 6)), ops.tanh(T("b", 6, 5)))  # noqa: E731
    first, second = build(), build()
    assert first == second and first is not second
    assert check_lowering(first).forms == check_lowering(second).forms == ("map", "map", "mm")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_library_forms_run_on_cuda_like_on_cpu():
    from ir.nodes import inputs as scope_inputs
    scopes = [ops.g2bmm(Tensor("q", (2, 40, 8)), Tensor("k", (2, 40, 8)), 3, 2),
              ops.gbmm(Tensor("a", (2, 40, 7)), Tensor("v", (2, 40, 8)), 3, 2),
              ops.conv1d(Tensor("x", (2, 4, 20)), Tensor("w", (6, 2, 3)), groups=2, padding=1),
              ops.log_softmax(Tensor("x", (4, 9)), 0)]
    for scope in scopes:
        kernel = codegen.lower(scope)
        args = [torch.randn(*scope_inputs(scope)[name].shape) for name in kernel.input_names]
        got = kernel(*(a.cuda() for a in args))
        assert got.device.type == "cuda"
        torch.testing.assert_close(got.cpu(), kernel(*args), rtol=1e-4, atol=1e-4)


# -- speed, side by side -----------------------------------------------------------------------
@contextlib.contextmanager
def one_thread():
    """Time on one thread: on a shared 2-core runner, a busy core turns multi-threaded
    timings into scheduling noise; the ratio of the work done is what is checked."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def speed_ratio(fn, ref, args, repeats=15, inner=5) -> float:
    """median time of ``fn`` / median time of ``ref``, interleaved, after a warm-up."""
    for _ in range(3):
        fn(*args), ref(*args)
    times = {fn: [], ref: []}
    for _ in range(repeats):
        for g in (ref, fn):
            t0 = time.perf_counter()
            for _ in range(inner):
                g(*args)
            times[g].append(time.perf_counter() - t0)
    return statistics.median(times[fn]) / statistics.median(times[ref])


def best_ratio(fn, ref, args, bound: float, rounds: int = 3) -> float:
    """The best of a few rounds (one quiet round is enough on a noisy machine)."""
    ratios = []
    with one_thread():
        for _ in range(rounds):
            ratios.append(speed_ratio(fn, ref, args))
            if ratios[-1] < bound:
                break
    return min(ratios)


def test_lowered_conv2d_is_as_fast_as_f_conv2d():
    scope = ops.conv2d(Tensor("x", (1, 64, 28, 28)), Tensor("w", (64, 64, 3, 3)), padding=1)
    kernel = codegen.lower(scope)
    x, wt = torch.randn(1, 64, 28, 28), torch.randn(64, 64, 3, 3)
    torch.testing.assert_close(kernel(wt, x), F.conv2d(x, wt, padding=1))
    ratio = best_ratio(lambda a, b_: kernel(b_, a), lambda a, b_: F.conv2d(a, b_, padding=1),
                       (x, wt), 1.5)
    assert ratio < 1.5, f"lowered conv2d takes {ratio:.2f}x F.conv2d"


def test_lowered_softmax_is_as_fast_as_torch_softmax():
    kernel = codegen.lower(ops.softmax(Tensor("x", (256, 1024)), -1))
    x = torch.randn(256, 1024)
    torch.testing.assert_close(kernel(x), torch.softmax(x, -1))
    ratio = best_ratio(kernel, lambda a: torch.softmax(a, -1), (x,), 1.5)
    assert ratio < 1.5, f"lowered softmax takes {ratio:.2f}x torch.softmax"


def dense_then_mask_g2bmm(q, kk, wd):
    """The alternative: the whole (M, N) product, then its band."""
    scores = F.pad(torch.bmm(q, kk.mT), (wd, wd))  # column t + wd holds key row t
    rows = scores.shape[1]
    return scores.as_strided((scores.shape[0], rows, 2 * wd + 1),
                             (scores.stride(0), scores.stride(1) + 1, 1))


def test_lowered_g2bmm_beats_the_dense_product():
    q_, k_ = Tensor("q", (1, 1024, 64)), Tensor("k", (1, 1024, 64))
    kernel = codegen.lower(ops.g2bmm(q_, k_, 64))
    q, kk = torch.randn(1, 1024, 64), torch.randn(1, 1024, 64)
    torch.testing.assert_close(kernel(kk, q), dense_then_mask_g2bmm(q, kk, 64))
    ratio = best_ratio(lambda a, b_: kernel(b_, a), lambda a, b_: dense_then_mask_g2bmm(a, b_, 64),
                       (q, kk), 1.0)
    assert ratio < 1.0, f"lowered g2bmm takes {ratio:.2f}x the dense product and mask"
