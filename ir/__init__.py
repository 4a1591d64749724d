"""The expression language: nodes, interpreter, parser/printer, checks, canonical form."""
from ir.nodes import (  # noqa: F401
    Access, Binary, BinOp, Const, Expr, Iter, Reduce, Scope, Tensor, UnOp, Unary,
    accesses, free_iterators, inputs, iterator_symbol, sub_scopes, walk,
)
from ir.interpreter import evaluate  # noqa: F401
