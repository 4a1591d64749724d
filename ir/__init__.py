"""The expression language: nodes, interpreter, parser/printer, checks, canonical form."""
import ir.sympy_mod  # noqa: F401  (first: every index expression is built after the guard)
from ir.nodes import (  # noqa: F401
    Access, Binary, BinOp, Const, Expr, Iter, Reduce, Scope, Tensor, UnOp, Unary,
    accesses, free_iterators, inputs, iterator_symbol, sub_scopes, walk,
)
from ir.interpreter import evaluate  # noqa: F401
from ir.errors import IRError, ParseError  # noqa: F401
from ir.parser import parse, parse_all  # noqa: F401
from ir.printer import to_latex, to_text  # noqa: F401
from ir.check import check  # noqa: F401
from ir.canonical import canonical, fingerprint, readable  # noqa: F401
from ir.equiv import Comparison, compare, equivalent, random_inputs  # noqa: F401
from ir.analysis import (  # noqa: F401
    analytic_cost, bytes_moved, flops, iteration_points, program_cost,
)
