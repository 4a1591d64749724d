"""Writing chosen programs back into an ATen graph.

A chosen program is lowered by ``codegen`` to a torch kernel, and that kernel is traced with
``make_fx`` (under the same decompositions the graph was made with) into ATen nodes, which
are spliced in where the region's root was. The region's other nodes then have no users and
are removed. The result is an ordinary ATen graph: Inductor compiles it, fusing what Ollie
left, with nothing of Ollie's running between kernels.

The new root value keeps the layout (strides) of the value it replaces, so views downstream
that relied on it still apply.
"""
from __future__ import annotations

import torch
import torch.fx as fx
from torch.fx.experimental.proxy_tensor import make_fx


def copy_graph(gm: fx.GraphModule) -> tuple[fx.GraphModule, dict[fx.Node, fx.Node]]:
    """A copy of ``gm`` sharing its attributes, and the map from old nodes to new ones."""
    graph = fx.Graph()
    mapping: dict[fx.Node, fx.Node] = {}
    out = graph.graph_copy(gm.graph, mapping)
    graph.output(out).meta = dict(gm.graph.output_node().meta)
    new = fx.GraphModule(gm, graph)
    new.meta = dict(gm.meta)
    return new, mapping


def layout_order(out: torch.Tensor, like: torch.Tensor) -> list[int] | None:
    """How ``out`` gets ``like``'s layout: None when it has it, else the dim order (outermost
    first) to make it dense in -- ``like``'s when ``like`` is dense (a permutation of a
    contiguous layout), else row-major, a layout every view of the original also accepts.
    Decided on concrete tensors, so that a symbolic trace compares no sizes."""
    if same_layout(out, like):
        return None
    order = sorted(range(like.dim()), key=lambda d: -like.stride(d))
    inverse = [order.index(d) for d in range(like.dim())]
    dense = out.permute(order).contiguous().permute(inverse)
    return order if same_layout(dense, like) else list(range(like.dim()))


def relayout(out: torch.Tensor, order: list[int] | None) -> torch.Tensor:
    if order is None:
        return out
    inverse = [order.index(d) for d in range(len(order))]
    return out.permute(order).contiguous().permute(inverse)


def same_layout(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal strides wherever they matter (dims of size 1 have no meaningful stride)."""
    return a.shape == b.shape and all(
        sa == sb for sa, sb, n in zip(a.stride(), b.stride(), b.shape) if n > 1)


def trace_kernel(kernel, inputs: list[torch.Tensor], like: torch.Tensor,
                 decompositions: dict, fake_inputs: list | None = None) -> fx.GraphModule:
    """The ATen graph of ``kernel`` (its inputs in ``kernel.input_names`` order), its output
    laid out like ``like`` (a tensor of concrete sizes standing for the value it replaces);
    traced on ``fake_inputs`` (symbolic sizes) when given, else on ``inputs``. A symbolic
    trace must compare no sizes, so its layout is decided first, on one concrete run."""
    if fake_inputs:
        with torch.no_grad():
            order = layout_order(kernel(*inputs), like)

    def program(*xs):
        out = kernel(*xs)
        return relayout(out, order if fake_inputs else layout_order(out, like))
    with torch.no_grad():
        return make_fx(program, decomposition_table=decompositions)(*(fake_inputs or inputs))


def splice(gm: fx.GraphModule, root: fx.Node, inputs: list[fx.Node],
           traced: fx.GraphModule) -> None:
    """Put ``traced``'s nodes before ``root`` (placeholders bound to ``inputs``) and let its
    result take ``root``'s place; constants it holds become attributes of ``gm``."""
    mapping: dict[fx.Node, fx.Node] = {}
    placeholders = [n for n in traced.graph.nodes if n.op == "placeholder"]
    assert len(placeholders) == len(inputs), (placeholders, inputs)
    mapping.update(zip(placeholders, inputs))
    with gm.graph.inserting_before(root):
        for node in traced.graph.nodes:
            if node.op == "placeholder":
                continue
            if node.op == "output":
                result = fx.node.map_arg(node.args[0], mapping.__getitem__)
                break
            if node.op == "get_attr":  # read through ``lift_fresh``, as AOTAutograd reads
                # a constant: a no-op that fake tensor propagation (Inductor's) lifts to fake
                name = _fresh_attr(gm, "_ollie_constant")
                gm.register_buffer(name, getattr(traced, node.target), persistent=False)
                constant = gm.graph.get_attr(name)
                constant.meta = dict(node.meta)
                mapping[node] = gm.graph.call_function(torch.ops.aten.lift_fresh.default,
                                                       (constant,))
                mapping[node].meta = dict(node.meta)
                continue
            mapping[node] = gm.graph.node_copy(node, mapping.__getitem__)
    root.replace_all_uses_with(result)


def finish(gm: fx.GraphModule, example_inputs) -> None:
    """Drop the replaced nodes, regenerate code and refresh every node's ``meta["val"]``."""
    gm.graph.eliminate_dead_code()
    gm.graph.lint()
    gm.recompile()
    from torch._guards import detect_fake_mode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp
    mode = detect_fake_mode(example_inputs)
    if mode is None:
        FakeTensorProp(gm).propagate(*example_inputs)
        return
    FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*example_inputs)


def _fresh_attr(gm: fx.GraphModule, prefix: str) -> str:
    i = 0
    while hasattr(gm, f"{prefix}{i}"):
        i += 1
    return f"{prefix}{i}"
