"""The torch backend: a scope becomes one FX graph of vectorised torch calls.

The nodes of each sub-scope are recorded in order (dependencies first), each scope computed
once; ``Kernel.source`` lists the IR statements, then the graph's code. A scope takes one of
these forms (``Kernel.forms`` lists them):

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

A reduction whose body would materialise more than ``CHUNK_LIMIT`` elements is computed in
chunks of its largest summation iterator, accumulated (never one element at a time).
"""
from __future__ import annotations

import builtins
import keyword
import math

import numpy as np
import torch
from torch import fx

from codegen.instantiate import instantiate, softmax_call, softmax_chains
from codegen.kernel import Kernel, intermediate_dtype
from codegen.names import fresh_identifier
from codegen.products import einsum_spec, plan_matmul
from codegen.torch_expr import EXTREMUM, BodyEmitter, Value, aligned, number, permuted
from ir.nodes import (
    Access, Binary, BinOp, Const, Expr, Reduce, Scope, Tensor, Unary, free_iterators,
)
from ir.nodes import inputs as input_tensors, product_factors, sub_scopes, walk
from ir.printer import statement_text

CHUNK_LIMIT = 1 << 26  # elements of the largest temporary a reduction may materialise
REDUCE = {Reduce.SUM: torch.sum, Reduce.MAX: torch.amax, Reduce.MIN: torch.amin}
INTEGERS = ("bool", "uint8", "int8", "int16", "int32", "int64")
RESERVED = {"torch", "self"} | set(keyword.kwlist) | set(dir(builtins))


def lower(scope: Scope, fused: bool = False) -> Kernel:
    """Record the torch calls computing ``scope`` (a valid scope: ``codegen.lower`` checks it
    first) as an FX graph and wrap it; ``fused``: see ``codegen.lower``."""
    writer = KernelWriter(scope, fused)
    module = fx.GraphModule(writer.constants, writer.graph, class_name="kernel")
    return Kernel(scope, "torch", writer.input_names, OnDevice(module),
                  f"{writer.header}\n\n{module.code.strip()}\n", writer.forms, writer.index_arrays,
                  module.graph)


class OnDevice:
    """Calls a kernel's graph module with its constants (index tensors) on the inputs'
    device, copying the module there on the first call from that device."""

    def __init__(self, module: fx.GraphModule):
        self.modules = {torch.device("cpu"): module}
        self.constant = next(iter(module.buffers()), None) is not None

    def __call__(self, *tensors: torch.Tensor) -> torch.Tensor:
        if not (self.constant and tensors) or tensors[0].device.type == "cpu":
            return self.modules[torch.device("cpu")].forward(*tensors)
        device = tensors[0].device
        if device not in self.modules:
            import copy
            self.modules[device] = copy.deepcopy(self.modules[torch.device("cpu")]).to(device)
        return self.modules[device].forward(*tensors)


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
    """Records one kernel's FX graph: placeholders, the nodes of each scope, the output."""

    def __init__(self, root: Scope, fused: bool = False):
        self.fused = fused
        self.graph = fx.Graph()
        self.tracer = fx.proxy.GraphAppendingTracer(self.graph)
        self.constants = torch.nn.Module()  # index tensors, read by get_attr nodes
        self.index_arrays: dict[str, np.ndarray] = {}
        self.taken: set[str] = set(RESERVED)
        self.forms: list[str] = []
        self.views: dict[tuple, object] = {}  # views of whole sources, shared by chunks
        tensors = input_tensors(root)
        self.input_names = tuple(sorted(tensors))
        self.params = {n: fx.Proxy(self.graph.placeholder(self.fresh(n)), self.tracer)
                       for n in self.input_names}
        self.dtype = root.dtype
        floats = [n for n in self.input_names if tensors[n].dtype not in INTEGERS]
        scopes = sub_scopes(root)
        restore = None
        if chained(scopes) and floats:
            # a chain of contractions (a reassociated product, say) in float16 / bfloat16 keeps
            # its intermediates in float32, where eager's order would have stayed in range
            restore = self.params[floats[0]].dtype
            wide = self.call(intermediate_dtype, restore)
            for n in floats:
                self.params[n] = self.params[n].to(wide)
        self.ref = self.params[self.input_names[0]] if self.input_names else None
        self.number_input = self.params[floats[0]] if floats else self.ref
        self._number_dtype = None
        self.scope_names: dict[Scope, str] = {}  # structurally equal scopes are computed once
        self.scope_values: dict[Scope, fx.Proxy] = {}
        self.bool_scopes: set[Scope] = set()  # computed as torch.bool tensors (comparisons)
        # what makes a scope's tensor safe to return: "" (owns its memory), "clone" (a view of
        # an input or scope), "contiguous" (expanded: several positions share an element)
        self.on_return: dict[Scope, str] = {}
        statements = []
        self.softmax, fused_inner = softmax_chains(scopes)
        for s in scopes:
            if s in fused_inner or s in self.scope_names:
                continue  # computed inside its softmax chain's library call, or already
            var = self.fresh(s.name or "t")
            try:
                self.scope_values[s] = self.block(s)
            except Exception as e:
                e.add_note(f"while lowering {self.statement(s, var)}")
                raise
            self.scope_names[s] = var
            statements.append((s, var, self.forms[-1]))
        result = self.scope_values[root]
        copy = self.on_return[root]
        if copy:
            result = getattr(result, copy)()
        if restore is not None and root not in self.bool_scopes:
            result = result.to(restore)
        self.graph.output(result.node)
        self.forms = tuple(self.forms)
        self.header = "\n".join([f"# {_summary(root, self.input_names)}"] + [
            f"# {self.scope_values[s].node.name}: {self.statement(s, var)}  -- shape {s.shape}, "
            f"{form}" for s, var, form in statements])

    # -- services for BodyEmitter and instantiate ---------------------------------------------
    def fresh(self, hint: str) -> str:
        """A new identifier like ``hint``."""
        return fresh_identifier(hint, self.taken)

    def call(self, function, *args, **kwargs) -> fx.Proxy:
        """A node calling ``function`` (for calls whose arguments hold no proxy to record them)."""
        return self.tracer.create_proxy("call_function", function, args, kwargs)

    def source_node(self, source: Tensor | Scope) -> fx.Proxy:
        if isinstance(source, Tensor):
            return self.params[source.name]
        return self.scope_values[source]

    def holds_bool(self, source: Tensor | Scope) -> bool:
        """Is ``source`` a torch.bool tensor here (a bool input, a comparison's result)?"""
        if isinstance(source, Tensor):
            return source.dtype == "bool"
        return source in self.bool_scopes

    def number_ref(self) -> fx.Proxy:
        """An input whose dtype numbers are computed in (a bool turns into it)."""
        return self.number_input if self.number_input is not None else \
            self.call(torch.empty, (), dtype=getattr(torch, self.dtype))

    def number_dtype(self):
        if self.number_input is None:
            return getattr(torch, self.dtype)
        if self._number_dtype is None:
            self._number_dtype = self.number_input.dtype
        return self._number_dtype

    def index_tensor(self, hint: str, array: np.ndarray) -> fx.Proxy:
        """An index tensor, a constant of the graph (its values depend only on shapes)."""
        name = self.fresh(hint)
        self.index_arrays[name] = array = np.ascontiguousarray(array)
        self.constants.register_buffer(name, torch.as_tensor(array))
        return fx.Proxy(self.graph.get_attr(name), self.tracer)

    def view(self, key: tuple, make):
        """A view of a whole source recorded once per kernel (``make()`` the first time)."""
        if key not in self.views:
            self.views[key] = make()
        return self.views[key]

    def new(self, shape: tuple[int, ...], fill: float | None = None) -> fx.Proxy:
        """A new tensor of ``shape`` in the inputs' dtype and device (without inputs: the
        root scope's dtype, on the CPU)."""
        if self.ref is not None:
            return self.ref.new_zeros(shape) if fill is None else self.ref.new_full(shape, fill)
        dtype = getattr(torch, self.dtype)
        return self.call(torch.zeros, shape, dtype=dtype) if fill is None else \
            self.call(torch.full, shape, fill, dtype=dtype)

    # -- one scope --------------------------------------------------------------------------
    def statement(self, s: Scope, var: str) -> str:
        """The IR statement of ``s`` (``ir.printer`` syntax), sources named by their variables."""
        return statement_text(s, self.scope_names, var)

    def block(self, s: Scope) -> fx.Proxy:
        self.on_return[s] = ""
        if any(it.extent == 0 for it in s.traversal + s.summation):
            self.forms.append("empty")
            return self.new(s.shape)
        if s in self.softmax:
            m = self.softmax[s]
            self.forms.append(m.kind)
            return softmax_call(self, m)
        library = None if self.fused and streaming(s) else instantiate(self, s)
        if library is not None:
            x, form = library
            self.forms.append(form)
            return x
        traversal = tuple(it.name for it in s.traversal)
        chunk = plan_chunk(s)
        if chunk is None:
            value, form = self.reduction(BodyEmitter(self, s), s)
        else:  # accumulate the reduction of each chunk
            name, size = chunk
            extent = next(it.extent for it in s.summation if it.name == name)
            value = None
            for start in range(0, extent, size):
                part, form = self.reduction(BodyEmitter(self, s, (name, start, size)), s)
                value = part if value is None else Value(
                    value.x + part.x if s.reduce is Reduce.SUM else
                    EXTREMUM[BinOp[s.reduce.name]][0](value.x, part.x), part.labels)
        if value.boolean:
            self.bool_scopes.add(s)
        self.forms.append(form)
        self.on_return[s] = self.return_copy(value, s)
        return self.output(value, traversal, s.shape)

    def return_copy(self, value: Value, s: Scope) -> str:
        """What makes the scope's tensor safe to hand out (see ``on_return``)."""
        if value.const is not None:
            return ""
        if any(it.extent > 1 and it.name not in value.labels for it in s.traversal):
            return "contiguous"
        if value.fresh or self.on_return.get(value.view_of) == "":
            return ""  # new memory, or a plain view of a scope's own memory
        return "clone"

    def reduction(self, em: BodyEmitter, s: Scope) -> tuple[Value, str]:
        """The scope's value (axes: some of the traversal iterators) and its form."""
        traversal = tuple(it.name for it in s.traversal)
        summed = tuple(it.name for it in s.summation)
        if s.reduce is Reduce.SUM and summed and not (self.fused and streaming(s)):
            return self.contraction(em, s, traversal, summed)
        v = em.value(s.body)
        if not summed:
            return v, "map"
        return _reduced(em.numeric(v), s.reduce, summed), REDUCE[s.reduce].__name__

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
            v = Value(v.x * scale, v.labels)
        return v, form

    def product(self, tensors: list[Value], out: tuple[str, ...]) -> tuple[Value, str]:
        plan = plan_matmul([v.labels for v in tensors], out)
        if plan is None:
            spec = einsum_spec([v.labels for v in tensors], out)
            return Value(torch.einsum(spec, *(v.x for v in tensors)), out), "einsum"
        operands = [tensors[i].x if perm is None else permuted(tensors[i].x, perm)
                    for i, perm in zip(plan.order, plan.perms)]
        return Value(getattr(torch, plan.op)(*operands), out), plan.op

    def output(self, v: Value, traversal: tuple[str, ...], shape: tuple[int, ...]) -> fx.Proxy:
        """``v`` laid out as the scope's tensor: axes in traversal order, all present."""
        if v.const is not None:
            return self.new(shape, v.const)
        x = aligned(v, traversal, full_rank=True)
        if any(n not in v.labels and size > 1 for n, size in zip(traversal, shape)):
            x = x.expand(shape)
        return x


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
    kept = tuple(n for n in v.labels if n not in summed)
    return Value(REDUCE[reduce](v.x, dim=axes[0] if len(axes) == 1 else tuple(axes)), kept)


def _summary(root: Scope, names: tuple[str, ...]) -> str:
    shape = "x".join(map(str, root.shape)) or "scalar"
    return (f"{root.name or 'scope'} ({shape}) from {', '.join(names) or 'no inputs'}; "
            f"generated by ollie codegen (torch), one line per scope, then its FX graph:")
