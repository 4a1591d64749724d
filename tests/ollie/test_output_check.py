"""The check behind the numerics contract: a reordered computation may differ from eager by a
few times eager's own rounding error, never by an algebraic mistake."""
import torch

import ollie
from ollie.numerics import MAX_SLACK, allowed_error, max_relative_error, tolerance


def cancelling_sum(x, w):
    return torch.tanh((x @ w).sum(0))  # sums of ±hundreds read through tanh near zero


def test_the_allowance_grows_with_the_originals_own_rounding_error():
    exact = torch.linspace(-0.5, 0.5, 11, dtype=torch.float64)
    expected = (exact + 1e-4).float()   # eager's own rounding error: 1e-4
    reordered = (exact - 2e-4).float()  # another order's: 2e-4, so 3e-4 from eager
    assert tolerance(torch.float32) < max_relative_error(reordered, expected) \
        <= allowed_error(expected, exact)


def test_an_order_as_accurate_as_allowed_on_the_other_side_of_the_exact_value_is_admitted():
    from ollie.numerics import REASSOCIATION_SLACK
    exact = torch.linspace(-0.5, 0.5, 11, dtype=torch.float64)
    expected = (exact + 1e-4).float()
    reordered = (exact - REASSOCIATION_SLACK * 0.99e-4).float()  # allowed off exact, not eager
    assert max_relative_error(reordered, expected) > REASSOCIATION_SLACK * 1e-4
    assert max_relative_error(reordered, expected) <= allowed_error(expected, exact)


def test_sample_inputs_do_not_depend_on_the_programs_random_state():
    from ollie.capture.samples import sample_like
    fakes = [torch.empty(3, 4), torch.empty(5, dtype=torch.bool)]
    torch.manual_seed(1)
    first = sample_like(fakes)
    torch.manual_seed(2)
    again = sample_like(fakes)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not torch.equal(first[0][0], first[0][1])  # yet random within a draw


def test_the_allowance_never_admits_an_algebraic_mistake():
    expected = torch.randn(100)
    exact = expected.double() + 1.0  # an original as wrong as it gets
    assert allowed_error(expected, exact) == MAX_SLACK * tolerance(torch.float32)
    assert max_relative_error(expected * 1.1, expected) > allowed_error(expected, exact)
    assert allowed_error(expected, None) == tolerance(torch.float32)
    assert allowed_error(expected.double(), exact) == tolerance(torch.float64)


def test_a_sum_moved_inward_before_tanh_is_adopted():
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(256, 512, generator=g), torch.randn(512, 512, generator=g)
    f = ollie.optimize(cancelling_sum, budget_s=1.0, cache=False)
    with torch.no_grad():
        assert max_relative_error(f(x, w), cancelling_sum(x, w)) <= 1e-3
    (report,) = f.backend.reports
    assert [r.decision for r in report.regions] == ["adopted"]
