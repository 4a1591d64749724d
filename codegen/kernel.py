"""A lowered program: generated Python source compiled once into a callable.

Backends (``codegen.torch_backend``, later ``codegen.triton_backend``) produce the source
text; this module compiles it with ``exec`` a single time and wraps the function. A call is
then just the generated function: no tracing, no analysis, no shape checks per call.
"""
from __future__ import annotations

import itertools
import linecache
from types import SimpleNamespace
from typing import Callable

import numpy as np
import torch

from ir.nodes import Scope

_counter = itertools.count()


class IndexTable(dict):
    """Index tensors of a kernel (gather positions, masks), keyed by device.

    They depend only on shapes, so the backend computes them once with numpy; the first
    call on a device turns them into tensors there: ``table[device].name``.
    """

    def __init__(self, arrays: dict[str, np.ndarray]):
        super().__init__()
        self.arrays = arrays

    def __missing__(self, device) -> SimpleNamespace:
        tensors = SimpleNamespace(**{name: torch.as_tensor(a, device=device)
                                     for name, a in self.arrays.items()})
        self[device] = tensors
        return tensors


class Kernel:
    """A compiled scope. ``kernel(*tensors)`` takes inputs in ``input_names`` order (the
    input tensors' names, sorted); ``kernel(**{name: tensor})`` takes them by name. Returns a
    ``torch.Tensor`` of the root scope's shape, in the inputs' dtype and on their device.
    """

    def __init__(self, scope: Scope, backend: str, input_names: tuple[str, ...], source: str,
                 function_name: str, forms: tuple[str, ...] = (),
                 index_arrays: dict[str, np.ndarray] | None = None,
                 namespace: dict | None = None):
        self.scope = scope
        self.backend = backend
        self.input_names = input_names
        self.source = source
        self.forms = forms  # how each sub-scope was lowered, dependencies first
        self.index_table = IndexTable(index_arrays or {})
        self._fn: Callable[..., torch.Tensor] = compile_function(
            source, function_name, {"_INDEX": self.index_table, **(namespace or {})})

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


def compile_function(source: str, name: str, namespace: dict) -> Callable:
    """``exec`` ``source`` once and return its function ``name``.

    The source is registered with ``linecache`` so tracebacks show the generated lines.
    """
    filename = f"<ollie-codegen-{next(_counter)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    scope = dict(namespace)
    exec(compile(source, filename, "exec"), scope)
    return scope[name]
