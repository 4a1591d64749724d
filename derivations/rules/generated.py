"""Generated rules. Written by ``ollie rules synthesize``: do not edit, regenerate.

Synthesized (:mod:`derivations.synthesis`) from every term of up to 5 nodes over add, sub,
mul, neg, scale, sum, transpose, broadcast, diag, exp, log: 13266 terms enumerated, 6498
candidate pairs (1928 up to renaming operands), 961 verified, 35 kept after pruning (29 new,
6 derived by the hand-written algebra).

One rule a line: ``lhs = rhs`` (used in both directions; ``if a > 0``: only where the
e-graph proves ``a`` positive), its tag, and its math. ``derivations.rules.synthesized``
loads the new pointwise ones as the egglog ruleset ``generated``.
"""
SIZE = 5
OPS = ('add', 'sub', 'mul', 'neg', 'scale', 'sum', 'transpose', 'broadcast', 'diag', 'exp', 'log')
GENERATOR = '110fb62aa74375a7'   # digest of derivations/synthesis/*.py
RULES_DIGEST = '38c13e23bb8af5f7'

RULES = (
    ('--a = a', 'new'),                                      # −−a = a
    ('a * 1 = a', 'new'),                                    # a · 1 = a
    ('a + 0 = a', 'new'),                                    # a + 0 = a
    ('log(exp(a)) = a', 'new'),                              # log(exp(a)) = a
    ('exp(log(a)) = a  if a > 0', 'new'),                    # exp(log(a)) = a  (a > 0)
    ('-sum(A) = sum(-A)', 'new'),                            # −Σ_k A[i,k] = Σ_k −A[i,k]
    ('-sum(x) = sum(-x)', 'new'),                            # −Σ_k x[k] = Σ_k −x[k]
    ('a * 0 = a - a', 'new'),                                # a · 0 = a − a
    ('a * 2 = a + a', 'new'),                                # a · 2 = a + a
    ('1 + (a - 1) = a', 'new'),                              # 1 + (a − 1) = a
    ('2 + (a - 2) = a', 'new'),                              # 2 + (a − 2) = a
    ('a + a - a = a', 'new'),                                # a + a − a = a
    ('-(a - b) = b - a', 'new'),                             # −(a − b) = b − a
    ('0 * exp(a) = a * 0', 'new'),                           # 0 · exp(a) = a · 0
    ('a + -b = a - b', 'new'),                               # a + −b = a − b
    ('sum(sum(T(A))) = sum(sum(A))', 'new'),                 # Σ_k Σ_l A[l,k] = Σ_k Σ_l A[k,l]
    ('-(a * b) = a * -b', 'new'),                            # −(a · b) = a · −b
    ('a * sum(A) = sum(a * A)', 'hand-written'),             # a · Σ_k A[i,k] = Σ_k (a · A[i,k])
    ('a * sum(x) = sum(a * x)', 'hand-written'),             # a · Σ_k x[k] = Σ_k (a · x[k])
    ('1 + a * 0 = exp(a * 0)', 'new'),                       # 1 + a · 0 = exp(a · 0)
    ('T(bcast(sum(bcast(x)))) = bcast(sum(bcast(x)))', 'new'),  # Σ_k x[k] = Σ_k x[k]
    ('a - exp(log(a)) = 0 * log(a)', 'new'),                 # a − exp(log(a)) = 0 · log(a)
    ('exp(a) * exp(b) = exp(a + b)', 'new'),                 # exp(a) · exp(b) = exp(a + b)
    ('log(a * exp(b)) = b + log(a)', 'new'),                 # log(a · exp(b)) = b + log(a)
    ('sum(A) + sum(B) = sum(A + B)', 'hand-written'),        # Σ_k A[i,k] + Σ_l B[i,l] = Σ_k (A[i,k] + B[i,k])
    ('sum(bcast(sum(T(A)))) = sum(bcast(sum(A)))', 'new'),   # Σ_k Σ_l A[l,k] = Σ_k Σ_l A[k,l]
    ('sum(x) + sum(y) = sum(x + y)', 'hand-written'),        # Σ_k x[k] + Σ_l y[l] = Σ_k (x[k] + y[k])
    ('x * sum(bcast(y)) = x * sum(y)', 'new'),               # x[i] · Σ_k y[k] = x[i] · Σ_k y[k]
    ('x + sum(bcast(y)) = x + sum(y)', 'new'),               # x[i] + Σ_k y[k] = x[i] + Σ_k y[k]
    ('2 * exp(log(a)) = exp(log(a + a))', 'new'),            # 2 · exp(log(a)) = exp(log(a + a))
    ('a * (b * c) = b * (a * c)', 'hand-written'),           # a · (b · c) = b · (a · c)
    ('a * (b + 1) = a + a * b', 'new'),                      # a · (b + 1) = a + a · b
    ('a * exp(log(a)) = exp(2 * log(a))', 'new'),            # a · exp(log(a)) = exp(2 · log(a))
    ('a + (b + c) = b + (a + c)', 'hand-written'),           # a + (b + c) = b + (a + c)
    ('a + exp(log(a)) = exp(log(a + a))', 'new'),            # a + exp(log(a)) = exp(log(a + a))
)
