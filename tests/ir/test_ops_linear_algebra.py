import pytest
import torch

from ir import ops
from ir.ops import OpError

from op_helpers import check_against_torch, operands

MATMUL_SHAPES = [
    ((3,), (3,)), ((2, 3), (3, 4)), ((3,), (3, 4)), ((2, 3), (3,)), ((2, 1, 3, 4), (5, 4, 2)),
    ((4,), (2, 4, 3)), ((2, 4, 3), (3,)), ((0, 3), (3, 2)), ((2, 3), (3, 0)), ((2, 0), (0, 3)),
    ((1, 2, 3), (4, 3, 5)), ((1, 1), (1, 1)),
]


@pytest.mark.parametrize("a,b", MATMUL_SHAPES, ids=str)
def test_matmul_matches_torch(a, b):
    check_against_torch(ops.matmul, torch.matmul, a, b, name="matmul")


def test_matmul_of_shifted_scopes():
    check_against_torch(ops.matmul, torch.matmul, (2, 1, 3, 4), (5, 4, 2), wrap=True)


def test_matmul_is_one_contraction():
    a, b = operands((2, 3), (3, 4))
    s = ops.matmul(a, b)
    assert [it.name for it in s.traversal] == ["i", "j"]
    assert [it.name for it in s.summation] == ["k"]


@pytest.mark.parametrize("ir_fn,torch_fn,a,b", [
    (ops.mm, torch.mm, (2, 3), (3, 5)), (ops.bmm, torch.bmm, (2, 3, 4), (2, 4, 1)),
    (ops.bmm, torch.bmm, (0, 3, 4), (0, 4, 2)), (ops.mv, torch.mv, (2, 3), (3,)),
    (ops.dot, torch.dot, (4,), (4,))], ids=str)
def test_named_products(ir_fn, torch_fn, a, b):
    check_against_torch(ir_fn, torch_fn, a, b, name=ir_fn.__name__)


@pytest.mark.parametrize("x,w,bias", [((5,), (3, 5), False), ((2, 5), (3, 5), True),
                                      ((2, 3, 5), (4, 5), True), ((2, 5), (5,), False),
                                      ((0, 5), (3, 5), True), ((2, 5), (0, 5), False)], ids=str)
def test_linear(x, w, bias):
    shapes = (x, w) + (((w[0],),) if bias else ())
    check_against_torch(ops.linear, torch.nn.functional.linear, *shapes, name="linear")


def test_attention_composes_through_nested_scopes():
    def ir_fn(q, k, v):
        return ops.matmul(ops.softmax(ops.div(ops.matmul(q, ops.transpose(k, -1, -2)), 2.0), -1), v)

    def torch_fn(q, k, v):
        return torch.softmax(q @ k.transpose(-1, -2) / 2.0, -1) @ v
    check_against_torch(ir_fn, torch_fn, (2, 3, 4), (2, 5, 4), (2, 5, 6))


EINSUMS = [  # (equation, operand shapes)
    ("ij,jk->ik", [(2, 3), (3, 4)]), ("ij,jk", [(2, 3), (3, 4)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("ii->i", [(3, 3)]), ("ii", [(3, 3)]),
    ("iij->j", [(2, 2, 3)]), ("i,j->ij", [(3,), (4,)]), ("ij->", [(2, 3)]), ("ij", [(2, 3)]),
    ("ba", [(2, 3)]), ("Ba,bA", [(2, 3), (4, 5)]), ("ij,jk", [(2, 1), (3, 4)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]), ("...ij->ij", [(2, 3, 4)]),
    ("...ij", [(2, 3, 4)]), ("a...,...->...", [(3, 2), (4, 1)]), ("i,i", [(3,), (3,)]),
    ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]), ("abc->cba", [(2, 3, 4)]),
    ("i...->...", [(3,)]), ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    (" i j , j k -> i k ", [(2, 3), (3, 4)]), ("ij,ij->ij", [(0, 3), (0, 3)]),
    ("nchw,fcrs->nfhwrs", [(1, 2, 3, 3), (2, 2, 1, 2)]), ("ii->", [(1, 1)]),
]


@pytest.mark.parametrize("equation,shapes", EINSUMS, ids=str)
def test_einsum_matches_torch(equation, shapes):
    check_against_torch(lambda *xs: ops.einsum(equation, *xs),
                        lambda *xs: torch.einsum(equation, *xs), *shapes, name="einsum")


def test_einsum_operands_as_a_list_and_sublist_form():
    check_against_torch(lambda a, b: ops.einsum("ij,jk", [a, b]),
                        lambda a, b: torch.einsum("ij,jk", [a, b]), (2, 3), (3, 4))
    check_against_torch(lambda a, b: ops.einsum(a, [0, Ellipsis, 1], b, [1, 2], [2, Ellipsis]),
                        lambda a, b: torch.einsum(a, [0, Ellipsis, 1], b, [1, 2],
                                                  [2, Ellipsis]), (2, 5, 3), (3, 4))


def test_einsum_diagonal_reads_one_iterator_twice():
    (x,) = operands((3, 3))
    s = ops.einsum("ii->i", x)
    assert s.body.indices[0] == s.body.indices[1] and not s.summation


def test_einsum_of_shifted_scopes():
    check_against_torch(lambda a, b: ops.einsum("...ij,jk", a, b),
                        lambda a, b: torch.einsum("...ij,jk", a, b), (2, 2, 3), (3, 1),
                        wrap=True)


@pytest.mark.parametrize("equation,shapes,message", [
    ("ij,jk", [(2, 3)], "the equation 'ij,jk' has 2 operand terms but 1 operands"),
    ("ijk", [(2, 3)], r"operand 0 has 2 dims \(2, 3\) but its subscripts 'ijk' name 3"),
    ("ij...k", [(2, 3)], "name 3 plus an ellipsis"),
    ("i1", [(2, 3)], "invalid subscript '1'"),
    ("i.j", [(2, 3)], "only allowed as one ellipsis"),
    ("ij->k", [(2, 3)], "output subscript k does not appear"),
    ("ij->ii", [(2, 3)], "output subscript i appears more than once"),
    ("ij,jk", [(2, 3), (4, 5)], "subscript j has sizes that cannot be broadcast together: "
                                "3 in operand 0, 4 in operand 1"),
    ("ii->i", [(2, 3)], "subscript i is repeated for operand 0 but the sizes don't match, "
                        "2 != 3"),
    ("...i,...i", [(2, 3), (4, 3)], r"shapes \(2,\) and \(4,\) are not broadcastable"),
    ("ij->j->i", [(2, 3)], "'->' may appear once"),
])
def test_einsum_bad_equations(equation, shapes, message):
    with pytest.raises(OpError, match=f"einsum: .*{message}"):
        ops.einsum(equation, *operands(*shapes))


@pytest.mark.parametrize("call,shapes,message", [
    (ops.matmul, [(2, 3), (4, 5)], r"matmul: size mismatch, input \(2, 3\) and other \(4, 5\): "
                                   r"the last dim of input \(3\) must equal the second-to-last "
                                   r"dim of other \(4\)"),
    (ops.matmul, [(2, 3), (4,)], r"the first dim of other \(4\)"),
    (ops.matmul, [(), (3,)], "matmul: both arguments need at least 1 dimension"),
    (ops.matmul, [(2, 2, 3), (3, 3, 4)], r"matmul: shapes \(2,\) and \(3,\) are not "
                                         r"broadcastable: dim -1"),
    (ops.bmm, [(2, 3), (3, 4)], r"bmm: expected input to be 3-D, got 2-D input of shape "
                                r"\(2, 3\)"),
    (ops.bmm, [(2, 3, 4), (3, 4, 5)], "bmm: batch sizes differ"),
    (ops.bmm, [(2, 3, 4), (2, 5, 5)], r"bmm: size mismatch: dim 2 of input \(2, 3, 4\) \(4\) "
                                      r"!= dim 1 of mat2"),
    (ops.mm, [(2, 3), (2, 3)], r"mm: mat1 and mat2 shapes cannot be multiplied \(2x3 and 2x3\)"),
    (ops.mv, [(2, 3), (2,)], "mv: size mismatch"),
    (ops.dot, [(2,), (3,)], "dot: inconsistent tensor size"),
    (ops.linear, [(2, 4), (3, 5)], r"linear: in_features mismatch: the last dim of input "
                                   r"\(2, 4\) \(4\) != the last dim of weight"),
    (ops.linear, [(2, 5), (3, 5), (2,)], r"linear: bias must have shape \(3,\)"),
    (ops.linear, [(2, 5), (1, 3, 5)], "linear: expected weight to be 1-D or 2-D"),
])
def test_bad_input_messages(call, shapes, message):
    with pytest.raises(OpError, match=message):
        call(*operands(*shapes))
