"""Ollie: a derivation-based tensor program optimizer.

    @ollie.optimize
    def f(a, b, c):
        return (a @ b) @ c
"""
from ollie.optimizer import OllieWarning, explain, optimize  # noqa: F401

__version__ = "0.1.0"
