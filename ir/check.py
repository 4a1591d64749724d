"""Validity checks: ``check(scope)`` raises IRError naming the statement and the problem.

The interpreter, the printer and the rules all assume what is checked here: every iterator a
body uses is bound by its scope, accesses match their source's rank, ranges are not inverted
(zero extent is fine: torch has empty dims), index expressions are integer-affine plus ``//``
and ``%`` by positive integers, and bodies are made only of the known node types.
"""
from __future__ import annotations

import numbers

import sympy

from ir.errors import IRError
from ir.nodes import Access, Binary, BinOp, Const, Iter, Reduce, Scope, Tensor, UnOp, Unary, walk


def _describe(s: Scope) -> str:
    try:
        from ir.printer import statement_text
        return f"in statement {statement_text(s)!r}"
    except Exception:  # the printer is best-effort on broken scopes; the name still helps
        return f"in statement {s.name or '<unnamed>'!r}"


def index_problem(e: sympy.Expr) -> str | None:
    """Why ``e`` is not a valid index expression, or None if it is."""
    if e.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo):
        return f"index {e} is not finite (a division or modulo by zero?)"
    if e.is_Integer:
        return None
    if e.is_Symbol:
        return None if e.is_integer else f"symbol {e.name!r} is not an integer iterator " \
                                         "symbol (make it with ir.iterator_symbol)"
    if isinstance(e, sympy.Add):
        return next(filter(None, map(index_problem, e.args)), None)
    if isinstance(e, sympy.Mul):
        consts = [a for a in e.args if a.is_Number]
        if any(not c.is_Integer for c in consts):
            return f"non-affine index {e}: coefficients must be integers"
        if len(e.args) - len(consts) > 1:
            return f"non-affine index {e}: a product of iterators"
        return next(filter(None, map(index_problem, e.args)), None)
    if isinstance(e, sympy.floor):
        num, den = e.args[0].as_numer_denom()
        if not (den.is_Integer and den > 0):
            return f"non-affine index {e}: floor division must be by a positive integer"
        return index_problem(num)
    if isinstance(e, sympy.Mod):
        a, m = e.args
        if not (m.is_Integer and m > 0):
            return f"index {e}: '%' must be by a positive integer"
        return index_problem(a)
    return f"unsupported index expression {e} ({type(e).__name__})"


def _check_iters(s: Scope, where: str):
    seen = set()
    for it in tuple(s.traversal) + tuple(s.summation):
        if not isinstance(it, Iter):
            raise IRError(f"{where}: {it!r} is not an Iter")
        if not (isinstance(it.lo, numbers.Integral) and isinstance(it.hi, numbers.Integral)):
            raise IRError(f"{where}: range of {it.name!r} must be integers, got {it.lo!r}:{it.hi!r}")
        if it.hi < it.lo:
            raise IRError(f"{where}: inverted range {it.lo}:{it.hi} for {it.name!r}")
        if it.name in seen:
            raise IRError(f"{where}: duplicate iterator name {it.name!r}")
        seen.add(it.name)
    return seen


def _check_body(s: Scope, bound: set[str], where: str, tensors: dict[str, Tensor], todo: list):
    for node in walk(s.body):
        if isinstance(node, Scope):
            raise IRError(f"{where}: a scope inside a body must be accessed (S[i, ...]), "
                          "not used as a value")
        if isinstance(node, Const):
            if not isinstance(node.value, numbers.Real):
                raise IRError(f"{where}: constant {node.value!r} is not a real number")
        elif isinstance(node, Binary):
            if not isinstance(node.op, BinOp):
                raise IRError(f"{where}: unknown binary operator {node.op!r}")
        elif isinstance(node, Unary):
            if not isinstance(node.op, UnOp):
                raise IRError(f"{where}: unknown unary operator {node.op!r}")
        elif isinstance(node, Access):
            _check_access(node, bound, where, tensors, todo)
        else:
            raise IRError(f"{where}: unknown node type {type(node).__name__}")


def _check_access(a: Access, bound: set[str], where: str, tensors: dict[str, Tensor], todo: list):
    src = a.source
    if isinstance(src, Tensor):
        other = tensors.setdefault(src.name, src)
        if other != src:
            raise IRError(f"{where}: two different input tensors named {src.name!r}: "
                          f"{other.shape} {other.dtype} and {src.shape} {src.dtype}")
    elif isinstance(src, Scope):
        todo.append(src)
    else:
        raise IRError(f"{where}: access source {src!r} is neither a Tensor nor a Scope")
    name = src.name or "a scope"
    if len(a.indices) != len(src.shape):
        raise IRError(f"{where}: rank mismatch: {name!r} has rank {len(src.shape)} but is "
                      f"indexed with {len(a.indices)} indices")
    for ix in a.indices:
        problem = index_problem(ix)
        if problem:
            raise IRError(f"{where}: in an access of {name!r}: {problem}")
        unbound = sorted(s.name for s in ix.free_symbols if s.name not in bound)
        if unbound:
            raise IRError(f"{where}: unbound iterator {unbound[0]!r} in an access of {name!r} "
                          f"(the scope binds {', '.join(sorted(bound)) or 'nothing'})")


def check(scope: Scope) -> None:
    """Raise IRError for the first problem in ``scope`` or any scope it reads from."""
    if not isinstance(scope, Scope):
        raise IRError(f"expected a Scope, got {type(scope).__name__}")
    tensors: dict[str, Tensor] = {}
    todo, done = [scope], set()
    while todo:
        s = todo.pop()
        if id(s) in done:
            continue
        done.add(id(s))
        where = _describe(s)
        if not isinstance(s.reduce, Reduce):
            raise IRError(f"{where}: unknown reduction {s.reduce!r}")
        bound = _check_iters(s, where)
        _check_body(s, bound, where, tensors, todo)
