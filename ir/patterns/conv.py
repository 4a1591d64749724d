"""Conv1d / Conv2d: a sum over input windows times a weight, matched by iterator roles.

``out[n, f, h, w] = sum[c, r, s] x[n, ch, h*sh + r*dh - ph, w*sw + s*dw - pw] * W[f, c, r, s]``

The iterator table gives every iterator its role: the weight is read whole (each dim by one
iterator, or backwards ``k-1-r``: a flipped kernel), by exactly one traversal iterator ``f``
(output channels) and by every summation iterator. In the input, a *spatial* dim is indexed
by a traversal iterator ``h`` (coefficient = stride) plus a kernel iterator ``r`` (coefficient
= dilation) plus a constant (= -padding); the *channel* dim by a summation iterator ``c``,
plus ``Cg*floor(f/q)`` with groups (``Cg*f`` when ``q == 1``); an optional *batch* dim by a
traversal iterator read whole. Dims may come in any order (recorded as permutations).
"""
from __future__ import annotations

from dataclasses import dataclass

from ir.nodes import Access, Reduce, Scope
from ir.patterns.table import IteratorTable, iterator_table, product_terms, split_floor


@dataclass(frozen=True)
class ConvMatch:
    input: Access
    weight: Access
    batch: str | None            # None: an unbatched conv
    out_channel: str
    in_channel: str
    spatial: tuple[str, ...]     # output position iterators, in the input's dim order
    kernel: tuple[str, ...]      # the kernel iterator paired with each
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    padding: tuple[int, ...]     # zeros before the input (negative: leading positions unread)
    padding_end: tuple[int, ...]  # zeros the last output position reads after its end
    groups: int
    input_dims: tuple[int, ...]  # input source dims of (batch,) channel, spatial...
    weight_dims: tuple[int, ...]  # weight source dims of out_channel, in_channel, kernel...
    weight_flips: tuple[int, ...]  # weight source dims read backwards
    out_perm: tuple[int, ...]    # result axes ((batch,) out_channel, spatial...) in traversal order

    @property
    def kind(self) -> str:
        return f"conv{len(self.spatial)}d"

    @property
    def symmetric(self) -> bool:
        """Whether torch's one ``padding`` per dim covers both ends (extra outputs cropped)."""
        return all(0 <= p and e <= p for p, e in zip(self.padding, self.padding_end))


def match_conv(scope: Scope) -> ConvMatch | None:
    """``scope`` as a bias-free conv1d / conv2d with layout permutations, or None."""
    if scope.reduce is not Reduce.SUM or not scope.summation:
        return None
    reads, scale, other = product_terms(scope.body)
    if len(reads) != 2 or other or scale != 1.0:
        return None
    t = iterator_table(scope)
    return _conv(t, 0, 1) or _conv(t, 1, 0)


def _weight_axes(t: IteratorTable, w: int) -> list[tuple[str, bool]] | None:
    """Per weight dim: (iterator, read backwards), when every dim is read whole."""
    out = []
    for d, a in enumerate(t.affine[w]):
        if a is None or len(a.terms) != 1:
            return None
        (name, c), size = a.terms[0], t.accesses[w].source.shape[d]
        if t.extent(name) != size or (c, a.const) not in ((1, 0), (-1, size - 1)):
            return None
        out.append((name, c == -1 and size > 1))
    names = [n for n, _ in out]
    return out if len(set(names)) == len(names) else None


def _channel(t: IteratorTable, x: int, d: int, f: str, summed: set[str]):
    """``(c, groups)`` when input dim ``d`` is the channel ``c`` (+ ``Cg*floor(f/q)``)."""
    split = split_floor(t.positions[x][d])
    if split is None:
        return None
    affine, floors = split
    cs = [n for n, k in affine.terms if n in summed and k == 1]
    if affine.const != 0 or len(cs) != 1:
        return None
    c = cs[0]
    cg, feats = t.extent(c), t.extent(f)
    rest = [term for term in affine.terms if term[0] != c]
    if not rest and not floors:
        q = None  # groups == 1
    elif not floors and rest == [(f, cg)]:
        q = 1  # floor(f/1) simplified away: one output channel per group
    elif not rest and len(floors) == 1 and floors[0][0] == cg and \
            floors[0][1].terms == ((f, 1),) and floors[0][1].const == 0:
        q = floors[0][2]
    else:
        return None
    groups = 1 if q is None else feats // q
    if q is not None and (q < 1 or feats % q):
        return None
    return (c, groups) if t.accesses[x].source.shape[d] == groups * cg else None


def _conv(t: IteratorTable, x: int, w: int) -> ConvMatch | None:
    waxes = _weight_axes(t, w)
    if waxes is None:
        return None
    wnames = [n for n, _ in waxes]
    traversal, summed = set(t.traversal), set(t.summation)
    feats = [n for n in wnames if n in traversal]
    if len(feats) != 1 or not summed <= set(wnames):
        return None
    f = feats[0]
    batch = channel = None
    spatial = []  # (dim, h, r, stride, dilation, padding)
    for d, (pos, a) in enumerate(zip(t.positions[x], t.affine[x])):
        its = {s.name for s in pos.free_symbols}
        if f in its or (len(its) == 1 and its <= summed):
            found = _channel(t, x, d, f, summed)
            if found is None or channel is not None:
                return None
            channel = (d,) + found
        elif a is not None and len(its) == 1 and its <= traversal:
            if batch is not None or t.whole(x, d) is None:
                return None
            batch = (d, a.single)
        elif a is not None and len(a.terms) == 2:
            (p, cp), (q, cq) = a.terms
            (h, sh), (r, dr) = ((p, cp), (q, cq)) if p in traversal else ((q, cq), (p, cp))
            if h not in traversal or r not in summed or sh < 1 or dr < 1:
                return None
            spatial.append((d, h, r, sh, dr, -a.const))
        else:
            return None
    if channel is None or not 1 <= len(spatial) <= 2:
        return None
    hs, rs = [s[1] for s in spatial], [s[2] for s in spatial]
    out_its = ([batch[1]] if batch else []) + [f] + hs
    if sorted(out_its) != sorted(traversal) or len(set(out_its)) != len(out_its):
        return None
    sum_its = [channel[1]] + rs
    if sorted(sum_its) != sorted(summed) or sorted(wnames) != sorted([f] + sum_its):
        return None
    xshape = t.accesses[x].source.shape
    ends = tuple((t.extent(h) - 1) * sh + (t.extent(r) - 1) * dr - p - (xshape[d] - 1)
                 for d, h, r, sh, dr, p in spatial)
    return ConvMatch(
        t.accesses[x], t.accesses[w], batch[1] if batch else None, f, channel[1],
        tuple(hs), tuple(rs),
        tuple(s[3] for s in spatial), tuple(s[4] for s in spatial),
        tuple(s[5] for s in spatial), ends, channel[2],
        tuple(([batch[0]] if batch else []) + [channel[0]] + [s[0] for s in spatial]),
        tuple(wnames.index(n) for n in [f, channel[1]] + rs),
        tuple(d for d, (_, flipped) in enumerate(waxes) if flipped),
        tuple(out_its.index(n) for n in t.traversal))
