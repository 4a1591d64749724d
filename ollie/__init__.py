"""Ollie: a derivation-based tensor program optimizer, as a ``torch.compile`` backend.

    torch.compile(model, backend="ollie")      # after `pip install`, or once Ollie is imported

    @ollie.optimize                            # the same, plus f.explain()
    def f(a, b, c):
        return (a @ b) @ c

``import ollie`` stays light (the command line starts without torch): ``optimize``,
``explain`` and the backend load on first use. When torch is already imported, the backend
name "ollie" is registered with Dynamo at once.
"""
import sys

__version__ = "0.1.0"
__all__ = ["optimize", "explain", "export", "OllieWarning", "OllieBackend", "Options"]

_LAZY = {"optimize": "ollie.api", "explain": "ollie.api", "OptimizedFunction": "ollie.api",
         "export": "ollie.deploy", "OllieWarning": "ollie.capture.backend", "OllieBackend": "ollie.capture.backend",
         "Options": "ollie.options"}


def __getattr__(name):
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'ollie' has no attribute {name!r}")


if "torch" in sys.modules:  # `import torch, ollie`: backend="ollie" works without pip install
    from ollie.capture.backend import register as _register
    _register()
