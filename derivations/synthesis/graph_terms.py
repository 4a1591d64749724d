"""The terms of TASO's graph rules (``derivations.synthesis.graph``): matrices and the
operators ``mm``, ``add``, ``sub``, ``mul`` (elementwise), ``scale`` (by the rule's one
scalar), ``T``, ``cat0``/``cat1`` and the slices that take a concatenation's first piece or
the rest (``head0``/``tail0`` along rows, ``head1``/``tail1`` along columns); and
convolutions: ``conv(F, A)`` of filters ``F`` (output channels × input channels, as rows ×
columns) and images ``A`` (channels × positions). Their shapes in size symbols, their kinds
(which operator applies to what), the most general sizes of a rule's operands, their text
and one canonical form up to the associativity of sums and concatenations and the
commutativity of sums."""
from __future__ import annotations

import re
from dataclasses import dataclass

MATRICES = {"X": ("m", "k"), "Z": ("m", "k"), "Y": ("m", "p"), "W": ("k", "n"),
            "U": ("k", "n"), "V": ("p", "n")}
# filters F, G, H (out × in channels) and images A, B, C (channels × positions)
CONVOLUTION = {"F": ("o", "c"), "G": ("o", "c"), "H": ("o", "d"), "A": ("c", "q"),
               "B": ("c", "q"), "C": ("d", "q")}
VARS = MATRICES | CONVOLUTION
FILTERS, IMAGES = {"F", "G", "H"}, {"A", "B", "C"}
BINARY = ("mm", "conv", "add", "sub", "mul", "cat0", "cat1")
UNARY = ("T", "scale", "head0", "tail0", "head1", "tail1")
SUMS = ("add", "mul", "cat0", "cat1")   # associative: nested to the right in canonical form


@dataclass(frozen=True)
class GraphRule:
    lhs: tuple
    rhs: tuple
    sizes: tuple = ()   # (operand, (symbol, symbol)) pairs it is proven for; VARS if empty

    @property
    def dims(self) -> dict[str, tuple[str, str]]:
        return dict(self.sizes) or {v: VARS[v] for v in variables(self.lhs) | variables(
            self.rhs)}

    def __str__(self) -> str:
        return f"{to_text(self.lhs)} = {to_text(self.rhs)}"


# -- terms ---------------------------------------------------------------------------------------
def shape(t: tuple, typing: dict | None = None, unify=None) -> tuple | None:
    """The term's shape as two sizes, each the tuple of symbols it adds up, in order
    (``cat0(X, Z)`` has ``(("m", "m"), ("k",))``); None if ill-shaped. ``typing`` gives the
    operands' symbols (``VARS`` by default); ``unify(a, b)``, where given, is told the sizes
    that must agree and answers whether they can."""
    same = unify or (lambda a, b: a == b)
    op = t[0]
    if kind(t) is None:
        return None
    if op == "var":
        return tuple((s,) for s in (typing or VARS)[t[1]])
    parts = [shape(c, typing, unify) for c in t[1:]]
    if any(p is None for p in parts):
        return None
    if op == "T":
        return parts[0][1], parts[0][0]
    if op == "scale":
        return parts[0]
    if op[:4] in ("head", "tail"):  # a concatenation's first piece, or the rest
        d, dims = int(op[-1]), list(parts[0])
        if len(dims[d]) < 2:
            return None
        dims[d] = dims[d][:1] if op.startswith("head") else dims[d][1:]
        return tuple(dims)
    a, b = parts
    if op in ("mm", "conv"):  # (a convolution's channels contract as a product's do)
        return (a[0], b[1]) if same(a[1], b[0]) else None
    if op in ("add", "sub", "mul"):
        return a if same(a[0], b[0]) and same(a[1], b[1]) else None
    d = int(op[-1])  # cat0 / cat1
    if not same(a[1 - d], b[1 - d]):
        return None
    return (a[0] + b[0], a[1]) if d == 0 else (a[0], a[1] + b[1])


def kind(t: tuple) -> str | None:
    """``matrix``, ``filter``, ``image`` or ``feature`` (a convolution's output, an image of
    other positions); None where an operator does not apply: a convolution takes a filter
    and an image; ``mm`` and ``T`` take matrices; the rest keep their operands' kind, and
    along columns (``cat1``, ``head1``, ``tail1``) apply to matrices and filters only (an
    image's columns are its positions, which a channel algebra does not cut)."""
    if t[0] == "var":
        return "filter" if t[1] in FILTERS else "image" if t[1] in IMAGES else "matrix"
    kinds = [kind(c) for c in t[1:]]
    if None in kinds:
        return None
    if t[0] == "conv":
        return "feature" if kinds == ["filter", "image"] else None
    if t[0] in ("mm", "T"):
        return "matrix" if set(kinds) == {"matrix"} else None
    if len(set(kinds)) != 1 or t[0][-1] == "1" and kinds[0] not in ("matrix", "filter"):
        return None
    return kinds[0]


def typing(rule: "GraphRule") -> dict[str, tuple[str, str]]:
    """The most general sizes of the rule's operands: each gets its own symbols, made equal
    only where an operator needs them equal on either side (piece by piece along a
    concatenation), so that a rule found with ``W, U: (k, n)`` applies to ``W, U`` of any
    two row counts where it does not need them equal."""
    names = sorted(variables(rule.lhs) | variables(rule.rhs))
    fresh = {v: (f"{v}0", f"{v}1") for v in names}
    parent: dict[str, str] = {}

    def find(x):
        while parent.get(x, x) != x:
            x = parent[x]
        return x

    def unify(a, b):
        if len(a) != len(b):
            return False
        for x, y in zip(a, b):
            parent[find(x)] = find(y)
        return True

    left, right = shape(rule.lhs, fresh, unify), shape(rule.rhs, fresh, unify)
    if left is None or right is None or not (unify(left[0], right[0]) and
                                             unify(left[1], right[1])):
        return {v: VARS[v] for v in names}
    roots: dict[str, str] = {}
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    return {v: tuple(roots.setdefault(find(x), next(letters)) for x in fresh[v])
            for v in names}


def size(t: tuple) -> int:
    return 0 if t[0] == "var" else 1 + sum(size(c) for c in t[1:])


def operators(t: tuple) -> set[str]:
    return set() if t[0] == "var" else {t[0]}.union(*(operators(c) for c in t[1:]))


def variables(t: tuple) -> set[str]:
    return {t[1]} if t[0] == "var" else set().union(*(variables(c) for c in t[1:]))


def to_text(t: tuple) -> str:
    return t[1] if t[0] == "var" else f"{t[0]}({', '.join(to_text(c) for c in t[1:])})"


_TOKEN = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*|[(),])")


def parse(text: str) -> tuple:
    """A term from its text (``mm(cat1(X, Y), cat0(W, V))``); ValueError names what is wrong."""
    tokens = [m for m in _TOKEN.findall(text)]
    if "".join(tokens) != re.sub(r"\s+", "", text):
        raise ValueError(f"cannot read graph term {text!r}")
    pos = 0

    def term():
        nonlocal pos
        name = tokens[pos]
        pos += 1
        if name in VARS:
            return ("var", name)
        if name not in BINARY + UNARY or pos >= len(tokens) or tokens[pos] != "(":
            raise ValueError(f"{name!r} in {text!r} is neither an operand nor an operator")
        pos += 1
        args = [term()]
        while tokens[pos] == ",":
            pos += 1
            args.append(term())
        arity = 1 if name in UNARY else 2
        if tokens[pos] != ")" or len(args) != arity:
            raise ValueError(f"{name} takes {arity} operand(s) in {text!r}")
        pos += 1
        return (name, *args)

    try:
        t = term()
    except IndexError:
        raise ValueError(f"{text!r} ends early") from None
    if pos != len(tokens) or shape(t) is None:
        raise ValueError(f"{text!r} is not one well-shaped term")
    return t


def canonical(t: tuple) -> tuple:
    """``t`` with its sums, products and concatenations nested to the right, a sum's or a
    product's operands in one order: terms that differ only by the associativity of ``add``,
    ``mul`` and ``cat`` and the commutativity of ``add`` and ``mul`` are one term (its
    children already canonical)."""
    if t[0] not in SUMS:
        return t
    operands = _chain(t, t[0])
    if t[0] in ("add", "mul"):
        operands.sort(key=to_text)
    out = operands[-1]
    for o in reversed(operands[:-1]):
        out = (t[0], o, out)
    return out


def _chain(t: tuple, op: str) -> list[tuple]:
    return [o for c in t[1:] for o in _chain(c, op)] if t[0] == op else [t]
