"""Build an ``ir`` expression from a PyTorch expression written as text.

``build("F.conv_transpose2d(x, w, stride=2, padding=1)", {"x": (1, 8, 7, 7), ...})`` evaluates
the text with each declared name bound to an ``ir.Tensor`` and ``F`` / ``torch`` bound to a
small namespace that maps torch function names onto the operator library (``ir.ops``). The
text is *not* handed to Python's ``eval``: a small interpreter walks its syntax tree and
accepts only names, numbers, strings, tuples and lists, the arithmetic operators, calls of
known functions and methods, and keyword arguments. Anything else is a clear error with a
caret under the offending column.
"""
from __future__ import annotations

import ast
from typing import Mapping

import ir
from ir import ops
from ir.errors import did_you_mean

MAX_DEPTH = 200  # nesting of the syntax tree walked (recursively) by the evaluator
# Operators Python's parser rejects that people type for torch ones (the caret says where).
TYPOS = {"@@": "'@' (matrix product)", "&&": "'*' (a product)", "||": "torch.maximum"}
SYMBOLS = {ast.BitXor: "^", ast.BitAnd: "&", ast.BitOr: "|", ast.Pow: "**", ast.Mod: "%",
           ast.FloorDiv: "//", ast.LShift: "<<", ast.RShift: ">>"}


class TorchExprError(ValueError):
    """Text that is not a supported torch expression; ``str()`` has a caret line."""

    def __init__(self, message: str, source: str = "", column: int | None = None):
        self.message = message
        text = message
        if source and column is not None:
            text += f"\n  {source}\n  {' ' * column}^"
        super().__init__(text)


# Functions reachable as F.name / torch.name (and bare name). Each mirrors torch's signature.
METHOD_ONLY = {"OpError", "view", "slice", "unfold", "expand"}  # not torch.* / F.* functions
FUNCTIONS = {name: getattr(ops, name) for name in ops.__all__ if name not in METHOD_ONLY}

# Tensor methods: x.name(*args) calls FUNCTIONS-like builders with x as the first argument.
METHODS = {name: getattr(ops, name) for name in (
    "matmul", "mm", "bmm", "mv", "dot", "add", "sub", "mul", "div", "maximum", "minimum",
    "relu", "exp", "log", "tanh", "sigmoid", "sqrt", "abs", "neg", "reciprocal",
    "sum", "mean", "amax", "amin", "softmax", "log_softmax",
    "transpose", "permute", "reshape", "view", "flatten", "squeeze", "unsqueeze", "unfold",
    "expand",
)}
METHODS["t"] = lambda x: ops.transpose(x, 0, 1)

BINARY = {ast.MatMult: ops.matmul, ast.Add: ops.add, ast.Sub: ops.sub, ast.Mult: ops.mul,
          ast.Div: ops.div}


class Namespace:
    """``F`` / ``torch``: attribute access looks a function up in ``table``."""

    def __init__(self, name: str, table: dict, children: dict | None = None):
        self.name, self.table, self.children = name, table, children or {}


class Value:
    """A tensor-valued intermediate: wraps an ``ir.Tensor`` or ``ir.Scope``."""

    def __init__(self, node):
        self.node = node

    @property
    def shape(self):
        return tuple(self.node.shape)


def _namespaces() -> dict[str, Namespace]:
    functional = Namespace("torch.nn.functional", FUNCTIONS)
    nn = Namespace("torch.nn", {}, {"functional": functional})
    return {"F": functional, "torch": Namespace("torch", FUNCTIONS, {"nn": nn})}


class _Evaluator:
    def __init__(self, source: str, names: Mapping[str, object]):
        self.source = source
        self.names = dict(_namespaces())
        for name, t in names.items():
            self.names[name] = Value(t)

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
        if node.id in FUNCTIONS:
            return FUNCTIONS[node.id]
        declared = [n for n in self.names if n not in ("F", "torch")]
        hint = did_you_mean(node.id, declared + list(FUNCTIONS))
        raise self.error(f"unknown name {node.id!r}{hint} (declared tensors: "
                         f"{', '.join(declared) or 'none'})", node)

    def _Tuple(self, node: ast.Tuple):
        return tuple(self.eval(e) for e in node.elts)

    def _List(self, node: ast.List):
        return [self.eval(e) for e in node.elts]

    # -- operators -----------------------------------------------------------------------
    def _UnaryOp(self, node: ast.UnaryOp):
        x = self.eval(node.operand)
        if isinstance(node.op, ast.USub):
            return Value(ops.neg(x.node)) if isinstance(x, Value) else self._number(x, node) * -1
        if isinstance(node.op, ast.UAdd):
            return x
        raise self.error(f"unsupported unary operator {type(node.op).__name__}", node)

    def _number(self, x, node):
        if isinstance(x, (int, float)) and not isinstance(x, bool):
            return x
        raise self.error(f"expected a number, got {type(x).__name__}", node)

    def _BinOp(self, node: ast.BinOp):
        a, b = self.eval(node.left), self.eval(node.right)
        if not isinstance(a, Value) and not isinstance(b, Value):  # plain arithmetic: 2*w+1
            a, b = self._number(a, node.left), self._number(b, node.right)
            if isinstance(node.op, ast.Add):
                return a + b
            if isinstance(node.op, ast.Sub):
                return a - b
            if isinstance(node.op, ast.Mult):
                return a * b
            if isinstance(node.op, ast.FloorDiv) and b:
                return a // b
            raise self.error(f"unsupported arithmetic {ast.unparse(node)}", node)
        fn = BINARY.get(type(node.op))
        if fn is None:
            symbol = SYMBOLS.get(type(node.op), type(node.op).__name__)
            raise self.error(f"operator {symbol!r} is not supported on tensors here (use "
                             f"{', '.join(('@', '+', '-', '*', '/'))} or a function)", node)
        return self._apply(fn, [a, b], {}, node, f"operator {type(node.op).__name__}")

    # -- calls ---------------------------------------------------------------------------
    def _Attribute(self, node: ast.Attribute):
        if node.attr.startswith("_"):
            raise self.error(f"attribute {node.attr!r} is not allowed", node)
        owner = self.eval(node.value)
        if isinstance(owner, Namespace):
            if node.attr in owner.children:
                return owner.children[node.attr]
            if node.attr in owner.table:
                return owner.table[node.attr]
            hint = did_you_mean(node.attr, list(owner.table) + list(owner.children))
            known = "" if hint else " (supported: " + (", ".join(sorted(owner.table))
                                                       or ", ".join(sorted(owner.children))) + ")"
            raise self.error(f"unknown function {ast.unparse(node)}{hint}{known}", node)
        if isinstance(owner, Value):
            if node.attr == "T":
                return Value(ops.permute(owner.node, *reversed(range(len(owner.shape)))))
            if node.attr in METHODS:
                return _BoundMethod(owner, METHODS[node.attr], node.attr)
            hint = did_you_mean(node.attr, METHODS)
            raise self.error(f"unknown tensor method .{node.attr}{hint}" + ("" if hint else (
                f" (supported: {', '.join(sorted(METHODS))})")), node)
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
        name = ast.unparse(node.func)
        if isinstance(fn, _BoundMethod):
            return self._apply(fn.fn, [fn.owner] + args, kwargs, node, f".{fn.name}")
        if callable(fn) and not isinstance(fn, (Value, Namespace)):
            return self._apply(fn, args, kwargs, node, name)
        raise self.error(f"{name} is not a function", node)

    def _apply(self, fn, args, kwargs, node, what: str):
        raw_args = [_unwrap(a) for a in args]
        raw_kwargs = {k: _unwrap(v) for k, v in kwargs.items()}
        try:
            result = fn(*raw_args, **raw_kwargs)
        except ops.OpError as e:
            raise self.error(str(e), node) from None
        except TypeError as e:
            raise self.error(f"{what}: {e}", node) from None
        return Value(result) if isinstance(result, (ir.Tensor, ir.Scope)) else result


class _BoundMethod:
    def __init__(self, owner: Value, fn, name: str):
        self.owner, self.fn, self.name = owner, fn, name


def _unwrap(x):
    if isinstance(x, Value):
        return x.node
    if isinstance(x, (list, tuple)):
        return type(x)(_unwrap(v) for v in x)
    return x


def build(source: str, tensors: Mapping[str, object]) -> ir.Scope:
    """The ``ir.Scope`` computed by torch expression ``source`` over ``tensors``.

    ``tensors`` maps a name to an ``ir.Tensor`` or a shape tuple.
    """
    bound = {n: t if isinstance(t, ir.Tensor) else ir.Tensor(n, tuple(int(d) for d in t))
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
    value = _Evaluator(text, bound).eval(tree.body)
    if isinstance(value, Value) and isinstance(value.node, ir.Scope):
        return value.node
    if isinstance(value, Value):
        raise TorchExprError(f"the expression is just the input tensor {value.node.name!r}; "
                             "apply an operation to it")
    raise TorchExprError(f"the expression evaluates to {type(value).__name__}, not a tensor")


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
