"""``ollie.export``: a ``torch.export.ExportedProgram`` that carries Ollie's rewrites.

    ep = ollie.export(model, (x,))
    path = torch._inductor.aoti_compile_and_package(ep)   # AOTInductor, a .pt2 package
    run = torch._inductor.aoti_load_package(path)          # in a process that imported ollie

The stages, in order:

1. ``torch.export.export`` and core-ATen decompositions: one functional graph whose weights
   (parameters, buffers, constants) are inputs named by the graph signature.
2. Ollie's graph pass (``ollie.capture.graph_pass``), as the backend runs it: translate,
   derive, verify, measure each region, splice the adopted programs. The rewritten graph is
   kept only where Inductor's compile of it beats Inductor's compile of the original.
3. Folding: what reads only weights (a product of two weight matrices, a batch norm's
   scale) runs once, here, and becomes a constant of the program. An exported program's
   weights are fixed; buffers the program itself updates are not weights here.

Ollie's own operators (``ollie::``) stay in the graph as custom ops: a process that loads the
package must ``import ollie`` (or ``codegen.ops``) first.
"""
from __future__ import annotations

import copy
import warnings

import torch
import torch.fx as fx
from torch.export.graph_signature import (
    ExportGraphSignature, InputKind, InputSpec, OutputKind, OutputSpec, TensorArgument,
)

from ollie import log, progress
from ollie.capture import backend, compilers, folding, graph_pass, samples
from ollie.capture.report import graph_line
from ollie.log import first_line
from ollie.options import Options

WEIGHTS = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)


def export(model: torch.nn.Module, args: tuple, kwargs: dict | None = None, *,
           dynamic_shapes=None, strict: bool = False, options: Options | dict | None = None,
           report: list | None = None) -> torch.export.ExportedProgram:
    """``torch.export.export(model, args, kwargs)`` with Ollie's rewrites and folded weights.
    ``report``, when given a list, receives the graph's ``GraphReport`` (what ``explain``
    prints)."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"ollie.export: expected an nn.Module, got {type(model).__name__} "
                        "(wrap a function in a Module)")
    options = options if isinstance(options, Options) else Options.from_dict(options)
    ep = torch.export.export(model, tuple(args), kwargs, dynamic_shapes=dynamic_shapes,
                             strict=strict).run_decompositions()
    try:
        gm = _rewritten(ep, options, report)
    except Exception as e:  # an Ollie bug must not cost the user the export
        _warn(f"the exported graph is left as torch.export made it: {first_line(e)}")
        gm = ep.graph_module
    try:
        return _with_folded_weights(ep, copy.deepcopy(gm))
    except Exception as e:
        _warn(f"the program is left as torch.export made it: {first_line(e)}")
        return ep


def _rewritten(ep, options: Options, report: list | None) -> fx.GraphModule:
    """Ollie's rewrite of the exported graph where Inductor's compile of it is faster."""
    gm = ep.graph_module
    fakes = [n.meta["val"] for n in gm.graph.find_nodes(op="placeholder")]
    with torch.no_grad(), samples.real_computation(), \
            progress.progress(options.progress) as show:
        new, graph_report = graph_pass.rewrite_graph(
            gm, fakes, options, "exported graph", compilers.decompositions(), show,
            portable=True)
        if new is not None:
            graph_report.adopted = _faster_when_compiled(gm, new, fakes, graph_report, options)
    line = f"ollie: {graph_line(graph_report)}"
    log.log.info("%s", line)
    if options.verbose:
        print(line)
    if report is not None:
        report.append(graph_report)
    return new if new is not None and graph_report.adopted else gm


def _faster_when_compiled(gm, new, fakes, report, options) -> bool:
    key = graph_pass.comparison_key(gm, fakes, report)
    stored = graph_pass.stored_comparison(key, report, options)
    if stored is not None:
        return stored
    from torch._inductor.compile_fx import compile_fx

    from ollie.capture.samples import sample_like
    inputs = sample_like(fakes)
    original, rewritten = compile_fx(gm, inputs), compile_fx(new, inputs)
    return graph_pass.compare(lambda xs: original(*xs), lambda xs: rewritten(*xs), fakes,
                              report, options, key)


def _with_folded_weights(ep, gm: fx.GraphModule) -> torch.export.ExportedProgram:
    """``gm`` as ``ep``'s graph, every computation on weights alone folded into a constant
    (and weights nothing reads any more dropped)."""
    gm.graph.eliminate_dead_code()
    specs = {n: s for n, s in zip(gm.graph.find_nodes(op="placeholder"),
                                  ep.graph_signature.input_specs)}
    weights = {**ep.state_dict, **ep.constants}
    mutated = {s.target for s in ep.graph_signature.output_specs
               if s.kind == OutputKind.BUFFER_MUTATION}  # state that changes between calls
    values = {n: weights[s.target] for n, s in specs.items()
              if s.kind in WEIGHTS and s.target not in mutated
              and isinstance(weights[s.target], torch.Tensor)}
    folded = _fold(gm, values)
    # constants go before the user's inputs, as torch.export orders them
    anchor = next((n for n, s in specs.items() if s.kind == InputKind.USER_INPUT), None)
    constants = dict(ep.constants)
    fake_mode = torch._guards.detect_fake_mode([n.meta.get("val") for n in specs])
    for i, (node, tensor) in enumerate(folded.items()):
        name = f"ollie_folded_{i}"
        with gm.graph.inserting_before(anchor or next(iter(gm.graph.nodes))):
            placeholder = gm.graph.placeholder(name)
        placeholder.meta["val"] = fake_mode.from_tensor(tensor, static_shapes=True) if fake_mode \
            else tensor  # a constant: its sizes are its own, never symbols
        node.replace_all_uses_with(placeholder)
        specs[placeholder] = InputSpec(InputKind.CONSTANT_TENSOR, TensorArgument(name), name)
        constants[name] = tensor
    gm.graph.eliminate_dead_code()
    for node in list(gm.graph.find_nodes(op="placeholder")):  # weights no longer read
        if not node.users and specs[node].kind in WEIGHTS:
            gm.graph.erase_node(node)
    gm.recompile()
    placeholders = gm.graph.find_nodes(op="placeholder")
    inputs = [specs[n] for n in placeholders]
    kept = {s.target for s in inputs}
    outputs = [OutputSpec(s.kind, TensorArgument(a.name) if isinstance(a, fx.Node) else s.arg,
                          s.target)
               for s, a in zip(ep.graph_signature.output_specs, gm.graph.output_node().args[0])]
    return ep._update(gm, ExportGraphSignature(inputs, outputs),
                      state_dict={k: v for k, v in ep.state_dict.items() if k in kept},
                      constants={k: v for k, v in constants.items() if k in kept})


def _fold(gm: fx.GraphModule, values: dict) -> dict[fx.Node, torch.Tensor]:
    """The values of ``folding.foldable`` computations on the weights ``values`` (and of the
    tensors held as attributes that the rest reads): all become the program's constants."""
    weights = list(values)
    frontier = folding.foldable(gm, set(weights))
    program = folding.fold_program(gm, weights, frontier)
    with torch.no_grad():
        return dict(zip(frontier, program(*(values[w] for w in weights))))


def _warn(message: str) -> None:
    warnings.warn(f"ollie.export: {message}", backend.OllieWarning, stacklevel=3)
