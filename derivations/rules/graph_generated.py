"""Generated rules over graph operators. Written by ``ollie rules synthesize --graph``: do not edit,
regenerate.

From every term of up to 3 operators over mm, add, sub, T, cat0, cat1 (``derivations.synthesis.graph``):
5073 terms, 1494 candidate rules, 47 kept after verification and pruning.

One rule a row: ``lhs = rhs`` and the operand sizes it is proven for (every size of
those symbols). ``ollie.capture.generated_rules`` applies each in the direction that costs less.
"""
SIZE = 3

RULES = (
    ('T(T(U)) = U', 'U: a b'),
    ('mm(add(X, X), U) = mm(X, add(U, U))', 'U: a b, X: c a'),
    ('add(mm(X, U), mm(X, W)) = mm(X, add(U, W))', 'U: a b, W: a b, X: e a'),
    ('add(mm(X, U), mm(Z, U)) = mm(add(X, Z), U)', 'U: a b, X: c a, Z: c a'),
    ('cat0(mm(X, U), mm(Z, U)) = mm(cat0(X, Z), U)', 'U: a b, X: c a, Z: e a'),
    ('cat1(mm(X, U), mm(X, W)) = mm(X, cat1(U, W))', 'U: a b, W: a d, X: e a'),
    ('mm(cat1(X, X), cat0(U, W)) = mm(X, add(U, W))', 'U: a b, W: a b, X: e a'),
    ('mm(cat1(X, Z), cat0(U, U)) = mm(add(X, Z), U)', 'U: a b, X: c a, Z: c a'),
    ('sub(mm(X, U), mm(X, W)) = mm(X, sub(U, W))', 'U: a b, W: a b, X: e a'),
    ('sub(mm(X, U), mm(Z, U)) = mm(sub(X, Z), U)', 'U: a b, X: c a, Z: c a'),
    ('T(cat0(T(U), X)) = cat1(U, T(X))', 'U: a b, X: c a'),
    ('T(cat0(X, T(U))) = cat1(T(X), U)', 'U: a b, X: c a'),
    ('T(cat1(T(X), U)) = cat0(X, T(U))', 'U: a b, X: c a'),
    ('T(cat1(U, T(X))) = cat0(T(U), X)', 'U: a b, X: c a'),
    ('T(mm(T(U), W)) = mm(T(W), U)', 'U: a b, W: a d'),
    ('T(mm(U, T(V))) = mm(V, T(U))', 'U: a b, V: c b'),
    ('add(T(U), T(W)) = T(add(U, W))', 'U: a b, W: a b'),
    ('cat0(T(U), T(W)) = T(cat1(U, W))', 'U: a b, W: a d'),
    ('cat1(T(U), T(V)) = T(cat0(U, V))', 'U: a b, V: c b'),
    ('mm(T(U), T(X)) = T(mm(X, U))', 'U: a b, X: c a'),
    ('sub(T(U), T(W)) = T(sub(U, W))', 'U: a b, W: a b'),
    ('mm(cat1(X, Y), cat0(U, V)) = add(mm(X, U), mm(Y, V))', 'U: a b, V: c b, X: e a, Y: e c'),
    ('mm(sub(Z, X), sub(U, W)) = mm(sub(X, Z), sub(W, U))', 'U: a b, W: a b, X: e a, Z: e a'),
    ('mm(sub(Z, X), sub(W, U)) = mm(sub(X, Z), sub(U, W))', 'U: a b, W: a b, X: e a, Z: e a'),
    ('cat0(add(U, W), add(V, V)) = add(cat0(U, V), cat0(W, V))', 'U: a b, V: c b, W: a b'),
    ('cat0(add(V, V), add(U, W)) = add(cat0(V, U), cat0(V, W))', 'U: a b, V: c b, W: a b'),
    ('cat1(add(X, Z), add(Y, Y)) = add(cat1(X, Y), cat1(Z, Y))', 'X: a b, Y: a d, Z: a b'),
    ('cat1(add(Y, Y), add(X, Z)) = add(cat1(Y, X), cat1(Y, Z))', 'X: a b, Y: a d, Z: a b'),
    ('cat1(cat0(U, V), cat0(W, V)) = cat0(cat1(U, W), cat1(V, V))', 'U: a b, V: c b, W: a b'),
    ('cat1(cat0(V, U), cat0(V, W)) = cat0(cat1(V, V), cat1(U, W))', 'U: a b, V: c b, W: a b'),
    ('cat1(cat0(X, Z), cat0(Y, Y)) = cat0(cat1(X, Y), cat1(Z, Y))', 'X: a b, Y: a d, Z: a b'),
    ('cat1(cat0(Y, Y), cat0(X, Z)) = cat0(cat1(Y, X), cat1(Y, Z))', 'X: a b, Y: a d, Z: a b'),
    ('mm(mm(T(X), Y), V) = mm(T(X), mm(Y, V))', 'V: a b, X: c d, Y: c a'),
    ('mm(mm(V, T(U)), W) = mm(V, mm(T(U), W))', 'U: a b, V: c b, W: a f'),
    ('mm(mm(X, U), T(V)) = mm(X, mm(U, T(V)))', 'U: a b, V: c b, X: e a'),
    ('add(cat0(U, W), cat0(W, U)) = add(cat0(U, U), cat0(W, W))', 'U: a b, W: a b'),
    ('add(cat1(U, W), cat1(W, U)) = add(cat1(U, U), cat1(W, W))', 'U: a b, W: a b'),
    ('cat0(add(U, W), add(U, W)) = add(cat0(U, U), cat0(W, W))', 'U: a b, W: a b'),
    ('cat1(add(U, W), add(U, W)) = add(cat1(U, U), cat1(W, W))', 'U: a b, W: a b'),
    ('cat1(cat0(U, W), cat0(W, U)) = cat0(cat1(U, W), cat1(W, U))', 'U: a b, W: a b'),
    ('mm(T(add(U, U)), W) = mm(T(U), add(W, W))', 'U: a b, W: a d'),
    ('mm(add(X, add(X, X)), U) = mm(X, add(U, add(U, U)))', 'U: a b, X: c a'),
    ('mm(sub(X, add(X, X)), U) = mm(X, sub(U, add(U, U)))', 'U: a b, X: c a'),
    ('sub(cat0(U, U), cat0(W, W)) = cat0(sub(U, W), sub(U, W))', 'U: a b, W: a b'),
    ('sub(cat0(U, W), cat0(W, U)) = cat0(sub(U, W), sub(W, U))', 'U: a b, W: a b'),
    ('sub(cat1(U, U), cat1(W, W)) = cat1(sub(U, W), sub(U, W))', 'U: a b, W: a b'),
    ('sub(cat1(U, W), cat1(W, U)) = cat1(sub(U, W), sub(W, U))', 'U: a b, W: a b'),
)
