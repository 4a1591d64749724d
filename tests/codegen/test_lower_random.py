"""Random expressions (seeded): every read plan, offset ranges, nesting and reduction kind
against the reference interpreter.

Indices mix ``it + c``, ``a*it + b*it2 + c``, ``c - it``, ``it - it2``, floor-div, mod and
constants, over ranges that may start below 0 and reach outside every source. Bodies avoid
division, reciprocal and log: around 0 they make infinities whose sum depends on the
summation order and on the sign of zero, which is not what is tested here.
"""
import random

import pytest
import sympy

from ir import Access, Binary, BinOp, Const, Iter, Reduce, Scope, Tensor, UnOp, Unary

from lowering_helpers import check_lowering

BINARY = [BinOp.ADD, BinOp.SUB, BinOp.MUL, BinOp.MAX, BinOp.MIN]
UNARY = [UnOp.NEG, UnOp.RELU, UnOp.EXP, UnOp.TANH, UnOp.SIGMOID, UnOp.SQRT, UnOp.ABS]


def random_index(rng: random.Random, its: list[Iter]) -> sympy.Expr:
    a, b = rng.choice(its).symbol, rng.choice(its).symbol
    c = rng.randint(-2, 2)
    return rng.choice([
        lambda: a + c,
        lambda: rng.randint(0, 3) * a + rng.randint(0, 2) * b + c,
        lambda: c + 3 - a,
        lambda: a - b + c,
        lambda: sympy.floor((a + rng.randint(0, 2)) / rng.randint(1, 3)),
        lambda: sympy.Mod(a + c, rng.randint(1, 4)),
        lambda: sympy.Integer(rng.randint(-1, 3)),
    ])()


def random_scope(rng: random.Random, depth: int = 0) -> Scope:
    n_trav, n_sum = rng.randint(0, 3), rng.randint(0, 2)
    its = []
    for name in rng.sample("ijklmn", n_trav + n_sum):
        lo = rng.randint(-2, 2)
        its.append(Iter(name, lo, lo + rng.randint(1, 5)))
    if not its:
        its, n_trav = [Iter("i", 0, 3)], 1

    def leaf():
        if depth < 1 and rng.random() < 0.3:
            src = random_scope(rng, depth + 1)
        else:
            shape = tuple(rng.randint(1, 5) for _ in range(rng.randint(0, 3)))
            src = Tensor("x" + "_".join(map(str, shape)), shape, "float64")  # one name per shape
        return Access(src, tuple(random_index(rng, its) for _ in range(src.rank)))

    def body(d=0):
        if d > 2 or rng.random() < 0.4:
            return leaf() if rng.random() < 0.85 else Const(float(rng.randint(-2, 2)))
        if rng.random() < 0.25:
            return Unary(rng.choice(UNARY), body(d + 1))
        return Binary(rng.choice(BINARY), body(d + 1), body(d + 1))

    return Scope(tuple(its[:n_trav]), tuple(its[n_trav:]), body(), rng.choice(list(Reduce)),
                 name=f"s{depth}", dtype="float64")


@pytest.mark.parametrize("block", range(4))
def test_random_expressions_match_interpreter(block):
    for seed in range(block * 50, block * 50 + 50):
        scope = random_scope(random.Random(seed))
        check_lowering(scope, seed=seed, rtol=1e-8, atol=1e-8)
