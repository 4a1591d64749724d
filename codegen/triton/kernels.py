"""Kernel templates for memory-bound scopes: map (eOperators, fused elementwise chains),
reduce (reductions and offset-reductions), row (fused row-wise chains such as softmax).

Each builder writes one ``@triton.jit`` kernel for a scope and returns a ``KernelPlan``; a
builder that does not fit raises ``CannotFuse`` and the planner tries the next. Reads of the
scopes the planner's ``policy`` inlines are evaluated in place (``TileEmitter``), so nested
elementwise scopes never touch memory.

- ``map``: one program per ``BLOCK`` consecutive output elements; traversal iterators are
  decoded from the flat offset (``i = offs // 8``, ``j = offs % 8``).
- ``reduce``: a ``BLOCK_OUT x BLOCK_RED`` tile of (output element, summation point); the
  summation points are walked in a loop and reduced into ``acc`` (``tl.reduce``).
- ``row``: one program per row along one traversal iterator; reductions along that row
  (single summation iterator of the row's extent) are computed in registers, so softmax's
  max / exp / sum / divide chain reads its input once and writes its output once.
"""
from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field

import sympy

from codegen.triton.emitter import IDENTITY, CannotFuse, TileEmitter
from codegen.triton.text import WIDTH, KernelText, Value, extremum
from ir.nodes import Iter, Reduce, Scope, accesses

ROW_LIMIT = 1 << 14  # longest row a row kernel keeps in registers


@dataclass
class KernelPlan:
    scope: Scope   # the scope whose tensor the kernel writes
    kind: str      # launch-tuning kind: map | reduce | row | dot | banded
    form: str      # what ``Kernel.forms`` reports
    text: KernelText
    emitter: TileEmitter
    doc: str
    problem: dict                                # sizes the tuner sees
    grid: tuple[str, ...]                        # ``lambda META: (...)``'s elements
    tuned: tuple[str, ...] = ()                  # block sizes the tuner picks
    fixed: dict = field(default_factory=dict)    # constexpr -> value code
    dot: bool = False                            # takes DOT_DTYPE / DOT_PRECISION
    fused: tuple = ()                            # scopes computed inside this kernel

    @property
    def source(self) -> str:
        params = list(self.text.pointers.values()) + ["ACC: tl.constexpr"]
        if self.dot:
            params += ["DOT_DTYPE: tl.constexpr", "DOT_PRECISION: tl.constexpr"]
        params += [f"{n}: tl.constexpr" for n in list(self.fixed) + list(self.tuned)]
        head = _wrap_call(f"def {self.text.name}(", params, "):")
        body = ["    " + ln for ln in self.text.blocks[0]]
        doc = []
        for k, para in enumerate(self.doc.strip().split("\n\n")):
            doc += ([""] if k else []) + textwrap.wrap(para, 88)
        doc_lines = [f'    """{doc[0]}'] + [f"    {d}" if d else "" for d in doc[1:]]
        doc_lines[-1] += '"""'
        return "\n".join(["@triton.jit"] + head + doc_lines + body) + "\n"


def _wrap_call(opening: str, args: list[str], closing: str, width: int = 96) -> list[str]:
    lines, cur = [], opening
    for k, a in enumerate(args):
        piece = a + (", " if k < len(args) - 1 else closing)
        if len(cur) + len(piece.rstrip()) > width and cur.strip() != opening.strip():
            lines.append(cur.rstrip())
            cur = " " * len(opening) + piece
        else:
            cur += piece
    if not args:
        cur += closing
    return lines + [cur]


def next_pow2(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


def shape_text(shape) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def describe(s: Scope, names: dict) -> str:
    return f"{names.get(s, s.name)} {shape_text(s.shape)}"


# -- shared pieces ------------------------------------------------------------------------------
def decode(kt: KernelText, iters, offs: str, label: str | None, suffix: str = "") -> dict:
    """Bind ``iters`` (row-major over their extents) to kernel variables decoded from the flat
    offset ``offs``; extent-1 iterators bind to their constant."""
    env: dict = {}
    sizes = [it.extent for it in iters]
    for k, it in enumerate(iters):
        if it.extent == 1:
            env[it.name] = sympy.Integer(it.lo)
            continue
        inner = math.prod(sizes[k + 1:])
        code = offs if inner == 1 else f"{offs} // {inner}"
        if math.prod(sizes[:k]) > 1:
            code += f" % {it.extent}"
        v = kt.kvar(it.name + suffix, code, (label,) if label else (), 0, it.extent - 1)
        env[it.name] = it.lo + v.symbol
    return env


def store(kt: KernelText, em: TileEmitter, s: Scope, v: Value, env: dict,
          labels: tuple[str, ...], offset: str | None = None, comment: bool = True) -> None:
    """``tl.store`` of ``v`` as scope ``s`` at iterator values ``env`` (lanes of ``labels``);
    ``comment``: name the IR statement ``v`` computes."""
    v = kt.full(v, labels)
    if not v.code.isidentifier():
        v = em.temp(em.names.get(s, "out"), v, em.statement(s) if comment else None)
    elif comment:
        kt.line(f"# {em.statement(s)}")
    ptr = kt.pointer(("out",), "out")
    idx = tuple(env[t.name] for t in s.traversal)
    checks, never = em.checks(idx, s.bounds())
    assert not never, f"the output tile of {s.name} lies outside it"
    mask = " & ".join(kt.lane_masks(labels) + checks)
    where = f"{ptr} + {offset}" if offset else kt.address(ptr, idx, s.bounds(), s.shape)
    value = f"{v.atom}.to({ptr}.dtype.element_ty)"
    room = WIDTH - 4 - len(f"tl.store(, {value}, mask=)")
    where, mask = kt.hoist("out", where, mask, room, 0)
    kt.line(f"tl.store({where}, {value}" + (f", mask={mask})" if mask else ")"))


def reduce_tile(kt: KernelText, reduce: Reduce, v: Value, labels: tuple[str, ...], axis: int,
                acc: str = "acc") -> None:
    """``acc`` updated with ``v`` (a tile over ``labels``) reduced along ``labels[axis]``."""
    v = kt.masked(kt.full(v, labels), {labels[axis]}, IDENTITY[reduce])
    part = kt.reduce(v.code, reduce, axis, keep_dims=True)
    if reduce is Reduce.SUM:
        kt.line(f"{acc} += {part}")
    else:
        fn = "maximum" if reduce is Reduce.MAX else "minimum"
        kt.line(f"{acc} = {extremum(fn, acc, part)}")


def epilogue(em: TileEmitter, r: Scope, env_r: dict, acc: Value, root: Scope | None):
    """The value to store for ``root`` (``r`` itself when None) given ``r``'s accumulator,
    and the iterator binding to store it at."""
    if root is None:
        return acc, env_r
    key = (r, tuple(sympy.expand(env_r[t.name]) for t in r.traversal))
    em.known[key] = acc
    env = {t.name: env_r[u.name] for t, u in zip(root.traversal, r.traversal)}
    v = em.value(root.body, env)
    if key not in em.used_known:
        raise CannotFuse("the epilogue does not read the accumulator")
    return v, env


def fits_epilogue(r: Scope, root: Scope) -> bool:
    """Whether ``root``'s traversal lines up with ``r``'s, position by position."""
    return len(r.traversal) == len(root.traversal) and all(
        (t.lo, t.hi) == (u.lo, u.hi) for t, u in zip(r.traversal, root.traversal))


# -- map ----------------------------------------------------------------------------------------
def map_kernel(s: Scope, name: str, names: dict, policy) -> KernelPlan:
    kt = KernelText(name)
    n = math.prod(s.shape)
    kt.line("pid = tl.program_id(0)")
    kt.line("offs = pid * BLOCK + tl.arange(0, BLOCK)")
    kt.axis("out", "BLOCK", f"offs < {n}", mask="mask")
    env = decode(kt, s.traversal, "offs", "out")
    em = TileEmitter(kt, names, policy)
    kt.line(f"# {em.statement(s)}")
    v = em.value(s.body, env)
    store(kt, em, s, v, env, ("out",), offset="offs", comment=False)
    doc = (f"{describe(s, names)}: elementwise over {n} elements, BLOCK per program.")
    return KernelPlan(s, "map", "map", kt, em, doc, {"N": n},
                      (f'triton.cdiv({n}, META["BLOCK"])',), ("BLOCK",))


# -- reduce -------------------------------------------------------------------------------------
def reduce_kernel(r: Scope, name: str, names: dict, policy, root: Scope | None = None
                  ) -> KernelPlan:
    out = root or r
    kt = KernelText(name)
    n_out, n_red = math.prod(r.shape), math.prod(it.extent for it in r.summation)
    kt.line("pid = tl.program_id(0)")
    kt.line("offs_out = pid * BLOCK_OUT + tl.arange(0, BLOCK_OUT)")
    kt.axis("out", "BLOCK_OUT", f"offs_out[:, None] < {n_out}")
    env = decode(kt, r.traversal, "offs_out[:, None]", "out")
    em = TileEmitter(kt, names, policy)
    kt.line(f"# {em.statement(r)}")
    kt.line(f"acc = tl.full([BLOCK_OUT, 1], {IDENTITY[r.reduce]}, dtype=ACC)")
    start = kt.fresh("start")
    with em.loop(f"for {start} in range(0, {n_red}, BLOCK_RED):"):
        kt.line(f"offs_red = {start} + tl.arange(0, BLOCK_RED)")
        kt.axis("red", "BLOCK_RED", f"offs_red[None, :] < {n_red}")
        inner = dict(env, **decode(kt, r.summation, "offs_red[None, :]", "red"))
        reduce_tile(kt, r.reduce, em.value(r.body, inner), ("out", "red"), 1)
    v, env_out = epilogue(em, r, env, Value("acc", frozenset({"out"})), root)
    # the epilogue's traversal lines up with r's (fits_epilogue): the same flat offsets
    store(kt, em, out, v, env_out, ("out",), offset="offs_out[:, None]", comment=root is not None)
    then = f" (then {names.get(root, root.name)} per output)" if root else ""
    doc = (f"{describe(out, names)}: {names.get(r, r.name)} as a {r.reduce.value}-reduction of "
           f"{n_red} points per output element ({n_out} of them){then}.\n\nEach program "
           f"reduces BLOCK_OUT outputs, BLOCK_RED summation points at a time.")
    return KernelPlan(out, "reduce", "reduce", kt, em, doc, {"N_OUT": n_out, "N_RED": n_red},
                      (f'triton.cdiv({n_out}, META["BLOCK_OUT"])',), ("BLOCK_OUT", "BLOCK_RED"),
                      fused=(r,) if root else ())


# -- row ----------------------------------------------------------------------------------------
def row_axes(s: Scope, names: dict, policy) -> list[Iter]:
    """Traversal (or, for a reduction, summation) iterators a row kernel could run along:
    those whose extent some reachable single-summation reduction has."""
    extents, seen, todo = set(), set(), [s]
    while todo:
        x = todo.pop()
        for a in accesses(x.body):
            src = a.source
            if isinstance(src, Scope) and src not in seen:
                seen.add(src)
                how = policy(src)
                if how == "reduce" and len(src.summation) == 1:
                    extents.add(src.summation[0].extent)
                if how in ("inline", "reduce"):
                    todo.append(src)
    if s.summation:
        its = list(s.summation) if len(s.summation) == 1 and extents else []
    else:
        its = [t for t in reversed(s.traversal) if t.extent in extents]
    return [it for it in its if 1 < it.extent <= ROW_LIMIT]


def row_kernel(s: Scope, x: Iter, name: str, names: dict, policy) -> KernelPlan:
    kt = KernelText(name)
    length = x.extent
    block = next_pow2(length)
    others = [t for t in s.traversal if t.name != x.name] if not s.summation else list(s.traversal)
    rows = math.prod(t.extent for t in others)
    kt.line("row = tl.program_id(0)")
    env = decode(kt, others, "row", None)
    col = kt.kvar("col", "tl.arange(0, BLOCK_COL)", ("col",), 0, length - 1, eager=True)
    kt.axis("col", "BLOCK_COL", f"col < {length}", mask="col_mask")
    em = TileEmitter(kt, names, policy, row=(col, length))
    if s.summation:  # a reduction along the row: one value per program
        v = em.reduce_row(s, tuple(env[t.name] for t in s.traversal))
        labels = ()
    else:
        env[x.name] = x.lo + col.symbol
        v = em.value(s.body, env)
        labels = ("col",)
    if not any(f.summation for f in em.inlined if f is not s):
        raise CannotFuse("no reduction along the row: a map kernel does the same")
    store(kt, em, s, v, env, labels, comment=not s.summation)
    fused = tuple(dict.fromkeys(f for f in em.inlined if f != s))
    along = f"along {x.name}" + (" (reduced)" if s.summation else "")
    doc = (f"{describe(s, names)}: one program per row of {length} elements {along}, "
           f"{rows} rows.\n\nFused in registers: "
           f"{', '.join(names.get(f, f.name or '?') for f in fused)}.")
    return KernelPlan(s, "row", "row", kt, em, doc, {"ROWS": rows, "L": length},
                      (str(rows),), fixed={"BLOCK_COL": str(block)}, fused=fused)
