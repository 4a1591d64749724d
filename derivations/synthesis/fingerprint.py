"""Fingerprints: a term's exact values on random integer operands (as TASO does).

Operands get random integers and the term is evaluated in exact arithmetic
(:mod:`derivations.synthesis.exact`: integers stay integers, ``exp`` and ``log`` stay exact
formal values), so two terms with equal fingerprints agree exactly on those inputs, and by the
Schwartz-Zippel lemma a polynomial difference vanishes on random integers from a range of
``R`` values with probability at most ``degree / R`` per trial. Two fingerprints per term:

* ``mixed``: four trials with operands of both signs and zeros (``log`` is NaN on some
  elements), and the positive one: equal ``mixed`` fingerprints propose an unconditional
  rule (NaN where, and only where, the other side is NaN);
* ``positive``: one trial with positive operands: terms equal only there propose a rule with
  a side condition (``log(a * b) = log(a) + log(b)`` for ``a, b > 0``).

Terms are evaluated directly here, with numpy object arrays; ``test_synthesis`` checks that
this agrees with the ``ir`` interpreter on the term's ``ir`` scope.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from derivations.synthesis import elementary, exact
from derivations.synthesis.lang import VARS, rank

__all__ = ["Fingerprint", "fingerprint", "evaluate", "N", "random_operands"]

N = 3           # extent of every operand dimension in fingerprints
RANGE = 6       # mixed operands are drawn from -RANGE..RANGE, positive ones from 1..RANGE+3
_EXP = np.frompyfunc(elementary.exp, 1, 1)
_LOG = np.frompyfunc(elementary.log, 1, 1)


def _obj(v) -> np.ndarray:
    out = np.empty((), dtype=object)
    out[()] = v
    return out


def evaluate(t: tuple, env: dict[str, np.ndarray]) -> np.ndarray:
    """The term's value: an object array of exact values, one axis per rank."""
    op = t[0]
    if op == "var":
        return env[t[1]]
    if op == "const":
        return _obj(t[1])
    if op in ("add", "sub", "mul"):
        a, b = evaluate(t[1], env), evaluate(t[2], env)
        out = a + b if op == "add" else a - b if op == "sub" else a * b
        return np.asarray(out, dtype=object) if isinstance(out, np.ndarray) else _obj(out)
    a = evaluate(t[1], env)
    if op == "neg":
        out = -a
    elif op == "exp":
        out = _EXP(a)
    elif op == "log":
        out = _LOG(a)
    elif op == "T":
        return a.T
    elif op == "diag":
        return np.diagonal(a).copy()
    elif op == "bcast":
        return np.broadcast_to(a, a.shape * 2 if a.ndim == 1 else a.shape)
    elif op == "sum":
        out = a.sum(axis=-1) if a.shape[-1] else np.zeros(a.shape[:-1], dtype=object)
    else:
        raise ValueError(f"unknown op {op!r}")
    return np.asarray(out, dtype=object) if isinstance(out, np.ndarray) else _obj(out)


def random_operands(seed: int, positive: bool, n: int = N) -> dict[str, np.ndarray]:
    """An integer object array per operand, drawn in the order of ``VARS``: from
    ``1..RANGE+3`` when ``positive``, else from ``-RANGE..RANGE`` with the scalars' signs
    fixed by the seed's low bits (``a`` > 0 for odd seeds, ``b`` > 0 when bit 1 is set), so
    that four seeds meet every sign pattern of the scalars (where ``log`` is defined)."""
    rng = np.random.default_rng(seed)
    env = {}
    for q, (name, r) in enumerate(VARS.items()):
        lo, hi = (1, RANGE + 4) if positive else (-RANGE, RANGE + 1)
        values = rng.integers(lo, hi, size=(n,) * r)
        if r == 0 and not positive and q < 2:
            sign = 1 if (seed >> q) & 1 else -1
            values = sign * rng.integers(1, RANGE + 1)
        env[name] = np.asarray(np.vectorize(int, otypes=[object])(values), dtype=object) \
            if r else _obj(int(values))
    return env


@dataclass(frozen=True)
class Fingerprint:
    mixed: tuple      # every trial: mixed signs, then positive (the class key)
    positive: tuple   # the positive trial alone


_ENVS: dict = {}


def _envs():
    if not _ENVS:
        _ENVS["mixed"] = [random_operands(seed, False) for seed in (4, 5, 6, 7)]
        _ENVS["positive"] = [random_operands(8, True)]
    return _ENVS


def _key(t: tuple, env) -> tuple:
    with np.errstate(all="ignore"):  # numeric shadows of huge exp atoms overflow to inf
        value = evaluate(t, env)
    return (rank(t),) + tuple(exact.value_key(v) for v in value.flat)


def fingerprint(t: tuple) -> Fingerprint:
    envs = _envs()
    positive = tuple(_key(t, e) for e in envs["positive"])
    return Fingerprint(tuple(_key(t, e) for e in envs["mixed"]) + positive, positive)
