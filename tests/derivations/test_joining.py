"""Range joining: pieces of one computation over adjacent ranges become one scope."""
import pytest
from hypothesis import given, settings, strategies as st

from ir import Tensor, ops, parse, patterns
from ir.nodes import sub_scopes
from derivations import Budget, derive
from derivations.rules.joining import join_ranges

from derivation_helpers import check_equiv

A, B = Tensor("A", (6, 5)), Tensor("B", (5, 9))


def columns(lo: int, hi: int, b=B):
    """Columns lo:hi of A @ b, as torch code computing a chunk would."""
    return ops.matmul(A, ops.getitem(b, (slice(None), slice(lo, hi))))


@pytest.mark.parametrize("cut", [1, 4, 8])
def test_a_cat_of_column_chunks_joins_into_one_product(cut):
    whole = ops.cat([columns(0, cut), columns(cut, 9)], dim=1)
    joined = join_ranges(whole)
    assert joined, "adjacent chunks of one product should join"
    for j in joined:
        check_equiv(whole, j)
        # one product over all 9 columns remains: no add, no piece
        assert any(s.shape == (6, 9) and s.summation for s in sub_scopes(j))


@pytest.mark.parametrize("second,shift,joins", [
    ("j in 0:4", 5, True),    # columns 5:9 after 0:5: adjacent
    ("j in 0:5", 4, False),   # columns 4:9: column 4 counted twice
    ("j in 0:3", 6, False),   # columns 6:9: column 5 would be computed, not 0
], ids=["adjacent", "overlap", "gap"])
def test_only_adjacent_pieces_join(second, shift, joins):
    program = parse(f"""A: f32[6,5]
B: f32[5,9]
P[i,j] = sum[k] A[i,k] * B[k,j] where j in 0:5
Q[i,j] = sum[k] A[i,k] * B[k,j+{shift}] where {second}
O[i,j] = P[i,j] + Q[i,j-{shift}] where j in 0:9""")
    joined = join_ranges(program)
    assert bool(joined) == joins
    for j in joined:
        check_equiv(program, j)


def test_pieces_of_different_computations_do_not_join():
    other = Tensor("C", (5, 9))
    mixed = ops.cat([columns(0, 4), columns(4, 9, b=other)], dim=1)
    assert join_ranges(mixed) == []


def test_chunked_partial_sums_join_into_one_sum():
    x, y = Tensor("x", (4, 12)), Tensor("y", (12, 3))
    parts = [ops.matmul(ops.getitem(x, (slice(None), slice(lo, lo + 4))),
                        ops.getitem(y, (slice(lo, lo + 4),))) for lo in (0, 4)]
    total = ops.add(*parts)
    joined = join_ranges(total)
    assert joined
    for j in joined:
        check_equiv(total, j)
        assert any(it.extent == 8 for s in sub_scopes(j) for it in s.summation)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=2, max_size=4))
def test_every_chunking_of_a_product_derives_back_to_one_product(widths):
    n = sum(widths)
    b = Tensor("B", (5, n))
    chunks, lo = [], 0
    for w in widths:
        chunks.append(ops.matmul(A, ops.getitem(b, (slice(None), slice(lo, lo + w)))))
        lo += w
    whole = ops.cat(chunks, dim=1)
    d = derive(whole, Budget(nodes=5000, seconds=20))
    found = [c for c in d.candidates(3, lambda s: float(len(str(s))))
             if c.operators == ("matmul",)]
    assert found, [c.operators for c in d.candidates(3, lambda s: float(len(str(s))))]
    check_equiv(whole, found[0].program)


def test_chunked_dilated_banded_product_derives_to_one_g2bmm():
    """Longformer's Q.K^T computed in chunks of strided windows (as ``bench_gpu`` writes it
    for eager torch) is one dilated G2BMM."""
    b, n, c, w, d, chunk = 2, 40, 8, 4, 2, 4
    q, k = Tensor("q", (b, n, c)), Tensor("k", (b, n, c))
    padded = ops.contiguous(ops.pad(k, (0, 0, w * d, w * d)))
    rows = n + 2 * w * d
    outs = []
    for j0 in range(0, 2 * w + 1, chunk):
        count = min(chunk, 2 * w + 1 - j0)
        windows = ops.as_strided(padded, (b, n, count, c), (rows * c, c, d * c, 1), j0 * d * c)
        outs.append(ops.einsum("bic,bijc->bij", q, windows))
    whole = ops.cat(outs, dim=-1)
    cands = derive(whole, Budget(nodes=20000, seconds=30)).candidates(4, lambda s: float(
        len(str(s))))
    banded = [x for x in cands if x.operators == ("g2bmm",)]
    assert banded and banded[0].verified
    match = patterns.match_g2bmm(banded[0].program)
    assert match is not None


def test_many_chunks_join_in_one_step():
    """Runs are joined at once: 24 chunks give one result with a single product, not the
    many partial joins of pairwise joining."""
    b = Tensor("B", (5, 48))
    chunks = [ops.matmul(A, ops.getitem(b, (slice(None), slice(lo, lo + 2))))
              for lo in range(0, 48, 2)]
    whole = ops.cat(chunks, dim=1)
    (joined,) = join_ranges(whole)
    check_equiv(whole, joined)
    assert sum(1 for s in sub_scopes(joined) if s.summation) == 1


def _rows(n: int, j_range: str = "j in 0:4", width: int = 4) -> str:
    """``torch.stack([tanh(x[k] @ w) for k in range(n)])`` as core ATen spells it (views
    inlined): a 1-row product and a map per row, a flat cat, a view reading ``C[4*i + j]``."""
    lines = ["x: f32[%d,6]" % n, "w: f32[6,4]"]
    reads = []
    for k in range(n):
        lines.append(f"M{k}[r,j] = sum[q] x[{k},q] * w[q,j] where r in 0:1")
        lines.append(f"P{k}[t] = tanh(M{k}[0,t])")
        reads.append(f"P{k}[u-{4 * k}]" if k else "P0[u]")
    lines.append(f"C[u] = {' + '.join(reads)} where u in 0:{4 * n}")
    lines.append(f"R[i,j] = C[{width}*i+j] where i in 0:{n}, {j_range}")
    return "\n".join(lines)


def test_a_stack_read_through_a_view_joins_into_one_batched_product():
    """The view's ``C[4*i + j]`` reads row ``i``'s piece at ``j``: each piece is one slot of
    ``i`` wide, its product reads ``x[k, ...]`` with ``k`` its slot, so the products batch
    into one over the loop index and the rows join."""
    program = parse(_rows(5))
    (joined,) = join_ranges(program)
    check_equiv(program, joined)
    products = [s for s in sub_scopes(joined) if s.summation]
    assert len(products) == 1 and patterns.classify(products[0]) == "matmul"
    assert len(sub_scopes(joined)) == 2  # the product and one map: no piece, no copy


@pytest.mark.parametrize("j_range, width", [("j in 0:5", 4), ("j in 0:4", 5)],
                         ids=["reads past a row", "not the pieces' width"])
def test_a_read_that_is_no_flattening_of_the_pieces_does_not_split(j_range, width):
    program = parse(_rows(3, j_range, width))
    for j in join_ranges(program):
        check_equiv(program, j)
    assert all(len([s for s in sub_scopes(j) if s.summation]) > 1 for j in join_ranges(program))


def test_pieces_whose_sources_differ_other_than_by_the_loop_index_do_not_join():
    text = _rows(3).replace("x[2,q]", "x[0,q]")  # row 2 reads row 0: not one function of k
    program = parse(text)
    assert join_ranges(program) == []


# ``bench_gpu.g2bmm_fn(2, 2, chunk=2)`` and ``gbmm_fn`` (w 2, dilation 2: 5 band offsets in
# chunks of 2, 2 and 1) as the compiler sees them: each einsum a bmm over the batch flattened
# (``b = 12*i + j``, unflattened by ``b // 12``, ``b % 12``), the last chunk of one offset an
# elementwise product (and a sum over one column for Q.K^T, no sum at all for P.V).
CHUNKED_G2BMM = """q: f32[2, 12, 3]
k: f32[2, 12, 3]
bmm[b,i,j] = sum[k] q[b//12,b%12,k] * k[b//12,b%12+2*j-4,k] where b in 0:24, i in 0:1, j in 0:2
T0[b,i,j] = sum[k] q[b//12,b%12,k] * k[b//12,b%12+2*j,k] where b in 0:24, i in 0:1, j in 0:2
mul[i,j] = q[i//12,i%12,j] * k[i//12,i%12+4,j] where i in 0:24
T1[i,j] = sum[rj] mul[i,rj] where j in 0:1
cat[i,j,k] = bmm[12*i+j,0,k] + T0[12*i+j,0,k-2] + T1[12*i+j+24*k-96,0] where i in 0:2, j in 0:12, k in 0:5"""
CHUNKED_GBMM = """p: f32[2, 12, 5]
v: f32[2, 12, 3]
bmm[b,i,j] = sum[k] p[b//12,b%12,k] * v[b//12,b%12+2*k-4,j] where b in 0:24, i in 0:1, k in 0:2
T0[b,i,j] = sum[k] p[b//12,b%12,k+2] * v[b//12,b%12+2*k,j] where b in 0:24, i in 0:1, k in 0:2
add[i,j,k] = bmm[12*i+j,0,k] + T0[12*i+j,0,k] where i in 0:2, j in 0:12
mul[i,j,k,l] = p[i,j,l+4] * v[i,j+2*l+4,k] where l in 0:1
T1[i,j,k] = add[i,j,k] + mul[i,j,k,0]"""


@pytest.mark.parametrize("text, kind", [(CHUNKED_G2BMM, "g2bmm"), (CHUNKED_GBMM, "gbmm")],
                         ids=["g2bmm", "gbmm"])
def test_chunked_banded_products_through_the_compiler_join_into_one(text, kind):
    """The chunks' batch is flattened, so each piece is split back into its batch digits;
    the one-offset chunk is the others' function at its offset, so it joins them too."""
    program = parse(text)
    (joined,) = join_ranges(program)
    check_equiv(program, joined)
    assert [patterns.classify(s) for s in sub_scopes(joined)] == [kind]
    best = derive(program, Budget(seconds=2)).candidates(2, lambda s: float(len(str(s))))
    assert best[0].operators == (kind,) and best[0].verified, best[0].program


def test_a_lone_point_joins_only_the_function_it_is_a_point_of():
    text = CHUNKED_G2BMM.replace("k[i//12,i%12+4,j]", "k[i//12,i%12+3,j]")  # offset 3, not 4
    program = parse(text)
    for j in join_ranges(program):
        check_equiv(program, j)
        assert len([s for s in sub_scopes(j) if s.summation]) == 2  # the point stays apart
