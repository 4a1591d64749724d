"""Matched operators as library calls: EinNet's instantiation step, for the torch backend.

``instantiate(writer, scope)`` tries the ``ir.patterns`` matchers on one scope; on a match it
records the library call computing the scope, with the views its layout permutations need,
and returns its node and the form's name for ``Kernel.forms``:

- ``conv1d`` / ``conv2d``: ``F.conv1d`` / ``F.conv2d``; the input permuted to NC(H)(W), the
  weight flipped and permuted, asymmetric padding as an ``F.pad`` first;
- ``g2bmm`` / ``gbmm``: the ``ollie::`` custom ops of ``codegen.ops`` (``codegen.banded``
  underneath), which never form the dense product;
- ``mm`` / ``bmm`` / ``matmul`` / ``mv`` / ``dot``: a Matmul match; operands permuted, dims of
  one role flattened into one matrix dim, the result unflattened and permuted;
- ``cumsum``: a running sum (``match_prefix_sum``), never the sum of every shifted read.

``softmax_chains`` finds the max / exp / sum / divide chains ``match_softmax`` recognises; the
backend lowers a chain's last scope to ``torch.softmax`` (or ``log_softmax``) and skips its
inner scopes when nothing else reads them. Everything else takes the generic paths.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from codegen.torch_expr import BodyEmitter, Value, permuted
from ir.nodes import Scope, accesses
from ir.patterns import (
    BandedMatch, ConvMatch, MatmulMatch, PrefixSumMatch, SoftmaxMatch, match_conv, match_g2bmm,
    match_gbmm, match_matmul, match_prefix_sum, match_softmax,
)


def instantiate(writer, s: Scope) -> tuple[object, str] | None:
    """``(node, form)`` computing ``s`` by a library call, or None."""
    m = match_matmul(s)
    if m is not None:
        return _matmul(writer, s, m)
    m = match_conv(s)
    if m is not None:
        return _conv(writer, s, m)
    m = match_g2bmm(s) or match_gbmm(s)
    if m is not None:
        return _banded(writer, m)
    m = match_prefix_sum(s)
    if m is not None:
        return _prefix_sum(writer, m)
    return None


def softmax_chains(scopes: list[Scope]) -> tuple[dict[Scope, SoftmaxMatch], set[Scope]]:
    """Softmax chains among ``scopes`` (by last scope), and the inner scopes only they read."""
    users: dict[Scope, set[Scope]] = {}
    for s in scopes:
        for a in accesses(s.body):
            if isinstance(a.source, Scope):
                users.setdefault(a.source, set()).add(s)
    chains: dict[Scope, SoftmaxMatch] = {}
    skipped: set[Scope] = set()
    for s in scopes:
        m = match_softmax(s)
        if m is None:
            continue
        chains[s] = m
        fused = set(m.fused)
        changed = True
        while changed:  # an inner scope stays if a scope that is computed anyway reads it
            changed = False
            for inner in list(fused):
                if any(u != s and u not in fused for u in users.get(inner, ())):
                    fused.discard(inner)
                    changed = True
        skipped |= fused
    return chains, skipped


def softmax_call(writer, m: SoftmaxMatch):
    return getattr(torch, m.kind)(writer.source_node(m.source), dim=m.dim)


# -- matmul ----------------------------------------------------------------------------------
def _matmul(writer, s: Scope, m: MatmulMatch):
    em = BodyEmitter(writer, s)
    size = {it.name: it.extent for it in s.traversal + s.summation}
    lhs, rhs = em.numeric(em.value(m.lhs)), em.numeric(em.value(m.rhs))
    if m.batch:
        op = "bmm" if len(m.batch) == 1 else "matmul"
    else:
        op = {(True, True): "mm", (True, False): "mv", (False, False): "dot"}[bool(m.m), bool(m.n)]
    lhs_groups = [[n] for n in m.batch] + [g for g in (m.m, m.k) if g]
    rhs_groups = [[n] for n in m.batch] + [g for g in (m.k, m.n) if g]
    x = getattr(torch, op)(_matrix(lhs, lhs_groups, size), _matrix(rhs, rhs_groups, size))
    if any(len(g) > 1 for g in (m.m, m.n) if g):
        x = x.reshape(tuple(size[n] for n in m.batch + m.m + m.n))
    x = permuted(x, m.out_perm)
    return (x * m.scale if m.scale != 1.0 else x), op


def _matrix(v: Value, groups: list[list[str]], size: dict[str, int]):
    """``v`` with axes in the groups' order, each group flattened into one dim."""
    order = [n for g in groups for n in g]
    x = permuted(v.x, [v.labels.index(n) for n in order])
    if any(len(g) > 1 for g in groups):
        x = x.reshape(tuple(math.prod(size[n] for n in g) for g in groups))
    return x


# -- conv ------------------------------------------------------------------------------------
def _conv(writer, s: Scope, m: ConvMatch):
    x = permuted(writer.source_node(m.input.source), m.input_dims)
    w = writer.source_node(m.weight.source)
    if m.weight_flips:
        w = w.flip(*m.weight_flips)
    w = permuted(w, m.weight_dims)
    nd = len(m.spatial)
    if m.symmetric:
        padding = m.padding
    else:  # one pad per end (negative: crop), then an unpadded conv
        ends = [p for dim in reversed(range(nd)) for p in (m.padding[dim], m.padding_end[dim])]
        x, padding = F.pad(x, ends), (0,) * nd
    options = {}
    for name, value, default in (("stride", m.stride, 1), ("padding", padding, 0),
                                 ("dilation", m.dilation, 1)):
        if any(v != default for v in value):
            options[name] = value[0] if len(set(value)) == 1 else tuple(value)
    if m.groups != 1:
        options["groups"] = m.groups
    out = getattr(F, m.kind)(x, w, **options)
    size = {it.name: it.extent for it in s.traversal + s.summation}
    lengths = [m.input.source.shape[d] for d in m.input_dims[-nd:]]
    # torch's output length (an explicit F.pad made it exactly the scope's)
    produced = [(n + 2 * p - d * (size[r] - 1) - 1) // st + 1 for n, p, d, r, st in
                zip(lengths, padding, m.dilation, m.kernel, m.stride)]
    if m.symmetric and any(got > size[h] for got, h in zip(produced, m.spatial)):
        # torch padded the end as much as the start: crop
        lead = (slice(None),) * (len(m.out_perm) - nd)
        out = out[lead + tuple(slice(None, size[h]) for h in m.spatial)]
    return permuted(out, m.out_perm), m.kind


# -- banded ----------------------------------------------------------------------------------
def _banded(writer, m: BandedMatch):
    import codegen.ops  # noqa: F401  (registers the ollie:: operators)

    lhs = permuted(writer.source_node(m.lhs.source), m.lhs_dims)
    rhs = permuted(writer.source_node(m.rhs.source), m.rhs_dims)
    options = {"w": m.w} | ({"d": m.d} if m.d != 1 else {}) | \
        ({"offset": m.offset} if m.offset else {})
    op = getattr(torch.ops.ollie, m.kind).default
    return permuted(writer.call(op, lhs, rhs, **options), m.out_perm), m.kind


# -- running sums ----------------------------------------------------------------------------
def _prefix_sum(writer, m: PrefixSumMatch):
    x = torch.cumsum(writer.source_node(m.source), m.dim)
    if m.length < m.source.shape[m.dim]:
        x = x.narrow(m.dim, 0, m.length)
    return permuted(x, m.out_dims), "cumsum"
