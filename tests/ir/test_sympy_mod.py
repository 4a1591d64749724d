"""Index expressions built with sympy keep their integer values (guards sympy 1.14's Mod bug)."""
import numpy as np
import sympy
from hypothesis import given, settings, strategies as st

import ir  # noqa: F401  (installs the guard)
from ir.interpreter import Interpreter

i, j = sympy.symbols("i j", integer=True)


def index_trees():
    """(sympy expression, the same expression as a Python function of (i, j))."""
    leaf = st.sampled_from([(i, lambda a, b: a), (j, lambda a, b: b)]) | st.integers(-3, 5).map(
        lambda c: (sympy.Integer(c), lambda a, b, c=c: c))

    def grow(sub):
        return st.one_of(
            st.tuples(sub, sub).map(lambda t: (t[0][0] + t[1][0],
                                               lambda a, b, t=t: t[0][1](a, b) + t[1][1](a, b))),
            st.tuples(st.integers(-4, 8), sub).map(
                lambda t: (t[0] * t[1][0], lambda a, b, t=t: t[0] * t[1][1](a, b))),
            st.tuples(sub, st.integers(1, 6)).map(
                lambda t: (sympy.Mod(t[0][0], t[1]), lambda a, b, t=t: t[0][1](a, b) % t[1])),
            st.tuples(sub, st.integers(1, 6)).map(
                lambda t: (sympy.floor(t[0][0] / t[1]), lambda a, b, t=t: t[0][1](a, b) // t[1])))
    return st.recursive(leaf, grow, max_leaves=6)


def test_the_known_sympy_case_keeps_its_values():
    e = sympy.Mod(2 * sympy.Mod(i, 5), 3)
    assert [int(e.subs(i, v)) for v in range(6)] == [2 * (v % 5) % 3 for v in range(6)]


@settings(max_examples=300, deadline=None)
@given(index_trees())
def test_sympy_and_the_interpreter_agree_with_integer_arithmetic(tree):
    expr, value = tree
    interp = Interpreter({})
    interp.ranges = {"i": (-4, 9), "j": (0, 7)}
    got = np.broadcast_to(interp.index(sympy.sympify(expr)).aligned(("i", "j")), (13, 7))
    for a in range(-4, 9):
        for b in range(0, 7):
            want = value(a, b)
            assert int(sympy.sympify(expr).subs({i: a, j: b})) == want
            assert int(got[a + 4, b]) == want


def test_mods_of_scaled_mods_keep_their_values():
    for c in range(-4, 9):
        for m in range(1, 7):
            for q in range(1, 7):
                for k in (0, 1, q + 1):
                    e = sympy.Mod(c * sympy.Mod(i, m) + k, q)
                    got = [int(e.subs(i, v)) for v in range(-3, 2 * m + 1)]
                    assert got == [(c * (v % m) + k) % q for v in range(-3, 2 * m + 1)], e
