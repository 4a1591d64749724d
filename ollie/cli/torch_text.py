"""Build an ``ir`` expression from a PyTorch expression written as text.

``build("F.conv_transpose2d(x, w, stride=2, padding=1)", {"x": (1, 8, 7, 7), ...})`` evaluates
the text with each declared name bound to a tensor of that shape, and captures it the way the
``torch.compile`` backend captures a program (``ollie.capture.expression``): traced to core
ATen on fake tensors (no data: any shape works) and translated by the same table. So what
``ollie derive --torch`` derives is exactly what ``backend="ollie"`` would see.

The text is *not* handed to Python's ``eval``: a small interpreter walks its syntax tree and
accepts only names, numbers, strings, tuples and lists, the arithmetic operators, calls of
torch functions (``torch.*``, ``F.*``, ``torch.linalg.*``) and tensor methods, and keyword
arguments. Functions with effects outside the expression (saving, loading, seeding, global
settings, in-place methods) are refused. Anything else is a clear error with a caret.
"""
from __future__ import annotations

import ast
import operator
from typing import Mapping

import ir
from ir.errors import did_you_mean

MAX_DEPTH = 200  # nesting of the syntax tree walked (recursively) by the evaluator
# Operators Python's parser rejects that people type for torch ones (the caret says where).
TYPOS = {"@@": "'@' (matrix product)", "&&": "'*' (a product)", "||": "torch.maximum"}
SYMBOLS = {ast.BitXor: "^", ast.BitAnd: "&", ast.BitOr: "|", ast.Mod: "%",
           ast.LShift: "<<", ast.RShift: ">>"}
BINARY = {ast.MatMult: operator.matmul, ast.Add: operator.add, ast.Sub: operator.sub,
          ast.Mult: operator.mul, ast.Div: operator.truediv, ast.Pow: operator.pow,
          ast.FloorDiv: operator.floordiv}
COMPARE = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
           ast.Eq: operator.eq, ast.NotEq: operator.ne}
# Names whose call acts outside the expression (files, RNG, global state), or leaves torch.
REFUSED = {"save", "load", "from_file", "compile", "seed", "manual_seed", "initial_seed",
           "use_deterministic_algorithms", "backward", "register_hook", "numpy", "tolist",
           "item", "data_ptr", "storage", "untyped_storage", "share_memory_", "pin_memory",
           "cuda", "cpu", "to", "record_stream", "apply_", "map_", "detach_", "requires_grad_",
           "retain_grad", "exec", "eval"}


class TorchExprError(ValueError):
    """Text that is not a supported torch expression; ``str()`` has a caret line."""

    def __init__(self, message: str, source: str = "", column: int | None = None):
        self.message = message
        text = message
        if source and column is not None:
            text += f"\n  {source}\n  {' ' * column}^"
        super().__init__(text)


def _allowed(name: str) -> bool:
    return not (name.startswith("_") or name.startswith("set_") or name.endswith("_")
                or name in REFUSED)


class Namespace:
    """``torch``, ``F`` (``torch.nn.functional``), ``torch.linalg``: the public functions."""

    def __init__(self, name: str, module, children: dict | None = None):
        self.name, self.module, self.children = name, module, children or {}

    def lookup(self, attr: str):
        if attr in self.children:
            return self.children[attr]
        fn = getattr(self.module, attr, None) if _allowed(attr) else None
        return fn if callable(fn) and not isinstance(fn, type) else None

    def names(self) -> list[str]:
        return [n for n in dir(self.module) if _allowed(n)] + list(self.children)


class Value:
    """A tensor-valued intermediate (a torch tensor while the expression is traced)."""

    def __init__(self, tensor):
        self.tensor = tensor

    @property
    def shape(self):
        return tuple(self.tensor.shape)


def _namespaces() -> dict[str, Namespace]:
    import torch
    import torch.nn.functional as F

    functional = Namespace("torch.nn.functional", F)
    nn = Namespace("torch.nn", torch.nn, {"functional": functional})
    linalg = Namespace("torch.linalg", torch.linalg)
    special = Namespace("torch.special", torch.special)
    return {"F": functional, "torch": Namespace("torch", torch, {
        "nn": nn, "linalg": linalg, "special": special})}


class _Evaluator:
    def __init__(self, source: str, tensors: Mapping[str, object]):
        self.source = source
        self.names = dict(_namespaces())
        self.names.update((name, Value(t)) for name, t in tensors.items())

    def error(self, message: str, node: ast.AST | None = None) -> TorchExprError:
        return TorchExprError(message, self.source, self.column(node))

    def column(self, node: ast.AST | None) -> int | None:
        """Where the caret goes: an attribute's name, a binary operator's symbol."""
        if isinstance(node, ast.Attribute) and node.end_col_offset is not None:
            return node.end_col_offset - len(node.attr)
        if isinstance(node, ast.BinOp) and node.left.end_col_offset is not None:
            gap = self.source[node.left.end_col_offset:node.right.col_offset]
            stripped = len(gap) - len(gap.lstrip(" ("))
            return node.left.end_col_offset + stripped
        return getattr(node, "col_offset", None)

    def eval(self, node: ast.AST):
        method = getattr(self, "_" + type(node).__name__, None)
        if method is None:
            raise self.error(f"{type(node).__name__} syntax is not supported in a torch "
                             "expression (use names, numbers, operators and calls)", node)
        return method(node)

    # -- leaves --------------------------------------------------------------------------
    def _Constant(self, node: ast.Constant):
        if node.value is Ellipsis or isinstance(node.value, (int, float, str, bool, type(None))):
            return node.value
        raise self.error(f"unsupported constant {node.value!r}", node)

    def _Name(self, node: ast.Name):
        if node.id in self.names:
            return self.names[node.id]
        fn = self.names["torch"].lookup(node.id)
        if fn is not None:
            return fn
        declared = [n for n in self.names if n not in ("F", "torch")]
        hint = did_you_mean(node.id, declared + self.names["torch"].names())
        raise self.error(f"unknown name {node.id!r}{hint} (declared tensors: "
                         f"{', '.join(declared) or 'none'})", node)

    def _Tuple(self, node: ast.Tuple):
        return tuple(self.eval(e) for e in node.elts)

    def _List(self, node: ast.List):
        return [self.eval(e) for e in node.elts]

    def _Slice(self, node: ast.Slice):
        return slice(*(None if x is None else self._index(self.eval(x), x)
                       for x in (node.lower, node.upper, node.step)))

    def _index(self, x, node):
        if isinstance(x, int) and not isinstance(x, bool):
            return x
        raise self.error(f"expected an integer index, got {type(x).__name__}", node)

    # -- operators -----------------------------------------------------------------------
    def _UnaryOp(self, node: ast.UnaryOp):
        x = self.eval(node.operand)
        if isinstance(node.op, ast.USub):
            return Value(-x.tensor) if isinstance(x, Value) else -self._number(x, node)
        if isinstance(node.op, ast.UAdd):
            return x
        raise self.error(f"unsupported unary operator {type(node.op).__name__}", node)

    def _number(self, x, node):
        if isinstance(x, (int, float)) and not isinstance(x, bool):
            return x
        raise self.error(f"expected a number, got {type(x).__name__}", node)

    def _BinOp(self, node: ast.BinOp):
        a, b = self.eval(node.left), self.eval(node.right)
        fn = BINARY.get(type(node.op))
        if fn is None:
            symbol = SYMBOLS.get(type(node.op), type(node.op).__name__)
            raise self.error(f"operator {symbol!r} is not supported here (use "
                             f"{', '.join(('@', '+', '-', '*', '/', '**'))} or a function)", node)
        if not isinstance(a, Value) and not isinstance(b, Value):  # plain arithmetic: 2*w+1
            a, b = self._number(a, node.left), self._number(b, node.right)
        return self._apply(fn, [a, b], {}, node, f"operator {type(node.op).__name__}")

    def _Compare(self, node: ast.Compare):
        if len(node.ops) != 1 or type(node.ops[0]) not in COMPARE:
            raise self.error("only one comparison (<, <=, >, >=, ==, !=) at a time", node)
        a, b = self.eval(node.left), self.eval(node.comparators[0])
        return self._apply(COMPARE[type(node.ops[0])], [a, b], {}, node, "comparison")

    def _Subscript(self, node: ast.Subscript):
        owner = self.eval(node.value)
        if not isinstance(owner, Value):
            raise self.error(f"only tensors can be indexed, not {type(owner).__name__}", node)
        index = self.eval(node.slice)
        return self._apply(operator.getitem, [owner, index], {}, node, "indexing")

    # -- calls ---------------------------------------------------------------------------
    def _Attribute(self, node: ast.Attribute):
        owner = self.eval(node.value)
        if not _allowed(node.attr) and node.attr not in ("T", "mT", "H", "mH"):
            raise self.error(f"{node.attr!r} is not allowed here (it acts outside the "
                             "expression, in place, or is private)", node)
        if isinstance(owner, Namespace):
            fn = owner.lookup(node.attr)
            if fn is not None:
                return fn
            hint = did_you_mean(node.attr, owner.names())
            raise self.error(f"unknown function {ast.unparse(node)}{hint}", node)
        if isinstance(owner, Value):
            attr = getattr(owner.tensor, node.attr, None)
            if attr is None:
                hint = did_you_mean(node.attr, [n for n in dir(owner.tensor) if _allowed(n)])
                raise self.error(f"unknown tensor attribute .{node.attr}{hint}", node)
            return Value(attr) if _is_tensor(attr) else attr
        raise self.error(f"{type(owner).__name__} has no attribute {node.attr!r}", node)

    def _Call(self, node: ast.Call):
        fn = self.eval(node.func)
        args = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                raise self.error("*args is not supported", a)
            args.append(self.eval(a))
        kwargs = {}
        for kw in node.keywords:
            if kw.arg is None:
                raise self.error("**kwargs is not supported", kw.value)
            kwargs[kw.arg] = self.eval(kw.value)
        if callable(fn) and not isinstance(fn, (Value, Namespace)):
            return self._apply(fn, args, kwargs, node, ast.unparse(node.func))
        raise self.error(f"{ast.unparse(node.func)} is not a function", node)

    def _apply(self, fn, args, kwargs, node, what: str):
        raw_args = [_unwrap(a) for a in args]
        raw_kwargs = {k: _unwrap(v) for k, v in kwargs.items()}
        try:
            result = fn(*raw_args, **raw_kwargs)
        except TorchExprError:
            raise
        except (TypeError, RuntimeError, ValueError, IndexError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise self.error(f"{what}: {first}", node) from None
        if isinstance(result, (list, tuple)):
            return type(result)(Value(r) if _is_tensor(r) else r for r in result)
        return Value(result) if _is_tensor(result) else result


def _is_tensor(x) -> bool:
    import torch
    return isinstance(x, torch.Tensor)


def _unwrap(x):
    if isinstance(x, Value):
        return x.tensor
    if isinstance(x, (list, tuple)):
        return type(x)(_unwrap(v) for v in x)
    if isinstance(x, slice):
        return slice(_unwrap(x.start), _unwrap(x.stop), _unwrap(x.step))
    return x


def build(source: str, tensors: Mapping[str, object]) -> ir.Scope:
    """The ``ir.Scope`` computed by torch expression ``source`` over ``tensors``.

    ``tensors`` maps a name to an ``ir.Tensor`` or a shape tuple.
    """
    from ollie.capture.expression import CaptureError, capture_expression

    shapes = {n: tuple(int(d) for d in (t.shape if isinstance(t, ir.Tensor) else t))
              for n, t in tensors.items()}
    text = source.strip()
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as e:
        column = max((e.offset or 1) - 1, 0)
        raise TorchExprError(_syntax_message(e.msg, text, column), *_excerpt(text, column)) \
            from None
    except (RecursionError, MemoryError):  # Python's parser gives up on deep nesting
        raise TorchExprError("the expression is nested too deeply for Python's parser") \
            from None
    depth = _depth(tree.body)
    if depth > MAX_DEPTH:
        raise TorchExprError(f"the expression is nested {depth} levels deep; at most "
                             f"{MAX_DEPTH} are accepted")

    def program(*xs):
        value = _Evaluator(text, dict(zip(shapes, xs))).eval(tree.body)
        if isinstance(value, Value):
            return value.tensor
        raise TorchExprError(f"the expression evaluates to {type(value).__name__}, "
                             "not a tensor")

    try:
        return capture_expression(program, shapes)
    except CaptureError as e:
        raise TorchExprError(str(e)) from None


def _syntax_message(msg: str, text: str, column: int) -> str:
    """Python's complaint, without saying "invalid syntax" twice, plus what was likely meant
    for operators people carry over from other languages (``@@``, ``^``)."""
    msg = msg.strip().rstrip(".")
    for typo, meant in TYPOS.items():
        at = text.find(typo, max(column - len(typo), 0))
        if 0 <= at <= column + 1:
            return f"{typo!r} is not an operator here — did you mean {meant}?"
    if msg.lower().startswith("invalid syntax"):
        rest = msg[len("invalid syntax"):].strip(" .:?")
        return "this is not a Python expression" + (f" ({rest})" if rest else "") + \
            f" at column {column + 1}"
    return f"this is not a Python expression: {msg}"


def _excerpt(text: str, column: int, width: int = 72) -> tuple[str, int]:
    """(``text`` cut to ``width`` characters around ``column``, the column in the cut)."""
    if len(text) <= width:
        return text, column
    start = max(0, min(column - width // 2, len(text) - width))
    return text[start:start + width], column - start


def _depth(root: ast.AST) -> int:
    """Depth of a syntax tree, without recursion."""
    deepest, stack = 0, [(root, 1)]
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        if d <= MAX_DEPTH + 1:
            stack.extend((child, d + 1) for child in ast.iter_child_nodes(node))
    return deepest
