"""The text of one generated ``@triton.jit`` kernel: names, statement blocks, lazy
declarations, pointers, line wrapping.

``KernelText`` owns the kernel's identifiers, pointer parameters and statement blocks (the
body, and one nested block while a loop is open). Kernel variables and lane masks are
declared lazily: their defining line is written the first time generated code uses them, so
a kernel only decodes the iterators it reads. Values are ``Value``s: a Triton expression, the
tile axes it spans, the loop level it needs, and the axes whose padded lanes it holds at 0.
"""
from __future__ import annotations

import keyword
import math
from contextlib import contextmanager
from dataclasses import dataclass, field

import sympy

from codegen.triton.indexing import ADD, ATOM, MUL, IndexPrinter, KVar
from codegen.names import fresh_identifier
from ir.nodes import Reduce

RESERVED = {"tl", "triton", "pid", "acc", "ACC", "float", "_sum_combine", "_max_combine",
            "_min_combine"} | set(keyword.kwlist)
WIDTH = 100  # generated lines are wrapped to this width where they can be
# Reductions go through tl.reduce with combine functions of the generated module: tl.sum and
# tl.max are @triton.jit library helpers, which break under the interpreter when triton was
# imported before TRITON_INTERPRET was set. Defined once per module:
COMBINE = {Reduce.SUM: "_sum_combine", Reduce.MAX: "_max_combine", Reduce.MIN: "_min_combine"}
def extremum(fn: str, a: str, b: str) -> str:
    """``tl.maximum`` / ``tl.minimum`` that propagate NaN, as torch.maximum and amax do
    (Triton's default returns the other operand)."""
    return f"tl.{fn}({a}, {b}, propagate_nan=tl.PropagateNan.ALL)"


COMBINE_SOURCE = {
    Reduce.SUM: "@triton.jit\ndef _sum_combine(a, b):\n    return a + b\n",
    Reduce.MAX: f"@triton.jit\ndef _max_combine(a, b):\n    return {extremum('maximum', 'a', 'b')}\n",
    Reduce.MIN: f"@triton.jit\ndef _min_combine(a, b):\n    return {extremum('minimum', 'a', 'b')}\n",
}


def _split(code: str) -> list[str]:
    """``code`` cut before each `` & `` / `` + `` / `` - `` outside brackets."""
    parts, depth, start, k = [], 0, 0, 0
    while k < len(code):
        c = code[k]
        depth += c in "([{"
        depth -= c in ")]}"
        if depth == 0 and code.startswith((" & ", " + ", " - "), k) and k > start:
            parts.append(code[start:k])
            start = k + 1
        k += 1
    return parts + [code[start:]]


def wrap(prefix: str, code: str, width: int = WIDTH) -> list[str]:
    """``prefix + code`` as lines no longer than ``width`` where top-level operators allow
    (parenthesised, continuation lines aligned inside the parenthesis)."""
    if len(prefix) + len(code) <= width:
        return [prefix + code]
    parts = _split(code)
    if len(parts) == 1:
        return [prefix + code]
    lines, cur, pad = [], prefix + "(" + parts[0], " " * (len(prefix) + 1)
    for p in parts[1:]:
        if len(cur) + len(p) + 1 > width:
            lines.append(cur)
            cur = pad + p.lstrip()
        else:
            cur += " " + p.lstrip() if not p.startswith(" ") else p
    return lines + [cur + ")"]

def number(v: float) -> str:
    return repr(float(v)) if math.isfinite(v) else f'float("{v}")'


@dataclass(frozen=True)
class Value:
    code: str
    axes: frozenset = frozenset()
    level: int = 0
    prec: int = ATOM
    zero: frozenset = frozenset()  # axes along which padded (masked-off) lanes hold 0
    const: float | None = None
    cond: str | None = None        # a comparison's boolean form (its code is 1.0 / 0.0)
    finite: bool = False           # padded lanes hold finite values (0 * them is 0, not NaN)

    @property
    def atom(self) -> str:
        return self.code if self.prec == ATOM else f"({self.code})"


def constant(v: float) -> Value:
    code = number(v)
    return Value(code, prec=ADD if code.startswith("-") else ATOM, const=float(v),
                 finite=math.isfinite(v))

@dataclass
class Axis:
    """A tile axis: its lane mask (``None``: never padded), block size and place in its tile."""

    mask: str | None
    block: str
    level: int


@dataclass
class KernelText:
    name: str
    taken: set = field(default_factory=lambda: set(RESERVED))
    pointers: dict = field(default_factory=dict)  # source key -> parameter name
    blocks: list = field(default_factory=lambda: [[]])
    axes: dict = field(default_factory=dict)      # label -> Axis
    kvars: dict = field(default_factory=dict)     # symbol -> KVar
    lazy: dict = field(default_factory=dict)      # name -> (level, defining line)
    combiners: set = field(default_factory=set)   # Reduce kinds whose combine fn it calls

    def __post_init__(self):
        self.printer = IndexPrinter(self.kvars, on_use=lambda v: self.need(v.name))

    @property
    def level(self) -> int:
        return len(self.blocks) - 1

    def fresh(self, hint: str) -> str:
        return fresh_identifier(hint, self.taken)

    def line(self, text: str, level: int | None = None) -> None:
        self.blocks[self.level if level is None else level].append(text)

    def assign(self, name: str, code: str, level: int | None = None) -> None:
        """``name = code``, wrapped at top-level `` & `` / `` + `` when it is long."""
        level = self.level if level is None else level
        for ln in wrap(f"{name} = ", code, WIDTH - 4 * (level + 1)):
            self.line(ln, level)

    def need(self, name: str) -> None:
        """Write the defining line of a lazily declared name, once."""
        if name in self.lazy:
            level, text = self.lazy.pop(name)
            self.line(text, level)

    def kvar(self, hint: str, code: str, axes=(), lo: int = 0, hi: int = 0,
             level: int | None = None, eager: bool = False) -> KVar:
        """Declare kernel variable ``name = code`` with values ``lo..hi`` on valid lanes."""
        level = self.level if level is None else level
        v = KVar.make(self.fresh(hint), axes, level, lo, hi)
        self.kvars[v.symbol] = v
        if eager:
            self.line(f"{v.name} = {code}", level)
        else:
            self.lazy[v.name] = (level, f"{v.name} = {code}")
        return v

    def axis(self, label: str, block: str, mask_code: str | None = None,
             mask: str | None = None) -> None:
        """Declare tile axis ``label`` (block size ``block``); ``mask_code`` is its lane mask,
        written lazily as ``mask`` (default ``<label>_mask``)."""
        if mask_code is not None:
            mask = self.fresh(mask or f"{label}_mask")
            self.lazy[mask] = (self.level, f"{mask} = {mask_code}")
        self.axes[label] = Axis(mask, block, self.level)

    def mask(self, label: str) -> str | None:
        m = self.axes[label].mask
        if m is not None:
            self.need(m)
        return m

    def reduce(self, code: str, reduce: Reduce, axis: int, keep_dims: bool = False) -> str:
        """Code reducing ``code`` along ``axis`` with ``reduce``'s combine function."""
        self.combiners.add(reduce)
        keep = ", keep_dims=True" if keep_dims else ""
        return f"tl.reduce({code}, {axis}, {COMBINE[reduce]}{keep})"

    def lane_masks(self, labels) -> list[str]:
        """Lane masks of the axes ``labels``, in declaration order."""
        return [m for m in (self.mask(lb) for lb in self.axes if lb in labels) if m is not None]

    def address(self, ptr: str, idx: tuple, bounds, shape) -> str:
        """``ptr`` plus the row-major offset of ``idx``, one term per dim in dim order."""
        out = ptr
        for d, (i, (lo, _)) in enumerate(zip(idx, bounds)):
            e, stride = sympy.expand(i - lo), math.prod(shape[d + 1:])
            if e == 0:
                continue
            text, prec = self.printer._code(e)
            if stride != 1:
                text = f"{text if prec >= MUL else f'({text})'} * {stride}"
            out += f" - {text[1:]}" if text.startswith("-") else f" + {text}"
        return out

    def hoist(self, name: str, where: str, mask: str, room: int, level: int):
        """Pointers, then the mask, of a load or store named ``name`` as variables of their
        own (``x_ptrs``, ``x_mask``) while the call would not fit in ``room`` characters."""
        if len(where) + len(mask) > room and " + " in where:
            ptrs = self.fresh(f"{name}_ptrs")
            self.assign(ptrs, where, level)
            where = ptrs
        if len(where) + len(mask) > room and " & " in mask:
            masks = self.fresh(f"{name}_mask")
            self.assign(masks, mask, level)
            mask = masks
        return where, mask

    def pointer(self, key, hint: str) -> str:
        if key not in self.pointers:
            self.pointers[key] = self.fresh(f"{hint}_ptr")
        return self.pointers[key]

    @contextmanager
    def loop(self, header: str):
        """Statements written inside go into ``header``'s body; values computed there are
        gone once it closes."""
        self.blocks.append([])
        yield
        body = self.blocks.pop()
        self.line(header)
        self.blocks[-1].extend("    " + ln for ln in body or ["pass"])
        for name, (level, _) in list(self.lazy.items()):
            if level > self.level:
                del self.lazy[name]

    def full(self, v: Value, labels: tuple[str, ...]) -> Value:
        """``v`` broadcast to the whole tile spanned by ``labels`` (in tile order)."""
        if set(labels) <= v.axes:
            return v
        shape = ", ".join(self.axes[lb].block for lb in labels)
        code = f"{v.atom if v.prec < ADD else v.code} + tl.full([{shape}], 0.0, dtype=ACC)"
        return Value(code, frozenset(labels) | v.axes, v.level, ADD, v.zero, finite=v.finite)

    def masked(self, v: Value, labels, fill: str = "0.0") -> Value:
        """``v`` with padded lanes of the axes ``labels`` replaced by ``fill``."""
        if fill == "0.0" and set(labels) <= v.zero:
            return v
        masks = [m for m in (self.mask(lb) for lb in sorted(labels)) if m is not None]
        if not masks:
            return v
        level = max([v.level] + [self.axes[lb].level for lb in labels])
        return Value(f"tl.where({' & '.join(masks)}, {v.code}, {fill})", v.axes | set(labels),
                     level, ATOM, v.zero | set(labels), finite=v.finite)
