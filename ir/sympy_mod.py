"""A guard around ``sympy.Mod``'s evaluation, whose Mul branch gives wrong values in sympy 1.14.

With integer symbols, ``Mod(k*Mod(x, m), q)`` evaluates wrongly: for ``m != q`` it *squares*
the inner Mod (``Mod(2*Mod(i, 5), 3)`` becomes ``Mod(2*Mod(i, 5)**2, 3)``: 2, not 1, at
``i = 2``), and for ``m == q`` it drops the outer one (``Mod(2*Mod(i, 3), 3)`` becomes
``2*Mod(i, 3)``: 4 at ``i = 2``). Sympy issues #28744 and #29757, fixed upstream after 1.14,
the newest release. Index expressions are made of exactly such nested mods, so for a product
holding a Mod we leave the Mod unevaluated, which is always correct, and let sympy do the rest.
"""
import sympy

_sympy_eval = sympy.Mod.eval.__func__


def _guarded_eval(cls, p, q):
    if isinstance(p, sympy.Mul) and any(isinstance(f, sympy.Mod) for f in p.args):
        return None
    return _sympy_eval(cls, p, q)


if not getattr(sympy.Mod, "_ollie_guarded", False):
    sympy.Mod.eval = classmethod(_guarded_eval)
    sympy.Mod._ollie_guarded = True
