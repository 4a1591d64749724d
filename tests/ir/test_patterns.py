"""Operator matching by iterator tables: each matcher on operator-library expressions of many
configurations, on hand-written layouts, and on look-alikes that must not match."""
import itertools

import pytest

from ir import Iter, Reduce, Scope, Tensor, iterator_symbol, ops
from ir.patterns import (
    classify, iterator_table, match_conv, match_elementwise, match_g2bmm, match_gbmm,
    match_matmul, match_reduction, match_softmax,
)

b, i, j, k, m, n, c, f, h, w, r, s = (iterator_symbol(v) for v in "bijkmncfhwrs")


def T(name, *shape):
    return Tensor(name, shape, "float64")


def its(**extents):
    """Iterators ``name in 0:extent`` (``name=(lo, hi)`` for another range), in order."""
    return tuple(Iter(nm, *(e if isinstance(e, tuple) else (0, e))) for nm, e in extents.items())


# -- iterator table --------------------------------------------------------------------------
def test_iterator_table_lists_each_use_with_its_stride():
    t = iterator_table(ops.conv2d(T("x", 1, 3, 9, 9), T("w", 4, 3, 3, 3), stride=2, dilation=3))
    assert t.traversal == ("n", "f", "h", "w") and t.summation == ("c", "r", "s")
    assert [(u.access, u.dim, u.coeff) for u in t.row("h").uses] == [(0, 2, 2)]
    assert [(u.access, u.dim, u.coeff) for u in t.row("r").uses] == [(0, 2, 3), (1, 2, 1)]
    assert t.row("c").kind == "summation" and t.row("f").extent == 4
    assert "r          summation      3  x#0[2]*3, w#1[2]*1" in str(t)


def test_iterator_table_positions_are_zero_based():
    # i in -2:3 reading x[i+2]: position i (0-based), the whole of x
    scope = Scope(its(i=(-2, 3)), (), T("x", 5)[i + 2])
    t = iterator_table(scope)
    assert t.positions[0] == (i,) and t.whole(0, 0) == "i"


def test_floor_and_mod_uses_have_no_stride():
    t = iterator_table(ops.conv2d(T("x", 1, 4, 5, 5), T("w", 4, 2, 1, 1), groups=2))
    assert [u.coeff for u in t.row("f").uses] == [None, 1]


# -- matmul ----------------------------------------------------------------------------------
@pytest.mark.parametrize("build, kind, roles, out_perm", [
    (lambda: ops.mm(T("a", 4, 6), T("b", 6, 5)), "matmul", ((), ("i",), ("j",), ("k",)), (0, 1)),
    (lambda: ops.bmm(T("a", 3, 4, 6), T("b", 3, 6, 5)), "batch_matmul",
     (("b",), ("i",), ("j",), ("k",)), (0, 1, 2)),
    (lambda: ops.matmul(T("a", 2, 3, 4, 6), T("b", 2, 3, 6, 5)), "batch_matmul",
     (("b0", "b1"), ("i",), ("j",), ("k",)), (0, 1, 2, 3)),
    # a broadcast batch dim is an m or n dim of the one operand that has it
    (lambda: ops.matmul(T("a", 2, 1, 4, 6), T("b", 3, 6, 5)), "matmul",
     ((), ("b0", "i"), ("b1", "j"), ("k",)), (0, 2, 1, 3)),
    (lambda: ops.matmul(T("a", 4, 6), T("b", 3, 6, 5)), "matmul",
     ((), ("i",), ("b", "j"), ("k",)), (1, 0, 2)),
    (lambda: ops.mv(T("a", 4, 6), T("v", 6)), "matmul", ((), ("i",), (), ("k",)), (0,)),
    (lambda: ops.dot(T("u", 6), T("v", 6)), "matmul", ((), (), (), ("k",)), ()),
    (lambda: ops.einsum("imk,kjn->ijmn", T("a", 2, 3, 4), T("b", 4, 5, 6)), "matmul",
     ((), ("i", "m"), ("j", "n"), ("k",)), (0, 2, 1, 3)),
    (lambda: ops.einsum("ikl,lkj->ij", T("a", 2, 3, 4), T("b", 4, 3, 5)), "matmul",
     ((), ("i",), ("j",), ("k", "l")), (0, 1)),
])
def test_matmul_roles(build, kind, roles, out_perm):
    mt = match_matmul(build())
    assert mt is not None and mt.kind == kind
    assert (mt.batch, mt.m, mt.n, mt.k) == roles
    assert mt.out_perm == out_perm


def test_matmul_layout_repairs_are_operand_permutations():
    mt = match_matmul(ops.linear(T("x", 7, 6), T("w", 5, 6)))  # x @ w.T
    assert (mt.lhs.source.name, mt.rhs.source.name) == ("x", "w")
    assert mt.lhs_dims == (0, 1) and mt.rhs_dims == (1, 0)
    # C[j, i] = sum[k] A[i, k] B[k, j]: swapping the operands avoids permuting the output
    mt = match_matmul(Scope(its(j=5, i=4), its(k=6), T("a", 4, 6)[i, k] * T("b", 6, 5)[k, j]))
    assert mt.lhs.source.name == "b" and mt.lhs_dims == (1, 0) and mt.out_perm == (0, 1)
    mt = match_matmul(ops.einsum("bhik,bhjk->bhij", T("q", 2, 3, 4, 5), T("k", 2, 3, 6, 5)))
    assert mt.batch == ("b", "h") and mt.rhs_dims == (0, 1, 3, 2)


def test_matmul_order_avoids_copying_an_operand():
    # a 1x1 convolution at batch 1 as a product: weight @ image (channels, pixels) reads the
    # image as it is stored; image @ weight.T would copy it to (pixels, channels) first
    x, wt = T("x", 1, 24, 6, 6), T("w", 72, 24, 1, 1)
    scope = Scope(its(n=1, f=72, h=6, w=6), its(c=24), x[n, c, h, w] * wt[f, c, 0, 0])
    mt = match_matmul(scope)
    assert mt.lhs.source.name == "w" and mt.m == ("f",) and mt.n == ("n", "h", "w")
    # a transposed operand is no copy: x @ w.T keeps x on the left, with no output permutation
    mt = match_matmul(ops.linear(T("x", 7, 6), T("w", 5, 6)))
    assert mt.lhs.source.name == "x" and mt.out_perm == (0, 1)


def test_matmul_keeps_constant_factors_and_in_bounds_slices():
    mt = match_matmul(Scope(its(i=3, j=5), its(k=4),
                            T("a", 4, 6)[i + 1, k + 2] * 0.5 * T("b", 6, 5)[k, j]))
    assert mt is not None and mt.scale == 0.5 and mt.m == ("i",)
    mt = match_matmul(Scope(its(i=4, j=5), its(k=6), T("a", 3, 4, 6)[1, i, k] * T("b", 6, 5)[k, j]))
    assert mt is not None and mt.lhs_dims == (1, 2)


@pytest.mark.parametrize("scope", [
    Scope(its(i=4, j=5), its(k=6), T("a", 4, 6)[i + 1, k] * T("b", 6, 5)[k, j]),  # padded read
    Scope(its(i=4, j=5), its(k=3), T("a", 8, 6)[2 * i, k] * T("b", 6, 5)[k, j]),  # strided
    Scope(its(i=4), its(k=4), T("a", 4, 4)[i, i] * T("b", 4)[k]),  # a diagonal
    Scope(its(i=4, j=5), its(k=6), T("a", 4, 6)[i, k] + T("b", 6, 5)[k, j]),  # a sum
    Scope(its(i=4, j=5), its(k=6), T("a", 4, 6)[i, k] * T("b", 6, 5)[k, j], Reduce.MAX),
    Scope(its(i=4, j=5), its(k=6, l=2), T("a", 4, 6)[i, k] * T("b", 6, 5)[k, j]),  # unused sum
    Scope(its(i=4), its(k=6), T("a", 4, 6)[i, k] * T("b", 4, 6)[i, k]),  # a batch of dots
    ops.einsum("ij,jk,kl->il", T("a", 2, 3), T("b", 3, 4), T("c", 4, 5)),  # three operands
    Scope(its(i=2, j=4, m=3), its(k=3), T("a", 2, 3)[i, k] * T("b", 3, 4)[k, j]),  # broadcast
    ops.conv2d(T("x", 1, 3, 6, 6), T("w", 4, 3, 3, 3)),
    ops.g2bmm(T("q", 1, 8, 4), T("k", 1, 8, 4), 1),
])
def test_matmul_look_alikes_do_not_match(scope):
    assert match_matmul(scope) is None


# -- conv ------------------------------------------------------------------------------------
CONV2D = [dict(stride=st, padding=p, dilation=d, groups=g)
          for st, p, d, g in itertools.product([1, 2, (2, 1)], [0, 1, (2, 0)], [1, 2], [1, 2])]


@pytest.mark.parametrize("kw", CONV2D, ids=str)
def test_conv2d_parameters_are_recovered(kw):
    g = kw["groups"]
    scope = ops.conv2d(T("x", 2, 4, 11, 10), T("w", 6, 4 // g, 3, 2), **kw)
    mt = match_conv(scope)
    pair = lambda v: v if isinstance(v, tuple) else (v, v)  # noqa: E731
    assert mt is not None and mt.kind == "conv2d"
    assert (mt.stride, mt.padding, mt.dilation, mt.groups) == (
        pair(kw["stride"]), pair(kw["padding"]), pair(kw["dilation"]), g)
    assert mt.symmetric and (mt.batch, mt.out_channel, mt.in_channel) == ("n", "f", "c")
    assert mt.spatial == ("h", "w") and mt.kernel == ("r", "s")
    assert mt.input_dims == (0, 1, 2, 3) and mt.weight_dims == (0, 1, 2, 3)
    assert mt.out_perm == (0, 1, 2, 3) and mt.weight_flips == ()


@pytest.mark.parametrize("groups, cin, cout", [(4, 4, 4), (4, 4, 8), (3, 6, 3)])
def test_depthwise_and_grouped_channels(groups, cin, cout):
    mt = match_conv(ops.conv2d(T("x", 1, cin, 6, 6), T("w", cout, cin // groups, 3, 3),
                               groups=groups))
    assert mt is not None and mt.groups == groups


def test_conv1d_unbatched_and_same_padding():
    mt = match_conv(ops.conv1d(T("x", 3, 9), T("w", 4, 3, 2), padding="same", dilation=3))
    assert mt.kind == "conv1d" and mt.batch is None and mt.input_dims == (0, 1)
    assert mt.padding == (1,) and mt.padding_end == (2,) and not mt.symmetric  # even kernel
    mt = match_conv(ops.conv1d(T("x", 2, 3, 10), T("w", 4, 3, 3), stride=3))
    assert mt.kind == "conv1d" and mt.stride == (3,) and mt.padding_end == (-1,)


def test_conv_in_channels_last_layout():
    # y[n, h, w, f] = sum[r, s, c] x[n, h+r-1, w+s-1, c] * W[r, s, c, f]  (NHWC, HWIO)
    x, wt = T("x", 2, 6, 7, 3), T("wt", 3, 3, 3, 5)
    scope = Scope(its(n=2, h=6, w=7, f=5), its(r=3, s=3, c=3),
                  wt[r, s, c, f] * x[n, h + r - 1, w + s - 1, c])
    mt = match_conv(scope)
    assert mt is not None and mt.input.source is x
    assert mt.input_dims == (0, 3, 1, 2) and mt.weight_dims == (3, 2, 0, 1)
    assert mt.out_perm == (0, 2, 3, 1) and mt.padding == (1, 1)


def test_stride_one_conv_transpose_is_a_conv_with_a_flipped_kernel():
    mt = match_conv(ops.conv_transpose2d(T("x", 1, 4, 5, 5), T("w", 4, 3, 3, 3), padding=1))
    assert mt is not None and mt.weight_flips == (2, 3) and mt.weight_dims == (1, 0, 2, 3)
    assert mt.padding == (1, 1)


def _conv_scope(x_index, w_index, x_shape=(1, 3, 8, 8), w_shape=(4, 3, 3, 3), reduce=Reduce.SUM):
    return Scope(its(n=1, f=4, h=6, w=6), its(c=3, r=3, s=3),
                 T("x", *x_shape)[x_index] * T("w", *w_shape)[w_index], reduce)


@pytest.mark.parametrize("scope", [
    _conv_scope((n, c, h + r, w + s), (f, c, r + 1, s)),  # kernel read shifted
    _conv_scope((n, c, h + r, w + s), (f, c, r, s), reduce=Reduce.MAX),  # a max-pool look-alike
    _conv_scope((n, c, h + w, r + s), (f, c, r, s)),  # two outputs in one window
    _conv_scope((n, f, h + r, w + s), (f, c, r, s)),  # channel is the output channel
    _conv_scope((n, c, h + r, w + s), (f, c, r, s), x_shape=(1, 5, 8, 8)),  # a channel slice
    _conv_scope((n, c, h - r, w + s), (f, c, r, s)),  # a negative dilation
    _conv_scope((n, c, 2 * h + r, w + s), (f, c, 2 * r, s), w_shape=(4, 3, 6, 3)),
    Scope(its(n=1, f=4, h=6, w=6), its(c=3, r=3, s=3),
          T("x", 1, 3, 8, 8)[n, c, h + r, w + s] * T("w", 4, 3, 3, 3)[f, c, r, s]
          * T("g", 4)[f]),  # a third factor
    ops.matmul(T("a", 4, 6), T("b", 6, 5)),
    ops.gbmm(T("a", 1, 8, 3), T("v", 1, 8, 4), 1),
])
def test_conv_look_alikes_do_not_match(scope):
    assert match_conv(scope) is None


def test_kernel_dims_in_another_order_are_a_weight_permutation():
    mt = match_conv(_conv_scope((n, c, h + r, w + s), (f, c, s, r)))
    assert mt is not None and mt.weight_dims == (0, 1, 3, 2) and mt.padding == (0, 0)


# -- banded ----------------------------------------------------------------------------------
@pytest.mark.parametrize("wd, dil", list(itertools.product([0, 1, 3], [1, 2, 4])))
def test_g2bmm_and_gbmm_parameters(wd, dil):
    q, kk = T("q", 2, 20, 4), T("k", 2, 20, 4)
    mt = match_g2bmm(ops.g2bmm(q, kk, wd, dil))
    assert mt is not None and (mt.kind, mt.w, mt.d, mt.offset) == ("g2bmm", wd, dil, 0)
    assert (mt.batch, mt.row, mt.band, mt.feature) == (("b",), "i", "j", "c")
    mt = match_gbmm(ops.gbmm(T("a", 2, 20, 2 * wd + 1), kk, wd, dil))
    assert mt is not None and (mt.kind, mt.w, mt.d, mt.offset) == ("gbmm", wd, dil, 0)
    assert mt.out_perm == (0, 1, 2)


def test_banded_operands_in_either_order():
    scope = Scope(its(i=8, j=3), its(c=3), T("q", 8, 3)[i + j, c] * T("k", 8, 3)[i, c])
    mt = match_g2bmm(scope)
    assert mt.lhs.source.name == "k" and (mt.w, mt.offset) == (1, 1)


def test_banded_batch_axes_layouts_and_shifts():
    # no batch, k stored feature-major, band shifted by 2, output (j, i)
    scope = Scope(its(j=5, i=9), its(c=3), T("q", 9, 3)[i, c] * T("k", 3, 12)[c, i + j])
    mt = match_g2bmm(scope)
    assert mt.batch == () and (mt.w, mt.d, mt.offset) == (2, 1, 2)
    assert mt.rhs_dims == (1, 0) and mt.out_perm == (1, 0)
    # two batch dims, a band range starting below 0: j in -1:2 is w = 1, centred
    scope = Scope(its(b=2, h=3, i=7, c=4), its(j=(-1, 2)),
                  T("a", 2, 3, 7, 3)[b, h, i, j + 1] * T("v", 2, 3, 7, 4)[b, h, i + 2 * j, c])
    mt = match_gbmm(scope)
    assert mt.batch == ("b", "h") and (mt.w, mt.d, mt.offset) == (1, 2, 0)


@pytest.mark.parametrize("scope", [
    Scope(its(i=8, j=4), its(c=3), T("q", 8, 3)[i, c] * T("k", 8, 3)[i + j - 2, c]),  # even band
    Scope(its(i=4, j=3), its(c=3), T("q", 8, 3)[i, c] * T("k", 8, 3)[2 * i + j - 1, c]),
    Scope(its(i=8, j=3), its(c=3), T("q", 8, 3)[i, c] * T("k", 8, 3)[i - j + 1, c]),  # reversed
    Scope(its(i=8, j=3), its(c=3), T("q", 8, 3)[i, c] * T("k", 8, 3)[i + j - 1, c], Reduce.MAX),
    Scope(its(i=8, j=3), its(c=3), T("q", 8, 3)[i + j, c] * T("k", 8, 3)[i + j - 1, c]),
    ops.matmul(T("a", 4, 6), T("b", 6, 5)),
    ops.conv1d(T("x", 1, 3, 8), T("w", 4, 3, 3), padding=1),
])
def test_banded_look_alikes_do_not_match(scope):
    assert match_g2bmm(scope) is None and match_gbmm(scope) is None


# -- maps, reductions, softmax -----------------------------------------------------------------
def test_elementwise_reads_whole_or_broadcast():
    mt = match_elementwise(ops.add(ops.relu(T("x", 3, 4)), T("y", 1, 4)))
    assert mt is not None and mt.ops == ("+",) and mt.dims == (("i", "j"), (None, "j"))
    assert match_elementwise(ops.transpose(T("x", 3, 4), 0, 1)).layout_only
    for not_elementwise in (ops.pad(T("x", 3, 4), (1, 1)), ops.reshape(T("x", 3, 4), 12),
                            ops.slice(T("x", 6), 0, 1, 5), ops.sum(T("x", 3, 4), 1)):
        assert match_elementwise(not_elementwise) is None


def test_reductions_but_not_contractions():
    mt = match_reduction(ops.amax(T("x", 3, 4, 5), dim=(0, 2)))
    assert mt.reduce is Reduce.MAX and mt.axes == ("ri", "rk") and mt.kept == ("j",)
    assert match_reduction(ops.mean(T("x", 3, 4), dim=1)).reduce is Reduce.SUM
    scope = Scope(its(i=3), its(j=4), T("x", 3, 4)[i, j] * T("y", 3, 4)[i, j])
    assert match_reduction(scope) is None and classify(scope) == "contraction"
    assert match_reduction(Scope(its(i=3), its(j=4), T("x", 3, 8)[i, 2 * j])) is None


@pytest.mark.parametrize("kind, shape, dim", [
    ("softmax", (3, 4, 5), 1), ("softmax", (7,), 0), ("softmax", (2, 6), -1),
    ("log_softmax", (3, 4, 5), 2), ("log_softmax", (4, 1), 1),
])
def test_softmax_chain(kind, shape, dim):
    x = T("x", *shape)
    root = getattr(ops, kind)(x, dim)
    mt = match_softmax(root)
    assert mt is not None and mt.kind == kind and mt.source is x
    assert mt.dim == dim % len(shape) and len(mt.fused) == 3


def test_softmax_of_an_expression_and_look_alikes():
    inner = ops.relu(T("x", 3, 4))
    assert match_softmax(ops.softmax(inner, 0)).source == inner
    root = ops.softmax(T("x", 3, 4), 1)
    e, total = root.body.lhs, root.body.rhs
    assert match_softmax(Scope(root.traversal, (), e * total)) is None  # multiply, not divide
    assert match_softmax(Scope(root.traversal, (), e / e)) is None
    other = ops.softmax(T("y", 3, 4), 1)  # exp of x divided by the sum of exp of y
    assert match_softmax(Scope(root.traversal, (), e / other.body.rhs)) is None
    assert match_softmax(ops.div(T("a", 3, 4), ops.sum(T("a", 3, 4), 1, keepdim=True))) is None


# -- classify ----------------------------------------------------------------------------------
@pytest.mark.parametrize("scope, cls", [
    (ops.mm(T("a", 4, 6), T("b", 6, 5)), "matmul"),
    (ops.bmm(T("a", 3, 4, 6), T("b", 3, 6, 5)), "batch_matmul"),
    (ops.conv2d(T("x", 1, 3, 6, 6), T("w", 4, 3, 3, 3)), "conv"),
    (ops.g2bmm(T("q", 1, 8, 4), T("k", 1, 8, 4), 2), "g2bmm"),
    (ops.gbmm(T("a", 1, 8, 5), T("v", 1, 8, 4), 2), "gbmm"),
    (ops.sigmoid(T("x", 3, 4)), "elementwise"),
    (ops.sum(T("x", 3, 4), 0), "reduction"),
    (ops.einsum("ij,jk,kl->il", T("a", 2, 3), T("b", 3, 4), T("c", 4, 5)), "contraction"),
    (ops.reshape(T("x", 3, 4), 2, 6), "eoperator"),
    (ops.transpose(T("x", 3, 4), 0, 1), "eoperator"),
    (ops.pad(T("x", 3, 4), (1, 1)), "eoperator"),
    # EinNet's offset-reduce: O[h, f] = sum[r] T[h + r - 1, f, r]
    (Scope(its(h=6, f=4), its(r=3), T("t", 6, 4, 3)[h + r - 1, f, r]), "eoperator"),
])
def test_classify(scope, cls):
    assert classify(scope) == cls


def test_a_library_operator_with_dims_over_one_point_is_that_operator():
    """``x[i] @ w`` through core ATen: the row unsqueezed to one, an ``mm``; a stack of those
    batched over the loop index reads ``x[l + r, k]`` with ``r`` over one point."""
    x, w = T("x", 4, 6), T("w", 6, 5)
    row = Scope(its(r=1, j=5), its(k=6), x[2, k] * w[k, j])
    assert classify(row) == "matmul" and match_matmul(row) is None  # a view adds the dim
    loop = Iter("l", 0, 4)
    batched = Scope((loop,) + its(r=1, j=5), its(k=6), x[loop.symbol + r, k] * w[k, j])
    assert classify(batched) == "matmul"
    assert classify(Scope(its(r=1, j=5), its(k=6), x[2, k] * x[2, k] * w[k, j])) != "matmul"


def test_matching_ignores_names():
    a, bb = T("left", 4, 6), T("right", 6, 5)
    p, q, z = (iterator_symbol(v) for v in ("p", "q", "zz"))
    scope = Scope((Iter("p", 0, 4), Iter("q", 0, 5)), (Iter("zz", 0, 6),),
                  a[p, z] * bb[z, q], name="conv2d")
    assert classify(scope) == "matmul"
