"""Matched operators as library calls: EinNet's instantiation step, for the torch backend.

``instantiate(writer, scope, var)`` tries the ``ir.patterns`` matchers on one scope; on a
match it returns the statements that compute the scope into ``var`` with one library call,
plus the views its layout permutations need, and the form's name for ``Kernel.forms``:

- ``conv1d`` / ``conv2d``: ``F.conv1d`` / ``F.conv2d``; the input permuted to NC(H)(W), the
  weight flipped and permuted, asymmetric padding as an ``F.pad`` first;
- ``g2bmm`` / ``gbmm``: the ``ollie::`` custom ops of ``codegen.ops`` (``codegen.banded``
  underneath), which never form the dense product;
- ``mm`` / ``bmm`` / ``matmul`` / ``mv`` / ``dot``: a Matmul match; operands permuted, dims of
  one role flattened into one matrix dim, the result unflattened and permuted.

``softmax_chains`` finds the max / exp / sum / divide chains ``match_softmax`` recognises; the
backend lowers a chain's last scope to ``torch.softmax`` (or ``log_softmax``) and skips its
inner scopes when nothing else reads them. Everything else takes the generic paths.
"""
from __future__ import annotations

import math

from codegen.torch_expr import BodyEmitter, Value, int_list, number, permuted, shape_literal
from ir.nodes import Scope, accesses
from ir.patterns import (
    BandedMatch, ConvMatch, MatmulMatch, SoftmaxMatch, match_conv, match_g2bmm, match_gbmm,
    match_matmul, match_softmax,
)

OPS_IMPORT = "import codegen.ops  # registers the ollie:: operators"


def instantiate(writer, s: Scope, var: str) -> tuple[list[str], str] | None:
    """``(statements, form)`` computing ``s`` into ``var`` by a library call, or None."""
    m = match_matmul(s)
    if m is not None:
        return _matmul(writer, s, m, var)
    m = match_conv(s)
    if m is not None:
        return _conv(writer, s, m, var)
    m = match_g2bmm(s) or match_gbmm(s)
    if m is not None:
        return _banded(writer, m, var)
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


def softmax_call(writer, m: SoftmaxMatch) -> str:
    return f"torch.{m.kind}({writer.source_var(m.source)}, dim={m.dim})"


def _perm_code(code: str, perm, rank: int) -> str:
    return permuted(Value(code, tuple(range(rank))), perm)


# -- matmul ----------------------------------------------------------------------------------
def _matmul(writer, s: Scope, m: MatmulMatch, var: str) -> tuple[list[str], str]:
    em = BodyEmitter(writer, s)
    size = {it.name: it.extent for it in s.traversal + s.summation}
    lhs, rhs = em.numeric(em.value(m.lhs)), em.numeric(em.value(m.rhs))
    if m.batch:
        op = "bmm" if len(m.batch) == 1 else "matmul"
    else:
        op = {(True, True): "mm", (True, False): "mv", (False, False): "dot"}[bool(m.m), bool(m.n)]
    lhs_groups = [[n] for n in m.batch] + [g for g in (m.m, m.k) if g]
    rhs_groups = [[n] for n in m.batch] + [g for g in (m.k, m.n) if g]
    args = [_matrix(lhs, lhs_groups, size), _matrix(rhs, rhs_groups, size)]
    code = f"torch.{op}({', '.join(args)})"
    flat = [len(g) for g in (m.m, m.n) if g]
    if any(n > 1 for n in flat):
        code += f".reshape({shape_literal([size[n] for n in m.batch + m.m + m.n])})"
    out = Value(code, m.batch + m.m + m.n)
    code = permuted(out, m.out_perm)
    if m.scale != 1.0:
        code = f"{code} * {number(m.scale).code}"
    return em.setup + em.lines + [f"{var} = {code}"], op


def _matrix(v: Value, groups: list[list[str]], size: dict[str, int]) -> str:
    """``v`` with axes in the groups' order, each group flattened into one dim."""
    order = [n for g in groups for n in g]
    code = permuted(v, [v.labels.index(n) for n in order])
    if any(len(g) > 1 for g in groups):
        shape = [math.prod(size[n] for n in g) for g in groups]
        code = f"{v.atom if code == v.code else code}.reshape({shape_literal(shape)})"
    return code


# -- conv ------------------------------------------------------------------------------------
def _conv(writer, s: Scope, m: ConvMatch, var: str) -> tuple[list[str], str]:
    x = _perm_code(writer.source_var(m.input.source), m.input_dims, len(m.input_dims))
    w = writer.source_var(m.weight.source)
    if m.weight_flips:
        w = f"{w}.flip({int_list(m.weight_flips)})"
    w = _perm_code(w, m.weight_dims, len(m.weight_dims))
    nd = len(m.spatial)
    options = []
    if m.symmetric:
        padding = m.padding
    else:  # one pad per end (negative: crop), then an unpadded conv
        ends = [p for dim in reversed(range(nd)) for p in (m.padding[dim], m.padding_end[dim])]
        x, padding = f"F.pad({x}, ({int_list(ends)}))", (0,) * nd
    for name, value, default in (("stride", m.stride, 1), ("padding", padding, 0),
                                 ("dilation", m.dilation, 1)):
        if any(v != default for v in value):
            options.append(f"{name}={value[0] if len(set(value)) == 1 else tuple(value)}")
    if m.groups != 1:
        options.append(f"groups={m.groups}")
    code = f"F.{m.kind}({', '.join([x, w] + options)})"
    size = {it.name: it.extent for it in s.traversal + s.summation}
    lengths = [m.input.source.shape[d] for d in m.input_dims[-nd:]]
    # torch's output length (an explicit F.pad made it exactly the scope's)
    produced = [(n + 2 * p - d * (size[r] - 1) - 1) // st + 1 for n, p, d, r, st in
                zip(lengths, padding, m.dilation, m.kernel, m.stride)]
    lines = []
    if m.symmetric and any(got > size[h] for got, h in zip(produced, m.spatial)):
        lines.append(f"{var} = {code}")  # torch padded the end as much as the start: crop
        lead = [":"] * (len(m.out_perm) - nd)
        code = f"{var}[{', '.join(lead + [f':{size[h]}' for h in m.spatial])}]"
    lines.append(f"{var} = {_perm_code(code, m.out_perm, len(m.out_perm))}")
    return lines, m.kind


# -- banded ----------------------------------------------------------------------------------
def _banded(writer, m: BandedMatch, var: str) -> tuple[list[str], str]:
    writer.imports.add(OPS_IMPORT)
    lhs = _perm_code(writer.source_var(m.lhs.source), m.lhs_dims, len(m.lhs_dims))
    rhs = _perm_code(writer.source_var(m.rhs.source), m.rhs_dims, len(m.rhs_dims))
    options = [f"w={m.w}"] + ([f"d={m.d}"] if m.d != 1 else []) + \
        ([f"offset={m.offset}"] if m.offset else [])
    code = f"torch.ops.ollie.{m.kind}({lhs}, {rhs}, {', '.join(options)})"
    return [f"{var} = {_perm_code(code, m.out_perm, len(m.out_perm))}"], m.kind
