"""Encoding ir scopes into egglog terms and back: exact round trips, the encoding's choices."""
from __future__ import annotations

import pytest
import sympy

from ir import Iter, Scope, Tensor, ops
from ir.nodes import Reduce, UnOp, Unary, Const

from derivations.encode import EncodeError, encode
from derivation_helpers import check_equiv, fingerprint, round_trip

A, B, C = Tensor("A", (6, 5)), Tensor("B", (5, 7)), Tensor("C", (7, 3))
X, W = Tensor("x", (2, 3, 8, 8)), Tensor("w", (4, 3, 3, 3))


def _lo_scope() -> Scope:
    """Traversal and summation ranges that do not start at 0, reading out of bounds at the edges."""
    i, k = Iter("i", 2, 7), Iter("k", 1, 6)
    return Scope((i,), (k,), A[i.symbol - 2, k.symbol] * B[k.symbol - 1, 0], name="lo")


def _sub_range_read() -> Scope:
    """A contraction read over a narrower range than it is defined on (a positional read)."""
    t = ops.matmul(A, B)
    i, j = Iter("i", 1, 4), Iter("j", 0, 7)
    return Scope((i, j), (), t[i.symbol, j.symbol] * 2.0)


def _wider_read() -> Scope:
    """Reading past a scope's range must stay a positional read (the overhang reads 0)."""
    t = ops.matmul(A, B)
    i, j = Iter("i", 0, 9), Iter("j", 0, 7)
    return Scope((i, j), (), t[i.symbol, j.symbol])


def _shared() -> Scope:
    t = ops.relu(ops.matmul(A, B))
    return ops.add(t, ops.exp(t))


def _scalar() -> Scope:
    k = Iter("k", 0, 5)
    return Scope((), (k,), Unary(UnOp.TANH, A[0, k.symbol]) * Const(-1.5))


def _right_nested() -> Scope:
    i, k = Iter("i", 0, 6), Iter("k", 0, 5)
    return Scope((i,), (k,), Const(3.0) * (A[i.symbol, k.symbol] * B[k.symbol, 2]))


CASES = {
    "matmul_chain": lambda: ops.matmul(ops.matmul(A, B), C),
    "conv_same": lambda: ops.conv2d(X, W, padding="same"),
    "conv_stride_dilation_bias": lambda: ops.conv2d(X, W, Tensor("b", (4,)), stride=2, padding=1, dilation=2),
    "conv_groups": lambda: ops.conv2d(Tensor("xg", (1, 4, 6, 6)), Tensor("wg", (4, 2, 3, 3)), groups=2),
    "conv_transpose": lambda: ops.conv_transpose2d(X, Tensor("wt", (3, 4, 3, 3)), stride=2, padding=1, output_padding=1),
    "softmax_relu_conv": lambda: ops.softmax(ops.relu(ops.conv2d(X, W, padding="same")), dim=1),
    "amax_of_matmul": lambda: ops.amax(ops.matmul(A, B), dim=1),
    "amin": lambda: ops.amin(A, dim=0),
    "log_softmax": lambda: ops.log_softmax(ops.matmul(A, B), dim=-1),
    "mean_scaled": lambda: ops.mean(ops.mul(ops.matmul(A, B), 2.0), dim=0),
    "elementwise": lambda: ops.sigmoid(ops.div(ops.sqrt(ops.abs(A)), ops.add(ops.neg(A), 3.0))),
    "linear_bias": lambda: ops.linear(A, Tensor("Wl", (4, 5)), Tensor("bl", (4,))),
    "g2bmm": lambda: ops.g2bmm(Tensor("q", (2, 16, 4)), Tensor("kk", (2, 16, 4)), 2, 2),
    "unfold": lambda: ops.unfold(A, 0, 2, 2),
    "pad_slice": lambda: ops.slice(ops.pad(A, (1, 2)), 1, 1, 4),
    "cat": lambda: ops.cat([A, ops.matmul(A, Tensor("I", (5, 5)))], dim=0),
    "transpose_matmul": lambda: ops.matmul(ops.transpose(ops.matmul(A, B), 0, 1), Tensor("D", (6, 2))),
    "reshape_floor_mod": lambda: ops.reshape(ops.matmul(A, B), (3, 14)),
    "einsum_diagonal": lambda: ops.einsum("ii->i", Tensor("S", (4, 4))),
    "lo_ranges": _lo_scope,
    "sub_range_read": _sub_range_read,
    "wider_read": _wider_read,
    "shared_scope": _shared,
    "scalar_scope": _scalar,
    "right_nested_product": _right_nested,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_round_trip_is_exact(name):
    e = CASES[name]()
    back, _ = round_trip(e)
    assert fingerprint(back) == fingerprint(e), f"--- original:\n{e}\n--- decoded:\n{back}"
    check_equiv(back, e)


def test_every_binder_gets_its_own_name():
    term, enc = encode(ops.matmul(ops.matmul(A, B), C))
    # root i, j and sum k; the inner matmul's outputs are renamed to the reader's i, k and
    # its own sum k gets a fresh name.
    assert sorted(enc.iters) == ["i", "j", "k", "k1"]


def test_plain_reads_become_use_and_others_stay_positional():
    term, _ = encode(ops.matmul(ops.matmul(A, B), C))
    assert {f.op for f in term.args[2]} == {"use", "acc"}
    shared, _ = encode(_shared())
    sources = [t.args[0] for t in _subterms(shared) if t.op == "scope"]
    assert len(sources) == 2 and sources[0] == sources[1]  # read twice: one shared scope
    for narrower_or_wider in (_sub_range_read(), _wider_read()):
        assert "use" not in repr(encode(narrower_or_wider)[0])


def _subterms(t):
    yield t
    for k in t.kids():
        yield from _subterms(k)


def test_products_are_multisets():
    i, k = Iter("i", 0, 6), Iter("k", 0, 5)
    ab = Scope((i,), (k,), A[i.symbol, k.symbol] * B[k.symbol, 0] * 2.0)
    ba = Scope((i,), (k,), 2.0 * (B[k.symbol, 0] * A[i.symbol, k.symbol]))
    assert encode(ab)[0] == encode(ba)[0]


def test_unbound_iterator_is_an_error_naming_the_scope():
    i = Iter("i", 0, 6)
    bad = Scope((i,), (), A[i.symbol, sympy.Symbol("zz", integer=True)], name="bad")
    with pytest.raises(EncodeError, match=r"bad.*zz"):
        encode(bad)


def test_bare_scope_in_body_is_an_error():
    i = Iter("i", 0, 6)
    inner = Scope((i,), (), A[i.symbol, 0])
    with pytest.raises(EncodeError, match="must be accessed"):
        encode(Scope((i,), (), inner * 2.0))


def test_same_name_different_tensors_is_an_error():
    i = Iter("i", 0, 5)
    with pytest.raises(EncodeError, match="named 'A'"):
        encode(Scope((i,), (), A[0, i.symbol] * Tensor("A", (5,))[i.symbol]))


def test_max_reduce_is_kept():
    term, _ = encode(ops.amax(A, dim=1))
    assert term.op == "reduce" and term.args[0] == Reduce.MAX.value
