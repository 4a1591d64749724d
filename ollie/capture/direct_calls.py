"""The calls ``ollie.optimize`` makes to the user's own function (or module), without
Dynamo's frame and guards (20–50 µs a call on a 2-core CPU), where eager PyTorch was chosen
to run it: which Dynamo graph is all of a function of the user's (``whole_user_function``),
and, at symbolic sizes, which calls its eager choice covers, read off the function's own
arguments (``EagerSizes``). The choice itself is ``eager_or_compiled``'s.
"""
from __future__ import annotations

import inspect
import os
from dataclasses import dataclass

import torch
import torch.fx as fx

from ollie.capture import size_range
from ollie.capture.symbolic import has_symbolic_sizes


def whole_user_function(gm: fx.GraphModule) -> bool:
    """Whether ``gm`` is all that Dynamo captured of a function of the user's: not a piece
    before a graph break, not torch's own code (``Module._call_impl`` is shared by every
    module) but as called through Dynamo's wrapper frame (``wraps_torch_function``), not a
    function Dynamo generated to resume after a break."""
    reason = getattr(gm, "compile_subgraph_reason", None)
    if reason is None or reason.graph_break:
        return False
    try:
        from torch._dynamo.symbolic_convert import InstructionTranslator
        code = InstructionTranslator.current_tx().f_code
    except Exception:  # not inside Dynamo's tracing (a backend called by hand)
        return False
    torch_dir = os.path.dirname(torch.__file__)
    return wraps_torch_function(code) or not code.co_filename.startswith(torch_dir) and \
        not code.co_name.startswith("torch_dynamo_resume_in_")


def wraps_torch_function(code) -> bool:
    """Whether ``code`` is the frame Dynamo compiles around a function of torch's own that
    it is asked to compile (``external_utils.wrap_inline``): all of ``nn.Sequential``'s
    call, say. Its code is shared by every such call: it must never be skipped."""
    from torch._dynamo.external_utils import wrap_inline
    return code in wrap_inline.__code__.co_consts


@dataclass(frozen=True)
class EagerSizes:
    """The calls of a whole function that a graph chosen to run eagerly covers, checked on
    the arguments the function is called with (a method's or a module's without ``self``):
    per tensor argument (its position, its name), a size range per dim (a fixed size, or a
    size symbol's range). Dynamo cannot skip a function whose graph has symbolic sizes (it
    would skip every size), so ``ollie.optimize`` calls the function directly where this
    holds, without Dynamo's frame and guards (20–50 µs a call on a 2-core CPU). Outside it,
    Dynamo's guards decide as before. (A module's eager win at static sizes covers exactly
    its call's sizes: ``of_module_call``.) ``with_weights``: the graph also read tensors that
    are not arguments (a module's parameters): it was chosen for inference, so calls under
    grad are not covered."""
    arguments: tuple[tuple[int, str, tuple[int, ...], tuple[int, ...]], ...]  # low, high
    with_weights: bool = False

    @classmethod
    def of_module_call(cls, args: tuple, kwargs: dict) -> EagerSizes:
        """Exactly the sizes of this call's tensor arguments (a module's: it reads weights)."""
        arguments = [(i, "", tuple(t.shape), tuple(t.shape)) for i, t in enumerate(args)
                     if isinstance(t, torch.Tensor)]
        arguments += [(-1, name, tuple(t.shape), tuple(t.shape))
                      for name, t in kwargs.items() if isinstance(t, torch.Tensor)]
        return cls(tuple(arguments), with_weights=True)

    def holds(self, args: tuple, kwargs: dict, grad: bool) -> bool:
        """Whether the call is covered; ``grad``: whether grad mode is on."""
        if grad and self.with_weights:  # (the graph was chosen for inference)
            return False
        for position, name, low, high in self.arguments:
            t = args[position] if 0 <= position < len(args) else kwargs.get(name)
            if not isinstance(t, torch.Tensor) or (grad and t.requires_grad):
                return False
            shape = t.shape
            if shape == low:
                continue
            if len(shape) != len(low):
                return False
            for a, n, b in zip(low, shape, high):  # a plain loop: this runs on every call
                if n < a or n > b:
                    return False
        return True


def covered(eager_sizes: list[EagerSizes], args: tuple, kwargs: dict) -> bool:
    """Whether one of ``eager_sizes`` covers the call. (Plain loops, no generator: on a 2-core
    CPU, whose other core spins for the last kernel's threads, Python run before a call costs
    several times its own time: ``any`` over a generator added 4 µs to a 33 µs module.)"""
    if not eager_sizes:
        return False
    grad = torch.is_grad_enabled()
    for sizes in eager_sizes:
        if sizes.holds(args, kwargs, grad):
            return True
    return False


def eager_sizes(gm: fx.GraphModule, example_inputs, bounds: dict) -> EagerSizes | None:
    """The calls the graph covers when its size symbols are kept to ``bounds`` (each one's
    highest size, as ``size_range.near_hints`` bounds them); None where a tensor with a
    symbolic size is not an argument of the function being compiled (a global, a closure),
    or a dim's size is an expression of symbols or a symbol without a bound. Tensors of
    fixed sizes that are not arguments (a module's parameters) are read as they are."""
    from torch._dynamo.source import TensorPropertySource
    from torch._dynamo.symbolic_convert import InstructionTranslator

    frame = InstructionTranslator.current_tx()
    code = frame.f_code
    names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    arguments, with_weights = [], False
    for node, x in zip(gm.graph.find_nodes(op="placeholder"), example_inputs):
        x = node.meta.get("example_value", x)  # Dynamo's fake value: its sizes are symbolic
        source = getattr(node.meta.get("grapharg"), "source", None)
        if isinstance(source, TensorPropertySource):
            continue  # a size of a tensor argument: checked with that argument
        if not isinstance(x, torch.Tensor):
            return None
        position, name = _argument(source, code, names)
        if position is None:
            if any(isinstance(size, torch.SymInt) for size in x.shape):
                return None
            with_weights = True
            continue
        low, high = [], []
        for size in x.shape:
            if not isinstance(size, torch.SymInt) or size.node.expr.is_number:  # (guarded)
                low.append(int(size))
                high.append(int(size))
            elif size.node.expr in bounds:
                lower = size.node.shape_env.var_to_range[size.node.expr].lower
                low.append(max(2, int(lower)))  # sizes 0 and 1 are specialised
                high.append(bounds[size.node.expr])
            else:
                return None
        if position > 0 and _bound_self(frame):
            position -= 1  # the call's arguments do not include ``self``
        arguments.append((position, name, tuple(low), tuple(high)))
    return EagerSizes(tuple(arguments), with_weights)


def direct_calls(gm: fx.GraphModule, example_inputs, factor: int
                 ) -> tuple[bool, EagerSizes | None]:
    """Whether ``ollie.optimize`` (which calls a function itself where eager won) could call
    the function ``gm`` is all of directly: at static sizes, or at symbolic sizes near their
    hints (up to ``factor`` times them), where the ``EagerSizes`` are those calls."""
    if not has_symbolic_sizes(example_inputs):
        return True, None
    covers = eager_sizes(gm, example_inputs, size_range.near_hints(example_inputs, factor)) \
        if whole_user_function(gm) else None
    return covers is not None, covers


def _argument(source, code, names: tuple[str, ...]) -> tuple[int | None, str]:
    """The position and name among the frame's arguments of the tensor ``source`` reads: a
    parameter (a keyword-only one at -1: found by name), or an item of its ``*args``;
    (None, "") for anything else."""
    from torch._dynamo.source import GetItemSource, LocalSource

    if isinstance(source, LocalSource) and source.local_name in names:
        position = names.index(source.local_name)
        return (position if position < code.co_argcount else -1), source.local_name
    if code.co_flags & inspect.CO_VARARGS and isinstance(source, GetItemSource) and \
            isinstance(source.base, LocalSource) and isinstance(source.index, int) and \
            source.base.local_name == code.co_varnames[len(names)]:
        return code.co_argcount + source.index, ""
    return None, ""


def _bound_self(frame) -> bool:
    """Whether the frame is a method's called on its object (``forward`` of a module):
    its first argument is then not among the call's arguments."""
    code = frame.f_code
    owner = frame.f_locals.get(code.co_varnames[0])
    method = getattr(type(owner), code.co_name, None)
    return getattr(method, "__code__", None) is code
