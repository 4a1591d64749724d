import pytest
import sympy
import torch

from ir import ops
from ir.ops import OpError

from op_helpers import check_against_torch, operands


@pytest.mark.parametrize("shape,d0,d1", [((2, 3), 0, 1), ((2, 3, 4), -1, 0), ((3,), 0, 0),
                                         ((), 0, -1), ((2, 0, 1), 1, 2)], ids=str)
def test_transpose(shape, d0, d1):
    check_against_torch(ops.transpose, torch.transpose, shape, dim0=d0, dim1=d1,
                        name="transpose")


@pytest.mark.parametrize("shape,dims", [((2, 3, 4), (2, 0, 1)), ((2, 3, 4), (0, -1, 1)),
                                        ((5,), (0,)), ((1, 2, 1, 3), (3, 1, 2, 0))], ids=str)
def test_permute(shape, dims):
    check_against_torch(lambda x: ops.permute(x, dims), lambda x: x.permute(dims), shape)
    check_against_torch(lambda x: ops.permute(x, *dims), lambda x: x.permute(*dims), shape)


RESHAPES = [
    ((2, 3, 4), (6, 4)), ((2, 3, 4), (2, 12)), ((6, 4), (2, 3, 4)), ((2, 3, 4), (3, 8)),
    ((2, 3, 4), (-1,)), ((24,), (4, -1, 2)), ((1, 6, 1), (2, 1, 3)), ((2, 3), (2, 3)),
    ((4, 6), (3, 2, 4)), ((), (1, 1)), ((1,), ()), ((0, 3), (3, 0)), ((2, 0), (-1, 5)),
]


@pytest.mark.parametrize("shape,new", RESHAPES, ids=str)
def test_reshape_and_view(shape, new):
    check_against_torch(lambda x: ops.reshape(x, new), lambda x: x.reshape(new), shape,
                        name="reshape")
    check_against_torch(lambda x: ops.view(x, *new) if new else ops.view(x, new),
                        lambda x: x.view(new), shape, name="view")


def test_reshape_keeps_untouched_dims_affine():
    (x,) = operands((2, 3, 4))
    s = ops.reshape(x, (6, 4))
    assert not s.body.indices[2].has(sympy.floor, sympy.Mod)  # the last dim is just j
    assert s.body.indices[0].has(sympy.floor)


def test_reshape_of_a_shifted_scope():
    check_against_torch(lambda x: ops.reshape(x, (3, 2, 2)), lambda x: x.reshape(3, 2, 2),
                        (2, 6), wrap=True)


@pytest.mark.parametrize("shape,a,b", [((2, 3, 4), 0, -1), ((2, 3, 4, 5), 1, 2),
                                       ((2, 3), 1, 1), ((), 0, -1), ((2, 0, 3), 0, 1)], ids=str)
def test_flatten(shape, a, b):
    check_against_torch(ops.flatten, torch.flatten, shape, start_dim=a, end_dim=b,
                        name="flatten")


@pytest.mark.parametrize("shape,dim", [((1, 3, 1), None), ((1, 3, 1), 0), ((1, 3, 1), 1),
                                       ((1, 3, 1), (0, 2)), ((1,), None), ((2, 1), -1)],
                         ids=str)
def test_squeeze(shape, dim):
    torch_fn = (lambda x: torch.squeeze(x)) if dim is None else (
        lambda x: torch.squeeze(x, dim))
    check_against_torch(lambda x: ops.squeeze(x, dim), torch_fn, shape, name="squeeze")


@pytest.mark.parametrize("shape,dim", [((2, 3), 0), ((2, 3), 2), ((2, 3), -1), ((), 0)],
                         ids=str)
def test_unsqueeze(shape, dim):
    check_against_torch(ops.unsqueeze, torch.unsqueeze, shape, dim=dim, name="unsqueeze")


@pytest.mark.parametrize("dim,start,end,step", [
    (0, 1, 4, 1), (1, 0, None, 2), (1, -3, -1, 1), (0, 2, 100, 3), (1, 4, 2, 1),
    (-1, None, None, 5), (0, -100, 2, 1)], ids=str)
def test_slice(dim, start, end, step):
    def torch_slice(x):
        idx = [builtins_slice(None)] * x.dim()
        idx[dim] = builtins_slice(start, end, step)
        return x[tuple(idx)]
    check_against_torch(lambda x: ops.slice(x, dim, start, end, step), torch_slice, (5, 6),
                        name="slice")


builtins_slice = slice


@pytest.mark.parametrize("shape,dim,size,step", [
    ((7,), 0, 3, 1), ((2, 9, 3), 1, 2, 3), ((2, 9, 3), -1, 3, 1), ((5, 4), 0, 5, 2),
    ((5, 4), 0, 1, 4), ((4, 3), 1, 0, 1)], ids=str)
def test_unfold(shape, dim, size, step):
    check_against_torch(lambda x: ops.unfold(x, dim, size, step),
                        lambda x: x.unfold(dim, size, step), shape, name="unfold")


@pytest.mark.parametrize("shape,amounts", [
    ((3, 4), (1, 2)), ((3, 4), (1, 0, 0, 2)), ((2, 3, 4), (-1, 2, 1, -1)), ((3,), (0, 0)),
    ((2, 5), (-2, -3)), ((0, 2), (1, 1, 1, 0))], ids=str)
def test_pad(shape, amounts):
    check_against_torch(lambda x: ops.pad(x, amounts),
                        lambda x: torch.nn.functional.pad(x, amounts), shape, name="pad")


@pytest.mark.parametrize("shapes,dim", [
    (((2, 3), (4, 3)), 0), (((2, 3), (2, 1), (2, 0), (2, 2)), 1), (((3,),), 0),
    (((1, 2, 3), (1, 2, 3)), -1)], ids=str)
def test_cat(shapes, dim):
    check_against_torch(lambda *xs: ops.cat(xs, dim), lambda *xs: torch.cat(xs, dim), *shapes,
                        name="cat")


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_stack(dim):
    check_against_torch(lambda *xs: ops.stack(xs, dim), lambda *xs: torch.stack(xs, dim),
                        (2, 3), (2, 3), (2, 3), name="stack")


@pytest.mark.parametrize("shape,sizes", [((3, 1), (3, 4)), ((1,), (2, 3, 5)),
                                         ((2, 1, 3), (-1, 4, -1)), ((2, 3), (2, 3))], ids=str)
def test_expand(shape, sizes):
    check_against_torch(lambda x: ops.expand(x, sizes), lambda x: x.expand(sizes), shape,
                        name="expand")


def test_shape_ops_compose():
    def ir_fn(x):
        return ops.flatten(ops.permute(ops.unfold(ops.pad(x, (1, 1)), 1, 3, 2), (0, 2, 1)), 1)

    def torch_fn(x):
        return torch.nn.functional.pad(x, (1, 1)).unfold(1, 3, 2).permute(0, 2, 1).flatten(1)
    check_against_torch(ir_fn, torch_fn, (2, 7))


@pytest.mark.parametrize("call,message", [
    (lambda x: ops.reshape(x, (5, -1)), r"reshape: shape \(5, -1\) is invalid for input of "
                                        r"size 24"),
    (lambda x: ops.reshape(x, (-1, -1)), "only one dimension can be inferred"),
    (lambda x: ops.view(x, 4, 5), r"view: shape \(4, 5\) is invalid for input of size 24"),
    (lambda x: ops.permute(x, (0, 1)), "permute: number of dims 2 does not match the input "
                                       "rank 3"),
    (lambda x: ops.permute(x, (0, 1, 1)), r"permute: dims \(0, 1, 1\) is not a permutation"),
    (lambda x: ops.transpose(x, 0, 3), r"transpose: dim out of range .* but got 3"),
    (lambda x: ops.slice(x, 1, 0, 2, 0), "slice: slice step must be a positive int"),
    (lambda x: ops.unfold(x, 1, 4, 1), "unfold: maximum size for tensor at dimension 1 is 3 "
                                       "but size is 4"),
    (lambda x: ops.unfold(x, 1, 2, 0), "unfold: step must be a positive int"),
    (lambda x: ops.pad(x, (1,)), "pad: padding length 1 must be even"),
    (lambda x: ops.pad(x, (1, 1), value=2.0), "pad: only constant zero padding"),
    (lambda x: ops.pad(x, (-3, -2)), r"pad: padding .* makes dim 2 .* negative \(-1\)"),
    (lambda x: ops.cat([x, ops.sum(x, 0)], 0), r"cat: sizes of tensors must match except in "
                                               r"dimension 0"),
    (lambda x: ops.expand(x, (2, 5, 4)), "expand: the expanded size 5 must match the existing "
                                         "size 3 at non-singleton dim 1"),
    (lambda x: ops.flatten(x, 2, 1), "flatten: start_dim 2 comes after end_dim 1"),
    (lambda x: ops.stack([x, ops.sum(x, 0, keepdim=True)]), "stack: stack expects each "
                                                             "tensor to be equal size"),
])
def test_bad_input_messages(call, message):
    (x,) = operands((2, 3, 4))
    with pytest.raises(OpError, match=message):
        call(x)


def test_contiguous_keeps_the_values():
    check_against_torch(ops.contiguous, lambda x: x.contiguous(), (2, 3, 4), name="contiguous")


def _random_strided(rng, shape):
    """A random as_strided view of a contiguous tensor of ``shape`` that stays inside it."""
    total = 1
    for n in shape:
        total *= n
    rank = int(rng.integers(1, 5))
    size = tuple(int(rng.integers(1, 5)) for _ in range(rank))
    stride = tuple(int(rng.integers(0, 9)) for _ in range(rank))
    span = sum(s * (n - 1) for s, n in zip(stride, size))
    if span >= total:
        return None
    return size, stride, int(rng.integers(0, total - span))


@pytest.mark.parametrize("seed", range(3))
def test_as_strided_matches_torch_on_random_views(seed):
    import numpy as np
    rng = np.random.default_rng(seed)
    shapes = [(24,), (4, 6), (2, 3, 4), (3, 1, 2, 5)]
    checked = 0
    while checked < 60:
        shape = shapes[int(rng.integers(len(shapes)))]
        view = _random_strided(rng, shape)
        if view is None:
            continue
        size, stride, offset = view
        check_against_torch(lambda x: ops.as_strided(x, size, stride, offset),
                            lambda x: torch.as_strided(x.contiguous(), size, stride, offset),
                            shape, name="as_strided")
        checked += 1


def test_as_strided_sliding_windows_need_no_floor_or_mod():
    (x,) = operands((2, 40, 3))
    windows = ops.as_strided(x, (2, 28, 4, 3), (120, 3, 6, 1), 6)  # dilation 2, offset 2 rows
    assert [str(i) for i in windows.body.indices] == ["i", "j + 2*k + 2", "l"]


@pytest.mark.parametrize("size,stride,offset", [
    ((4, 4), (6, 1), 1),   # reaches flat position 1 + 18 + 3 = 22 of 4*5 = 20
    ((3,), (-1,), 1),      # reaches position -1
    ((2, 3), (1,), 0),     # lengths differ
], ids=str)
def test_as_strided_rejects_views_outside_the_tensor(size, stride, offset):
    (x,) = operands((4, 5))
    with pytest.raises(OpError, match="as_strided"):
        ops.as_strided(x, size, stride, offset)


@pytest.mark.parametrize("index", [
    (Ellipsis, slice(1, 3)), 0, -1, (slice(None), 2), (None, 1, slice(None, None, 2)),
    (slice(1, None), None, Ellipsis, 0), (Ellipsis,), (1, -2, slice(0, 5, 3)),
    (slice(-3, -1),), (slice(5, 1),)], ids=str)
def test_getitem_matches_torch_basic_indexing(index):
    check_against_torch(lambda x: ops.getitem(x, index), lambda x: x[index], (3, 4, 5),
                        name="getitem")


@pytest.mark.parametrize("index", [(0, 0, 0, 0), (Ellipsis, Ellipsis), 7, (slice(None, None, -1),)],
                         ids=str)
def test_getitem_rejects_what_it_cannot_express(index):
    (x,) = operands((3, 4, 5))
    with pytest.raises(OpError, match="getitem"):
        ops.getitem(x, index)
