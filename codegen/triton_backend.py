"""The Triton backend: a scope becomes generated ``@triton.jit`` kernels plus a launcher.

The planner walks from the root scope to its dependencies and decides which scopes get a
buffer (a kernel of their own) and which are computed inside their consumers' kernels:

- elementwise scopes (no summation) are *inlined* into the kernel reading them, so chains of
  maps, broadcasts, gathers and re-indexings never touch memory -- unless another kernel also
  needs them, then they are materialised once (pure re-indexings are recomputed instead);
- a scope with summation gets its own kernel, except in a *row kernel* (a reduction along
  the row another scope is computed over, e.g. softmax's max and sum) or as the
  accumulator of an *epilogue* (bias and activation after a conv run on the GEMM's tile).

Kernel kinds (``Kernel.forms``, dependencies first): ``map`` (eOperators, fused elementwise
chains), ``reduce`` (reductions, offset-reductions), ``row`` (fused row-wise chains),
``dot`` (matmul template and generic contractions via ``tl.dot``), ``g2bmm`` / ``gbmm``
(banded products without the dense product), ``empty`` (a zero-size range: zeros). A scope
no kernel kind can compute raises ``NotImplementedError`` naming it, so callers can fall
back to the torch backend.

Generated kernels run on CUDA tensors, or on the CPU under ``TRITON_INTERPRET=1`` (read when
``lower`` runs). Launch configurations come from ``codegen.triton.tuning``.
"""
from __future__ import annotations

import math
import os
import textwrap
from collections import defaultdict

from codegen.kernel import Kernel
from codegen.torch_backend import chained
from codegen.triton import runtime
from codegen.triton.contraction import dot_kernel, match_band, split_contraction
from codegen.triton.emitter import CannotFuse
from codegen.triton.text import COMBINE_SOURCE, RESERVED, KernelText
from codegen.triton.kernels import (
    KernelPlan, _wrap_call, fits_epilogue, map_kernel, reduce_kernel, row_axes, row_kernel,
    shape_text,
)
from ir.nodes import (
    COMPARISONS, Access, Binary, Const, Scope, accesses, inputs as input_tensors, sub_scopes,
)
from ir.printer import statement_text

INDEX_LIMIT = 2 ** 31 - 1  # kernels index with int32
LAUNCHER_RESERVED = RESERVED | {"torch", "kernel", "grid", "dot_dtype", "precision", "ref", "mid",
                                "_types", "_intermediate", "_device", "_launch"}


def lower(scope: Scope) -> Kernel:
    """Generate, compile and wrap the Triton kernels computing ``scope`` (a valid scope:
    ``codegen.lower`` checks it first)."""
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    plan = Planner(scope)
    return Kernel(scope, "triton", plan.input_names,
                  runtime.load(plan.source, "kernel", interpreted), plan.source, plan.forms)


def _empty(s: Scope) -> bool:
    return any(it.extent == 0 for it in s.traversal + s.summation)


def _comparison(s: Scope) -> bool:
    """A scope computing a comparison: stored as torch.bool, as torch would."""
    return not s.summation and isinstance(s.body, Binary) and s.body.op in COMPARISONS


def _cheap(s: Scope) -> bool:
    """A pure re-indexing: recomputing it in every reader costs no more than a buffer."""
    return not s.summation and isinstance(s.body, (Access, Const))


class Planner:
    def __init__(self, root: Scope):
        self.root = root
        self.order = list(dict.fromkeys(sub_scopes(root)))  # structurally equal scopes once
        self.consumers: dict[Scope, set] = defaultdict(set)
        for s in self.order:
            for a in accesses(s.body):
                if isinstance(a.source, Scope):
                    self.consumers[a.source].add(s)
        self.kt = KernelText("kernel", taken=set(LAUNCHER_RESERVED))  # launcher names
        tensors = input_tensors(root)
        self.input_names = tuple(sorted(tensors))
        self.params = {n: self.kt.fresh(n) for n in self.input_names}
        # the input whose dtype the kernels compute in (bool and integer inputs are loaded
        # as numbers)
        self.ref = next((self.params[n] for n in self.input_names
                         if tensors[n].dtype in ("float16", "bfloat16", "float32", "float64")),
                        self.params[self.input_names[0]] if self.input_names else "ref")
        self.names = {s: self.kt.fresh(s.name or "t") for s in self.order}
        for t in list(tensors.values()) + self.order:
            if math.prod(t.shape) > INDEX_LIMIT:
                raise NotImplementedError(
                    f"triton backend: {t.name or 'a scope'} has {math.prod(t.shape)} elements, "
                    f"more than int32 indexing covers")
        self.materialized, self.plans = {root}, {}
        todo = [root]
        while todo:
            s = todo.pop(0)
            self.plans[s] = plan = self.plan(s)
            for key in plan.text.pointers if plan else ():
                if key[0] == "buf" and key[1] not in self.materialized:
                    self.materialized.add(key[1])
                    todo.append(key[1])
        self.forms = tuple(self.plans[s].form if self.plans[s] else "empty"
                           for s in self.order if s in self.plans)
        self.source = self.write()

    # -- choosing kernels ---------------------------------------------------------------------
    def policy(self, blocked: set, row: bool, forbid: Scope | None = None):
        """How a kernel reads scope ``x``: maps are inlined -- outside row kernels only when
        every reduction they read is computed already (a map over a pending reduction, like
        softmax's quotient, is better the root of a row kernel of its own)."""
        def how(x: Scope) -> str:
            if x == forbid:
                return "forbid"
            if x in self.materialized or x in blocked or _empty(x):
                return "load"
            if not x.summation:
                return "inline" if row or not self.reachable_reductions(x, forbid) else "load"
            return "reduce" if row and len(x.summation) == 1 else "load"
        return how

    def reachable_reductions(self, s: Scope, ready: Scope | None = None) -> list[Scope]:
        """Reductions not computed yet (other than ``ready``) that ``s`` reads directly or
        through maps."""
        out, seen, todo = [], set(), [s]
        while todo:
            for a in accesses(todo.pop().body):
                x = a.source
                if not isinstance(x, Scope) or x in seen or x in self.materialized:
                    continue
                seen.add(x)
                if not x.summation:
                    todo.append(x)
                elif x != ready and not _empty(x):
                    out.append(x)
        return out

    def attempts(self, s: Scope):
        """``(builder(name, policy), row mode, forbidden scope)`` to try, best first."""
        names = self.names
        if not s.summation:
            for x in row_axes(s, names, self.policy(set(), True)):
                yield (lambda n, p, x=x: row_kernel(s, x, n, names, p)), True, None
            for r in self.reachable_reductions(s):
                if fits_epilogue(r, s):
                    for build in self.reduction_builders(r, root=s):
                        yield build, False, r
            yield (lambda n, p: map_kernel(s, n, names, p)), False, None
            return
        yield from ((b, False, None) for b in self.reduction_builders(s, skip_reduce=True))
        for x in row_axes(s, names, self.policy(set(), True)):
            yield (lambda n, p, x=x: row_kernel(s, x, n, names, p)), True, None
        yield (lambda n, p: reduce_kernel(s, n, names, p)), False, None

    def reduction_builders(self, r: Scope, root: Scope | None = None, skip_reduce=False):
        names = self.names
        band = match_band(r)
        if band is not None:
            yield lambda n, p: dot_kernel(r, n, names, p, root, band=band)
        split = split_contraction(r)
        if split is not None:
            yield lambda n, p: dot_kernel(r, n, names, p, root, split=split)
        if not skip_reduce:
            yield lambda n, p: reduce_kernel(r, n, names, p, root)

    def plan(self, s: Scope) -> KernelPlan | None:
        if _empty(s):
            return None
        name = self.kt.fresh(f"{self.names[s]}_kernel")
        reasons = []
        try:
            for build, row, forbid in self.attempts(s):
                plan = self.fit(s, build, name, row, forbid, reasons)
                if plan is not None:
                    return plan
        except NotImplementedError as e:
            reasons.append(str(e))
        raise NotImplementedError(
            f"triton backend cannot lower {statement_text(s, self.names, self.names[s])}: "
            + ("; ".join(reasons) or "no kernel kind fits"))

    def fit(self, s, build, name, row, forbid, reasons) -> KernelPlan | None:
        """``build`` with inlining that keeps each inlined scope's readers in the kernel."""
        blocked: set = set()
        while True:
            try:
                plan = build(name, self.policy(blocked, row, forbid))
            except CannotFuse as e:
                if e.scope is None or e.scope == s or e.scope in blocked:
                    reasons.append(str(e))
                    return None
                blocked.add(e.scope)
                continue
            group = set(plan.emitter.inlined) | set(plan.fused) | {s}
            if any(not self.consumers[r] <= group for r in plan.fused):
                return None
            bad = {x for x in plan.emitter.inlined
                   if x != s and not _cheap(x) and not self.consumers[x] <= group}
            if not bad:
                return plan
            blocked |= bad

    # -- writing the source ---------------------------------------------------------------------
    def write(self) -> str:
        out = ["import torch", "import triton", "import triton.language as tl", "", ""]
        scopes = [s for s in self.order if s in self.plans]
        used = set().union(*(p.text.combiners for p in self.plans.values() if p))
        for r in sorted(used, key=lambda r: r.value):
            out += COMBINE_SOURCE[r].splitlines() + ["", ""]
        for s in scopes:
            if self.plans[s] is not None:
                out += self.plans[s].source.splitlines() + ["", ""]
        params = [self.params[n] for n in self.input_names]
        ref = self.ref
        shape = "x".join(map(str, self.root.shape)) or "scalar"
        out += [f"def kernel({', '.join(params)}):",
                f'    """{self.names[self.root]} ({shape}) from '
                f'{", ".join(self.input_names) or "no inputs"}; generated by ollie codegen '
                f'(triton)."""']
        out += [f"    {p} = {p}.contiguous()" for p in params]
        if not params:
            out.append(f"    ref = torch.empty(0, device=_device(), dtype=torch.{self.root.dtype})")
        chain = self.chain = chained(scopes)  # intermediates: float32 for float16 / bfloat16
        out.append(f"    acc, dot_dtype, precision = _types({ref}{', chain=True' if chain else ''})")
        if chain:
            out.append(f"    mid = _intermediate({ref})  # the intermediates' dtype")
        for s in scopes:
            out += ["    " + ln for ln in self.launch(s, ref)]
        out += [f"    return {self.names[self.root]}", ""]
        return "\n".join(out)

    def launch(self, s: Scope, ref: str) -> list[str]:
        var, plan = self.names[s], self.plans[s]
        make = "zeros" if plan is None else "empty"
        what = "empty range: zeros" if plan is None else f"{plan.form} kernel" + (
            ", fused: " + ", ".join(self.names[f] for f in plan.fused) if plan.fused else "")
        statement = textwrap.wrap(statement_text(s, self.names, var), 92,
                                  subsequent_indent="    ", break_long_words=False)
        lines = [f"# {ln}" for ln in statement] + [f"# ({what})"]
        dtype = "torch.bool" if _comparison(s) else \
            "mid" if self.chain and s is not self.root else f"{ref}.dtype"
        lines.append(f"{var} = torch.{make}({shape_text(s.shape)}, device={ref}.device, "
                     f"dtype={dtype})")
        if plan is None:
            return lines
        args = []
        for key in plan.text.pointers:
            args.append(self.params[key[1]] if key[0] == "in" else
                        self.names[key[1]] if key[0] == "buf" else var)
        consts = ["ACC=acc"] + (["DOT_DTYPE=dot_dtype", "DOT_PRECISION=precision"]
                                if plan.dot else [])
        consts += [f"{k}={v}" for k, v in plan.fixed.items()]
        problem = "dict(" + ", ".join(f"{k}={v}" for k, v in plan.problem.items()) + ")"
        grid = list(plan.grid) if len(plan.grid) > 1 else [plan.grid[0] + ","]
        lines += _wrap_call("grid = lambda META: (", grid, ")")
        lines += _wrap_call("_launch(", [plan.text.name, "grid", f'"{plan.kind}"', problem]
                            + args + consts, ")")
        return lines
