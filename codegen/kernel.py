"""A lowered program: a callable over the scope's input tensors, and the code it runs.

Backends (``codegen.torch_backend``, ``codegen.triton_backend``) build the callable once: the
torch backend records an FX graph of torch calls, the Triton backend generates kernels and
a launcher and imports them as a module. A call is then just that program: no tracing, no
analysis, no shape checks per call.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from ir.nodes import Scope


class Kernel:
    """A compiled scope. ``kernel(*tensors)`` takes inputs in ``input_names`` order (the
    input tensors' names, sorted); ``kernel(**{name: tensor})`` takes them by name. Returns a
    ``torch.Tensor`` of the root scope's shape, in the inputs' dtype and on their device.

    ``source`` is the code it runs, for reading; ``graph`` its FX graph (torch backend);
    ``forms`` how each sub-scope was lowered, dependencies first; ``index_arrays`` the index
    tables it gathers with (they hold positions computed for the scope's sizes).
    """

    def __init__(self, scope: Scope, backend: str, input_names: tuple[str, ...],
                 program: Callable[..., torch.Tensor], source: str, forms: tuple[str, ...] = (),
                 index_arrays: dict[str, np.ndarray] | None = None, graph=None):
        self.scope = scope
        self.backend = backend
        self.input_names = input_names
        self.source = source
        self.forms = forms
        self.index_arrays = index_arrays or {}
        self.graph = graph
        self._fn = program

    def __call__(self, *tensors: torch.Tensor, **named: torch.Tensor) -> torch.Tensor:
        if named:
            tensors = self._bind(tensors, named)
        return self._fn(*tensors)

    def _bind(self, tensors: tuple, named: dict) -> tuple:
        given = dict(zip(self.input_names, tensors))
        for name, t in named.items():
            if name not in self.input_names:
                raise TypeError(f"kernel got an unexpected input {name!r}; its inputs are "
                                f"{list(self.input_names)}")
            if name in given:
                raise TypeError(f"kernel got input {name!r} twice")
            given[name] = t
        missing = [n for n in self.input_names if n not in given]
        if missing:
            raise TypeError(f"kernel is missing input(s) {missing}")
        return tuple(given[n] for n in self.input_names)

    def __repr__(self) -> str:
        return f"<Kernel {self.backend} ({', '.join(self.input_names)}) forms={list(self.forms)}>"


def intermediate_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of a chain's intermediates: float32 for float16 / bfloat16 inputs (a
    reassociated chain stays in range where eager's order did), else the inputs' dtype."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
