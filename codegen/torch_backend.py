"""The torch backend: a scope becomes one Python function of vectorised torch calls.

One statement block per sub-scope (dependencies first), each under a comment with the IR
statement it computes; nested scopes live in local variables, computed once. A block is
one of these forms (``Kernel.forms`` lists them):

- a library operator the ``ir.patterns`` matchers recognise (``codegen.instantiate``):
  ``conv1d`` / ``conv2d``, ``g2bmm`` / ``gbmm`` (banded, never dense), ``softmax`` /
  ``log_softmax`` (a whole max/exp/sum/divide chain), and the matmul family ``mm`` / ``bmm``
  / ``matmul`` / ``mv`` / ``dot`` (operands permuted, dims of one role flattened);
- ``mm`` / ``bmm`` / ``matmul`` / ``mv`` / ``dot`` also for a product of two reads the matcher
  leaves (padded or strided views), through ``codegen.products``;
- ``einsum``: any other sum of products (factors may be strided views, gathers or
  elementwise sub-expressions); constant factors and summation iterators no factor uses
  become a scalar multiply;
- ``sum`` / ``amax`` / ``amin``: a reduction of an elementwise body;
- ``map``: an elementwise body without summation;
- ``empty``: a scope with an empty range (zeros).

A reduction whose body would materialise more than ``CHUNK_LIMIT`` elements runs in a loop
over chunks of its largest summation iterator, accumulating (never one element at a time).
"""
from __future__ import annotations

import builtins
import keyword
import math

import numpy as np

from codegen.instantiate import instantiate, softmax_call, softmax_chains
from codegen.kernel import Kernel
from codegen.names import fresh_identifier
from codegen.products import einsum_spec, plan_matmul
from codegen.torch_expr import (
    EXTREMUM, PRODUCT, BodyEmitter, Value, aligned, int_list, number, permuted, shape_literal,
)
from ir.nodes import (
    Access, Binary, BinOp, Const, Expr, Reduce, Scope, Tensor, Unary, free_iterators,
)
from ir.nodes import inputs as input_tensors, product_factors, sub_scopes, walk
from ir.printer import statement_text

CHUNK_LIMIT = 1 << 26  # elements of the largest temporary a reduction may materialise
REDUCE = {Reduce.SUM: "sum", Reduce.MAX: "amax", Reduce.MIN: "amin"}
RESERVED = {"torch", "F", "banded", "ix", "kernel", "_INDEX"} | set(keyword.kwlist) | \
    set(dir(builtins))


def lower(scope: Scope, fused: bool = False) -> Kernel:
    """Generate, compile and wrap the torch code computing ``scope`` (a valid scope:
    ``codegen.lower`` checks it first); ``fused``: see ``codegen.lower``."""
    writer = KernelWriter(scope, fused)
    return Kernel(scope, "torch", writer.input_names, writer.source, "kernel", writer.forms,
                  writer.index_arrays)


def plan_chunk(s: Scope, limit: int | None = None) -> tuple[str, int] | None:
    """``(summation iterator, chunk size)`` keeping temporaries of ``s`` under ``limit``.

    Temporaries are elementwise results and non-trivial reads (a product of factors under a
    sum is contracted without materialising it); each is sized by the iterators it uses.
    """
    limit = CHUNK_LIMIT if limit is None else limit
    extent = {it.name: it.extent for it in s.traversal + s.summation}
    contracted = _product_nodes(s.body) if s.reduce is Reduce.SUM else set()
    biggest, names = 0, frozenset()
    for node in walk(s.body):
        if id(node) in contracted:
            continue
        if isinstance(node, (Binary, Unary)) or (
                isinstance(node, Access) and not all(i.is_Symbol for i in node.indices)):
            used = free_iterators(node)
            size = math.prod(extent[n] for n in used)
            if size > biggest:
                biggest, names = size, used
    summed = [it for it in s.summation if it.name in names and it.extent > 1]
    if biggest <= limit or not summed:
        return None
    it = max(summed, key=lambda i: i.extent)
    most = max(1, limit // (biggest // it.extent))  # the largest chunk under the limit
    chunks = -(-it.extent // most)
    return it.name, -(-it.extent // chunks)  # equal chunks, as large as that count allows


def _product_nodes(e: Expr) -> set[int]:
    """Ids of the multiplications forming the product tree at the top of ``e``."""
    if isinstance(e, Binary) and e.op is BinOp.MUL:
        return {id(e)} | _product_nodes(e.lhs) | _product_nodes(e.rhs)
    return set()


class KernelWriter:
    """Writes the source of one kernel: parameters, one block per scope, the return."""

    def __init__(self, root: Scope, fused: bool = False):
        self.fused = fused
        self.taken: set[str] = set(RESERVED)
        self.index_arrays: dict[str, np.ndarray] = {}
        self.forms: list[str] = []
        self.imports: set[str] = set()  # extra imports of the generated module
        tensors = input_tensors(root)
        self.input_names = tuple(sorted(tensors))
        self.params = {n: self.fresh(n) for n in self.input_names}
        self.ref = self.params[self.input_names[0]] if self.input_names else None
        self.dtype = root.dtype
        self.scope_vars: dict[int, str] = {}
        self.bool_vars: set[str] = set()  # scopes computed as torch.bool tensors (comparisons)
        self.number_input = next((self.params[n] for n in self.input_names
                                  if tensors[n].dtype not in ("bool", "uint8", "int8", "int16",
                                                              "int32", "int64")), self.ref)
        self.scope_names: dict[Scope, str] = {}  # structurally equal scopes are computed once
        # var -> what makes it safe to return: "" (owns its memory), ".clone()" (a view of an
        # input or scope), ".contiguous()" (expanded: several positions share an element)
        self.on_return: dict[str, str] = {}
        body: list[str] = []
        scopes = sub_scopes(root)
        self.softmax, fused = softmax_chains(scopes)
        for s in scopes:
            if s in fused:
                continue  # computed inside its softmax chain's library call
            if s in self.scope_names:
                self.scope_vars[id(s)] = self.scope_names[s]
                continue
            var = self.fresh(s.name or "t")
            try:
                body += self.block(s, var)
            except Exception as e:
                e.add_note(f"while lowering {self.statement(s, var)}")
                raise
            self.scope_vars[id(s)] = self.scope_names[s] = var
        result = self.scope_vars[id(root)]
        boolean = result in self.bool_vars
        result += self.on_return[result]
        head = [f"def kernel({', '.join(self.params.values())}):",
                f'    """{_summary(root, self.input_names)}"""']
        floats = [self.params[n] for n in self.input_names
                  if tensors[n].dtype not in ("bool", "uint8", "int8", "int16", "int32", "int64")]
        if chained(scopes) and floats:
            # a chain of contractions (a reassociated product, say) in float16 / bfloat16 keeps
            # its intermediates in float32, where eager's order would have stayed in range
            dtype = self.fresh("dtype")
            head += [f"    {dtype} = {floats[0]}.dtype",
                     f"    if {dtype} in (torch.float16, torch.bfloat16):  # intermediates in "
                     f"float32",
                     f"        {', '.join(floats)} = "
                     f"{', '.join(f'{p}.float()' for p in floats)}"]
            if not boolean:
                result = f"{result}.to({dtype})"
        if self.index_arrays:
            device = f"{self.ref}.device" if self.ref else "'cpu'"
            head.append(f"    ix = _INDEX[{device}]  # index tensors, built once per device")
        imports = ["import torch", "import torch.nn.functional as F"] + sorted(self.imports)
        self.source = "\n".join(imports + ["", ""] + head + body + [f"    return {result}", ""])
        self.forms = tuple(self.forms)

    # -- services for BodyEmitter --------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        """A new identifier like ``hint``."""
        return fresh_identifier(hint, self.taken)

    def source_var(self, source: Tensor | Scope) -> str:
        if isinstance(source, Tensor):
            return self.params[source.name]
        return self.scope_vars[id(source)]

    def holds_bool(self, source: Tensor | Scope) -> bool:
        """Is ``source`` a torch.bool tensor here (a bool input, a comparison's result)?"""
        if isinstance(source, Tensor):
            return source.dtype == "bool"
        return self.scope_vars.get(id(source)) in self.bool_vars

    def number_ref(self) -> str:
        """An input whose dtype numbers are computed in (a bool turns into it)."""
        return self.number_input or f"torch.empty((), dtype=torch.{self.dtype})"

    def number_dtype(self) -> str:
        return f"{self.number_input}.dtype" if self.number_input else f"torch.{self.dtype}"

    def index_array(self, hint: str, array: np.ndarray) -> str:
        name = self.fresh(hint)
        self.index_arrays[name] = np.ascontiguousarray(array)
        return name

    def new(self, shape: tuple[int, ...], fill: float | None = None) -> str:
        """Code for a new tensor of ``shape`` in the inputs' dtype and device (without
        inputs: the root scope's dtype, on the CPU)."""
        shape_code = shape_literal(shape)
        if self.ref:
            return f"{self.ref}.new_zeros({shape_code})" if fill is None else \
                f"{self.ref}.new_full({shape_code}, {number(fill).code})"
        dtype = f"dtype=torch.{self.dtype}"
        return f"torch.zeros({shape_code}, {dtype})" if fill is None else \
            f"torch.full({shape_code}, {number(fill).code}, {dtype})"

    # -- one scope --------------------------------------------------------------------------
    def statement(self, s: Scope, var: str) -> str:
        """The IR statement of ``s`` (``ir.printer`` syntax), sources named by their variables."""
        return statement_text(s, self.scope_names, var)

    def block(self, s: Scope, var: str) -> list[str]:
        lines = [f"# {self.statement(s, var)}  -- shape {s.shape}"]
        self.on_return[var] = ""
        if any(it.extent == 0 for it in s.traversal + s.summation):
            self.forms.append("empty")
            return _indent(lines + [f"{var} = {self.new(s.shape)}"])
        if s in self.softmax:
            m = self.softmax[s]
            lines[0] = f"# {var} = {m.kind} along dim {m.dim}: the max, exp, sum chain fused  " \
                       f"-- shape {s.shape}"
            self.forms.append(m.kind)
            return _indent(lines + [f"{var} = {softmax_call(self, m)}"])
        library = None if self.fused and streaming(s) else instantiate(self, s, var)
        if library is not None:
            code, form = library
            self.forms.append(form)
            return _indent(lines + code)
        chunk = plan_chunk(s)
        if chunk is not None:
            name, size = chunk
            start = self.fresh(f"{name}0")
            em = BodyEmitter(self, s, (name, start, size))
        else:
            em = BodyEmitter(self, s)
        value, form = self.reduction(em, s)
        if value.boolean:
            self.bool_vars.add(var)
        self.forms.append(form)
        traversal = tuple(it.name for it in s.traversal)
        self.on_return[var] = self.return_copy(value, s)
        if chunk is None:
            body = em.setup + em.lines
            code = self.output(value, traversal, s.shape)
            if body and body[-1].startswith(f"{code} = "):  # the last temporary is the result
                return _indent(lines + body[:-1] + [var + body[-1][len(code):]])
            return _indent(lines + body + [f"{var} = {code}"])
        # chunked: accumulate the reduction of each chunk into ``var``
        sizes = tuple(em.extent(n) for n in value.labels)
        init = self.new(sizes, None if s.reduce is Reduce.SUM else
                        (-math.inf if s.reduce is Reduce.MAX else math.inf))
        extent = em.extent(name)
        lines[0] += f", in chunks of {size} along {name}"
        if s.reduce is Reduce.SUM:
            update = f"{var} += {value.code}"
        else:
            update = f"{var} = {EXTREMUM[BinOp[s.reduce.name]][0]}({var}, {value.code})"
        lines += em.setup + [f"{var} = {init}", f"for {start} in range(0, {extent}, {size}):"]
        lines += ["    " + ln for ln in em.lines + [update]]
        done = self.output(Value(var, value.labels), traversal, s.shape)
        if done != var:
            lines.append(f"{var} = {done}")
        return _indent(lines)

    def return_copy(self, value: Value, s: Scope) -> str:
        """What makes the scope's tensor safe to hand out (see ``on_return``)."""
        if value.const is not None:
            return ""
        if any(it.extent > 1 and it.name not in value.labels for it in s.traversal):
            return ".contiguous()"
        if value.fresh or self.on_return.get(value.view_of) == "":
            return ""  # new memory, or a plain view of a scope's own memory
        return ".clone()"

    def reduction(self, em: BodyEmitter, s: Scope) -> tuple[Value, str]:
        """The scope's value (axes: some of the traversal iterators) and its form."""
        traversal = tuple(it.name for it in s.traversal)
        summed = tuple(it.name for it in s.summation)
        if s.reduce is Reduce.SUM and summed and not (self.fused and streaming(s)):
            return self.contraction(em, s, traversal, summed)
        v = em.value(s.body)
        if not summed:
            return v, "map"
        return _reduced(em.numeric(v), s.reduce, summed), REDUCE[s.reduce]

    def contraction(self, em: BodyEmitter, s: Scope, traversal, summed) -> tuple[Value, str]:
        values = [em.numeric(em.value(f)) for f in product_factors(s.body)]
        tensors = [v for v in values if v.const is None]
        scale = math.prod(v.const for v in values if v.const is not None)
        used = {n for v in tensors for n in v.labels}
        scale *= math.prod(em.extent(n) for n in summed if n not in used)
        out = tuple(n for n in traversal if n in used)
        if not tensors:
            return number(scale), "sum"
        if len(tensors) == 1:
            v, form = _reduced(tensors[0], Reduce.SUM, summed), "sum"
        else:
            v, form = self.product(tensors, out)
        if scale != 1:
            v = Value(f"{v.atom} * {number(scale).code}", v.labels, PRODUCT)
        return v, form

    def product(self, tensors: list[Value], out: tuple[str, ...]) -> tuple[Value, str]:
        plan = plan_matmul([v.labels for v in tensors], out)
        if plan is None:
            spec = einsum_spec([v.labels for v in tensors], out)
            args = ", ".join(v.code for v in tensors)
            return Value(f'torch.einsum("{spec}", {args})', out), "einsum"
        operands = [tensors[i].code if perm is None else permuted(tensors[i], perm)
                    for i, perm in zip(plan.order, plan.perms)]
        return Value(f"torch.{plan.op}({', '.join(operands)})", out), plan.op

    def output(self, v: Value, traversal: tuple[str, ...], shape: tuple[int, ...]) -> str:
        """Code for ``v`` laid out as the scope's tensor: axes in traversal order, all present."""
        if v.const is not None:
            return self.new(shape, v.const)
        code = aligned(v, traversal, full_rank=True)
        if any(n not in v.labels and size > 1 for n, size in zip(traversal, shape)):
            code = f"{code if code != v.code else v.atom}.expand({shape_literal(shape)})"
        return code


def streaming(s: Scope) -> bool:
    """A sum of products in which every factor reads a new element at every point (each
    factor depends on every iterator): nothing is reused, so a library call gains nothing
    over one fused multiply-and-sum loop, and its operands may need copying (a transposed
    read flattened for ``dot``)."""
    if s.reduce is not Reduce.SUM or not s.summation:
        return False
    factors = [f for f in product_factors(s.body) if not isinstance(f, Const)]
    every = {it.name for it in s.traversal + s.summation}
    return len(factors) > 1 and all(free_iterators(f) == every for f in factors)


def chained(scopes) -> bool:
    """Two or more contractions (sums of products of reads): a program whose products feed
    further products (a reassociated chain), whose intermediate ranges differ from eager's."""
    return sum(1 for s in scopes if s.summation and s.reduce is Reduce.SUM and sum(
        not isinstance(f, Const) for f in product_factors(s.body)) > 1) > 1


def _reduced(v: Value, reduce: Reduce, summed: tuple[str, ...]) -> Value:
    """``v`` reduced over the summation axes it has (``torch.sum(x, dim=1)``)."""
    axes = [v.labels.index(n) for n in summed if n in v.labels]
    if not axes:
        return v  # the body does not vary along them (SUM scales by their extents elsewhere)
    dim = str(axes[0]) if len(axes) == 1 else f"({int_list(axes)})"
    kept = tuple(n for n in v.labels if n not in summed)
    return Value(f"torch.{REDUCE[reduce]}({v.code}, dim={dim})", kept)


def _summary(root: Scope, names: tuple[str, ...]) -> str:
    shape = "x".join(map(str, root.shape)) or "scalar"
    return (f"{root.name or 'scope'} ({shape}) from {', '.join(names) or 'no inputs'}; "
            f"generated by ollie codegen (torch).")


def _indent(lines: list[str]) -> list[str]:
    return ["    " + ln for ln in lines]
