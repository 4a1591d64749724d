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
    assert [r.decision.text for r in report.regions] == ["adopted"]


def test_the_rounding_error_is_resampled_on_inputs_moved_one_ulp():
    from ollie.numerics import resampled_errors
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4096, generator=g)
    errors = resampled_errors(lambda convert: convert(x).sum(), count=3)
    assert len(errors) == 3 and all(0 < e < 1e-4 for e in errors)  # rounding, not a mistake
    assert len(set(errors)) == 3  # each sample rounds elsewhere
    again = resampled_errors(lambda convert: convert(x).sum(), count=3)
    assert errors == again  # the same samples each time: a decision can be reproduced
    assert resampled_errors(lambda convert: torch.ones(2, dtype=torch.float64) @
                            convert(torch.ones(2))) == []  # float64 meets float32: no samples


def test_one_run_whose_error_was_small_by_chance_does_not_set_the_allowance():
    exact = torch.linspace(-0.5, 0.5, 11, dtype=torch.float64)
    expected = (exact + 1e-6).float()  # this run rounded well; others round by 1e-4
    reordered = (exact - 3e-4).float()
    assert max_relative_error(reordered, expected) > allowed_error(expected, exact)
    assert max_relative_error(reordered, expected) <= allowed_error(expected, exact, [1e-4])
    assert allowed_error(expected, exact, [1.0]) == MAX_SLACK * tolerance(torch.float32)


def test_a_cancelling_sum_read_through_tanh_has_an_allowance_from_its_resampled_error():
    """tanh of sums of ±hundreds shows their rounding only where a sum lies near zero: one
    run's error rests on a few entries. Resampled, the allowance admits the sum moved inward
    (rows summed first) in every draw, and still refuses a sum that drops one row."""
    from ollie.numerics import resampled_errors
    for seed in range(6):
        g = torch.Generator().manual_seed(seed)
        x, w = torch.randn(512, 512, generator=g), torch.randn(512, 512, generator=g)
        expected = cancelling_sum(x, w)
        exact = cancelling_sum(x.double(), w.double())
        resampled = resampled_errors(lambda convert: cancelling_sum(convert(x), convert(w)))
        allowed = allowed_error(expected, exact, resampled)
        assert max_relative_error(torch.tanh(x.sum(0) @ w), expected) <= allowed
        assert max_relative_error(torch.tanh(x[1:].sum(0) @ w), expected) > allowed
