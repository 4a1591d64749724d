"""Fresh identifiers for generated source (shared by the torch and Triton writers)."""
from __future__ import annotations


def fresh_identifier(hint: str, taken: set[str]) -> str:
    """A new Python identifier like ``hint`` that is not in ``taken`` (which it joins)."""
    base = "".join(c if c.isalnum() or c == "_" else "_" for c in hint) or "t"
    base = "_" + base if base[0].isdigit() else base
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}{n}" if not base[-1].isdigit() else f"{base}_{n}"
    taken.add(name)
    return name
