"""Contractions as ``tl.dot`` kernels: the matmul template, its generic einsum-like form,
and the banded G2BMM / GBMM of Longformer.

A sum of products whose factors split into two sides -- A reads output iterators ``m`` (and
the summation), B reads output iterators ``n`` -- is a tiled matrix product: each program
owns a ``BLOCK_M x BLOCK_N`` output tile and walks the summation ``BLOCK_K`` points at a time,
``acc = tl.dot(a, b, acc)``. The ``m``, ``n`` and summation iterators are decoded from flat
tile offsets, so a conv is an implicit GEMM (rows ``(n, h, w)``, reduction ``(c, r, s)``) and
any layout of the operands is just an address computation; batch iterators come from
``program_id(2)``.

The banded products ``out[b,i,j] = sum[c] A[b,i,c] * B[b, i + d*j + e, c]`` (G2BMM) and
``out[b,i,c] = sum[j] A[b,i,j] * B[b, i + d*j + e, c]`` (GBMM) are computed without the
dense ``(i, row)`` product: rows ``i = r + d*t`` of one residue class ``r`` touch rows
``r + e + d*kk`` of B with ``kk = t + j``, so in ``(t, kk)`` coordinates the band is a dense
diagonal strip of width ``J``; a program takes ``BLOCK_M`` rows ``t`` and only the
``BLOCK_M + J - 1`` rows ``kk`` their band reaches (EinNet's dilated-to-dense rewrite).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from codegen.triton.emitter import TileEmitter
from codegen.triton.text import KernelText, Value, number
from codegen.triton.indexing import MUL
from codegen.triton.kernels import KernelPlan, decode, describe, epilogue, store
from ir.nodes import (
    Access, BinOp, Const, Expr, Iter, Reduce, Scope, affine_terms, free_iterators,
    product_factors,
)
from ir.patterns import match_g2bmm, match_gbmm

DOT_MIN = 4      # smallest output extent on each side worth a tl.dot tile
MAX_FACTORS = 6  # products with more factors are not split into sides


def _factors(r: Scope) -> tuple[list[Expr], float] | None:
    if r.reduce is not Reduce.SUM or not r.summation:
        return None
    factors = product_factors(r.body)
    scale = math.prod(f.value for f in factors if isinstance(f, Const))
    return [f for f in factors if not isinstance(f, Const)], scale


@dataclass(frozen=True)
class Split:
    a: tuple[Expr, ...]
    b: tuple[Expr, ...]
    scale: float
    m: tuple[Iter, ...]
    n: tuple[Iter, ...]
    batch: tuple[Iter, ...]


def split_contraction(r: Scope) -> Split | None:
    """The best two-sided split of ``r``'s product for a tl.dot, or None."""
    parts = _factors(r)
    if parts is None or not 2 <= len(parts[0]) <= MAX_FACTORS:
        return None
    factors, scale = parts
    trav = [t for t in r.traversal]
    uses = [free_iterators(f) for f in factors]
    best, best_score = None, DOT_MIN - 1
    for bits in range(1, 2 ** (len(factors) - 1)):
        side_b = {k + 1 for k in range(len(factors) - 1) if bits >> k & 1}
        ua = set().union(*(uses[k] for k in range(len(factors)) if k not in side_b))
        ub = set().union(*(uses[k] for k in side_b))
        m = tuple(t for t in trav if t.name in ua and t.name not in ub)
        n = tuple(t for t in trav if t.name in ub and t.name not in ua)
        score = min(math.prod(t.extent for t in m), math.prod(t.extent for t in n))
        if m and n and score > best_score:
            batch = tuple(t for t in trav if t not in m and t not in n)
            a = tuple(f for k, f in enumerate(factors) if k not in side_b)
            b = tuple(f for k, f in enumerate(factors) if k in side_b)
            best, best_score = Split(a, b, scale, m, n, batch), score
    return best


@dataclass(frozen=True)
class Band:
    kind: str                 # "g2bmm" | "gbmm"
    batch: tuple[Iter, ...]
    i: Iter                   # the row iterator
    j: Iter                   # the band iterator
    c: Iter                   # the feature iterator
    d: int                    # the shifted row is i + d*j + e
    e: int
    a: Expr                   # A[batch.., i, c or j]
    b: Expr                   # B[batch.., i + d*j + e, c]
    scale: float


def match_band(r: Scope) -> Band | None:
    """``r`` as a G2BMM or GBMM: by ``ir.patterns`` (iterator roles, any dim order), else --
    for a band with constant factors, which the patterns leave out -- by position: traversal
    ``batch.., i, j`` / summation ``c`` (G2BMM) or ``batch.., i, c`` / ``j`` (GBMM), the
    right operand read at row ``i + d*j + e``, ``d >= 1``."""
    for match in (match_g2bmm, match_gbmm):
        m = match(r)
        if m is not None:
            its = r.iterators
            return Band(m.kind, tuple(its[n] for n in m.batch), its[m.row], its[m.band],
                        its[m.feature], m.d, m.offset - m.d * m.w, m.lhs, m.rhs, 1.0)
    return _match_band_by_position(r)


def _match_band_by_position(r: Scope) -> Band | None:
    parts = _factors(r)
    if parts is None or len(parts[0]) != 2 or len(r.summation) != 1 or len(r.traversal) < 3:
        return None
    (x, y), scale = parts
    if not isinstance(x, Access) or not isinstance(y, Access):
        return None
    *batch, i, last = r.traversal
    (summed,) = r.summation
    for kind, j, c in (("g2bmm", last, summed), ("gbmm", summed, last)):
        plain = [t.symbol for t in batch] + [i.symbol, (c if kind == "g2bmm" else j).symbol]
        for a, b in ((x, y), (y, x)):
            if list(a.indices) != plain or len(b.indices) != len(plain):
                continue
            if list(b.indices[:len(batch)]) != plain[:len(batch)] or b.indices[-1] != c.symbol:
                continue
            terms = affine_terms(b.indices[-2])
            if terms is None:
                continue
            coeffs, const = terms
            if set(coeffs) == {i.name, j.name} and coeffs[i.name] == 1 and coeffs[j.name] >= 1:
                return Band(kind, tuple(batch), i, j, c, coeffs[j.name], const, a, b, scale)
    return None


@dataclass
class Geometry:
    a_env: dict
    b_env: dict
    out_env: dict
    loop: tuple[str, str]                       # start and stop of the K loop
    k_env: Callable[[KernelText], tuple[dict, dict]]
    grid: tuple[str, ...]
    problem: dict
    doc: str


def _pids(kt: KernelText, batch: bool) -> None:
    kt.line("pid_m = tl.program_id(0)")
    kt.line("pid_n = tl.program_id(1)")
    if batch:
        kt.line("pid_b = tl.program_id(2)")


def _generic(kt: KernelText, r: Scope, sp: Split) -> Geometry:
    size = lambda its: math.prod(t.extent for t in its)  # noqa: E731
    m, n, k, nb = size(sp.m), size(sp.n), size(r.summation), size(sp.batch)
    _pids(kt, nb > 1)
    env = decode(kt, sp.batch, "pid_b", None)
    kt.line("offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)")
    kt.line("offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)")
    kt.axis("m", "BLOCK_M", f"offs_m[:, None] < {m}")
    kt.axis("n", "BLOCK_N", f"offs_n[None, :] < {n}")
    env_m = decode(kt, sp.m, "offs_m[:, None]", "m")
    env_n = decode(kt, sp.n, "offs_n[None, :]", "n")

    def k_env(kt: KernelText):
        kt.axis("ka", "BLOCK_K", f"offs_k[None, :] < {k}")
        kt.axis("kb", "BLOCK_K", f"offs_k[:, None] < {k}")
        return (decode(kt, r.summation, "offs_k[None, :]", "ka", "_a"),
                decode(kt, r.summation, "offs_k[:, None]", "kb", "_b"))

    names = lambda its: ", ".join(t.name for t in its) or "-"  # noqa: E731
    doc = (f"rows ({names(sp.m)}) M={m}, columns ({names(sp.n)}) N={n}, reduction "
           f"({names(r.summation)}) K={k}" + (f", batch ({names(sp.batch)}) {nb}" if nb > 1
                                              else ""))
    grid = (f'triton.cdiv({m}, META["BLOCK_M"])', f'triton.cdiv({n}, META["BLOCK_N"])', str(nb))
    return Geometry({**env, **env_m}, {**env, **env_n}, {**env, **env_m, **env_n},
                    ("0", str(k)), k_env, grid, {"M": m, "N": n, "K": k, "B": nb}, doc)


def _banded(kt: KernelText, r: Scope, band: Band) -> Geometry:
    d, i, j, c = band.d, band.i, band.j, band.c
    rows, width, feats = -(-i.extent // d), j.extent, c.extent
    nb = math.prod(t.extent for t in band.batch)
    _pids(kt, nb * d > 1)
    env = decode(kt, band.batch, "pid_b // " + str(d) if d > 1 else "pid_b", None)
    res = kt.kvar("r", f"pid_b % {d}", (), 0, d - 1).symbol if d > 1 else 0
    kt.line("offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)")
    kt.axis("m", "BLOCK_M", f"offs_m[:, None] < {rows}")
    t = kt.kvar("t", "offs_m[:, None]", ("m",), 0, rows - 1).symbol
    row = i.lo + res + d * t
    span = rows + width - 1  # kk = t + j covers 0 .. rows + width - 2
    if band.kind == "g2bmm":
        kt.line("offs_n = pid_m * BLOCK_M + pid_n * BLOCK_N + tl.arange(0, BLOCK_N)")
        kt.axis("n", "BLOCK_N", f"offs_n[None, :] < {span}")
        kk = kt.kvar("kk", "offs_n[None, :]", ("n",), 0, span - 1).symbol
        a_env, b_env = {**env, i.name: row}, {**env, i.name: i.lo + res, j.name: j.lo + kk}
        out = {**env, i.name: row, j.name: j.lo + kk - t}
        loop = ("0", str(feats))

        def k_env(kt: KernelText):
            kt.axis("ka", "BLOCK_K", f"offs_k[None, :] < {feats}")
            kt.axis("kb", "BLOCK_K", f"offs_k[:, None] < {feats}")
            return (decode(kt, [c], "offs_k[None, :]", "ka", "_a"),
                    decode(kt, [c], "offs_k[:, None]", "kb", "_b"))
        grid = (f'triton.cdiv({rows}, META["BLOCK_M"])',
                f'triton.cdiv(META["BLOCK_M"] + {width - 1}, META["BLOCK_N"])', str(nb * d))
        problem = {"M": rows, "N": width, "K": feats, "B": nb * d}
    else:
        kt.line("offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)")
        kt.axis("n", "BLOCK_N", f"offs_n[None, :] < {feats}")
        env_c = decode(kt, [c], "offs_n[None, :]", "n")
        a_env, b_env = {**env, i.name: row}, {**env, i.name: i.lo + res, **env_c}
        out = {**env, i.name: row, **env_c}
        loop = ("pid_m * BLOCK_M", f"pid_m * BLOCK_M + BLOCK_M + {width - 1}")

        def k_env(kt: KernelText):
            kt.axis("ka", "BLOCK_K", f"offs_k[None, :] < {span}")
            kt.axis("kb", "BLOCK_K", f"offs_k[:, None] < {span}")
            kk_a = kt.kvar("kk_a", "offs_k[None, :]", ("ka",), 0, span - 1).symbol
            kk_b = kt.kvar("kk_b", "offs_k[:, None]", ("kb",), 0, span - 1).symbol
            return {j.name: j.lo + kk_a - t}, {j.name: j.lo + kk_b}
        grid = (f'triton.cdiv({rows}, META["BLOCK_M"])', f'triton.cdiv({feats}, META["BLOCK_N"])',
                str(nb * d))
        problem = {"M": rows, "N": feats, "K": width, "B": nb * d}
    first = f"{i.lo} + " if i.lo else ""
    doc = (f"band of width {width}, dilation {d}: rows {i.name} = {first}r + {d}*t of each "
           f"residue class r, {rows} rows t per class, {feats} features")
    return Geometry(a_env, b_env, out, loop, k_env, grid, problem, doc)


def _tile(em: TileEmitter, factors, env: dict, labels: tuple[str, str]) -> Value:
    v = em.value(factors[0], env)
    for f in factors[1:]:
        v = em.binary(BinOp.MUL, v, em.value(f, env))
    return em.kt.full(v, labels)


def dot_kernel(r: Scope, name: str, names: dict, policy, root: Scope | None = None,
               split: Split | None = None, band: Band | None = None) -> KernelPlan:
    """The tl.dot kernel of contraction ``r`` (``split`` or ``band`` says how), optionally
    with ``root``'s body as its epilogue."""
    kt = KernelText(name)
    em = TileEmitter(kt, names, policy)
    geo = _banded(kt, r, band) if band else _generic(kt, r, split)
    side_a, side_b = ((band.a,), (band.b,)) if band else (split.a, split.b)
    scale = band.scale if band else split.scale
    kt.line(f"# {em.statement(r)}")
    kt.line("acc = tl.full([BLOCK_M, BLOCK_N], 0.0, dtype=ACC)")
    k0 = kt.fresh("k0")
    with em.loop(f"for {k0} in range({geo.loop[0]}, {geo.loop[1]}, BLOCK_K):"):
        kt.line(f"offs_k = {k0} + tl.arange(0, BLOCK_K)")
        ka, kb = geo.k_env(kt)
        a = _tile(em, side_a, {**geo.a_env, **ka}, ("m", "ka"))
        b = _tile(em, side_b, {**geo.b_env, **kb}, ("kb", "n"))
        # padded summation lanes must add nothing: 0 times a finite value
        if not ("kb" in b.zero and a.finite or "ka" in a.zero and b.finite):
            a = kt.masked(a, {"ka"})
            if not b.finite:
                b = kt.masked(b, {"kb"})
        a = a if a.code.isidentifier() else em.temp("a", a)
        b = b if b.code.isidentifier() else em.temp("b", b)
        kt.line(f"acc = tl.dot({a.code}.to(DOT_DTYPE), {b.code}.to(DOT_DTYPE), acc,")
        kt.line("             input_precision=DOT_PRECISION, out_dtype=ACC)")
    acc = Value("acc", frozenset({"m", "n"}))
    if scale != 1:
        acc = Value(f"acc * {number(scale)}", acc.axes, 0, MUL)
    v, env = epilogue(em, r, geo.out_env, acc, root)
    out = root or r
    store(kt, em, out, v, env, ("m", "n"), comment=root is not None)
    form = band.kind if band else "dot"
    what = names.get(r, r.name) + (f" (then {names.get(root, root.name)} on the tile)"
                                   if root else "")
    doc = (f"{describe(out, names)}: {what} as a tiled tl.dot; {geo.doc}.\n\nEach program "
           f"computes a BLOCK_M x BLOCK_N output tile, BLOCK_K reduction points at a time.")
    return KernelPlan(out, "banded" if band else "dot", form, kt, em, doc, geo.problem,
                      geo.grid, ("BLOCK_M", "BLOCK_N", "BLOCK_K"), dot=True,
                      fused=(r,) if root else ())
