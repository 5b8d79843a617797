"""AIM: the budget it spends, utility on NLTCS, the model cap, bad arguments (its selection: tests/audit)."""

from __future__ import annotations

import math
import tracemalloc
from types import SimpleNamespace

import numpy as np
import pytest
from public_tables import load, marginals

from beam_expmech.accounting import PrivacyBudget, epsilon_to_zcdp
from beam_expmech.mechanisms.randomness import random_source
from beam_expmech.synth.aim import (
    FIRST_ONE_WAY_SHARE,
    MIN_FIT_STEPS,
    NOISY_ONE_WAYS,
    ONE_WAY_MEASUREMENTS,
    ONE_WAY_SHARE,
    SMALL_DATA_ONE_WAY_SHARE,
    VERY_NOISY_ONE_WAYS,
    _AimRun,
    aim,
    check_parameters,
    one_way_error,
    one_way_share_for,
    one_way_shares,
    scores,
)
from beam_expmech.synth.baselines import independent_marginals
from beam_expmech.synth.compression import CompressedModel
from beam_expmech.synth.graphical_model import GraphicalModel, Measurement


def workload_error(true, model: GraphicalModel) -> float:
    return float(np.mean([np.abs(c / c.sum() - model.project(m) / model.total).sum() for m, c in true.items()]))


@pytest.mark.parametrize("max_rows", [1, 3])
def test_spends_all_of_rho_and_never_more(max_rows):
    batch, domain = load("nltcs", 6)
    result = aim(marginals(batch, domain, 3), domain, rho=0.05, max_rows=max_rows, rng=91)
    spent = math.fsum(r.rho for r in result.releases)
    assert 0.999 * 0.05 <= spent <= 0.05
    assert all(r.epsilon is None or r.label.startswith("AIM select") for r in result.releases)
    assert result.measured[: len(domain)] == [(c,) for c in domain]  # the 1-way marginals first
    assert all(len(m) <= 3 for m in result.measured)
    budget = PrivacyBudget(epsilon=1.0, delta=1e-9)  # what the pipeline charges: rho of (1, 1e-9)
    rho = epsilon_to_zcdp(1.0, delta=1e-9)
    for release in aim(marginals(batch, domain, 2), domain, rho=rho, rng=92).releases:
        budget.charge(release)
    assert budget.spent() <= 1.0


def test_beats_independent_marginals_and_stays_close_to_the_data():
    batch, domain = load("nltcs", 10)
    true = marginals(batch, domain, 3)
    rho = epsilon_to_zcdp(1.0, delta=1e-9)
    result = aim(true, domain, rho=rho, rng=94)
    one_way = {m[0]: counts for m, counts in marginals(batch, domain, 1).items()}
    baseline, _ = independent_marginals(one_way, epsilon=1.0, rng=95)
    baseline_error = float(np.mean([np.abs(c / c.sum() - baseline.marginal(m)).sum() for m, c in true.items()]))
    assert workload_error(true, result.model) < 0.1 * baseline_error
    assert abs(result.rows - batch.num_rows) < 0.02 * batch.num_rows


@pytest.mark.parametrize("rho", [1.0, 0.005])  # large data (1-ways measured once), and small (twice)
def test_the_model_never_outgrows_its_cap_and_the_run_holds_less_than_it_states(rho):
    batch, domain = load("titanic", 6)  # Age has 91 codes
    workload = marginals(batch, domain, 3)
    stated = check_parameters(domain, list(workload), max_cells=2000)
    tracemalloc.start()
    try:
        result = aim(workload, domain, rho=rho, max_cells=2000, rng=96)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    fitted = result.model.model if isinstance(result.model, CompressedModel) else result.model  # rare codes merged
    assert sum(np.prod(p.shape) for p in fitted.potentials) <= 2000
    assert peak <= stated


def test_each_refit_takes_at_most_the_work_bound_over_the_model_cells(monkeypatch):
    batch, domain = load("nltcs", 8)
    true = marginals(batch, domain, 3)
    steps = []
    fit = GraphicalModel.fit

    def recording(self, measurements, *, iterations, tolerance):
        steps.append((iterations, self.cells))
        return fit(self, measurements, iterations=iterations, tolerance=tolerance)

    monkeypatch.setattr(GraphicalModel, "fit", recording)
    aim(true, domain, rho=1.0, rng=5, fit_work=3000, final_fit_work=6000)
    _, *rounds, (last, last_cells) = steps  # the first model's fit: 1-ways, never bounded
    assert [s for s, _ in rounds] == [min(250, max(MIN_FIT_STEPS, 3000 // cells)) for _, cells in rounds]
    assert any(MIN_FIT_STEPS < s < 250 for s, _ in rounds)  # the bound bit, above its floor
    assert last == min(2000, max(MIN_FIT_STEPS, 6000 // last_cells)) < 2000
    steps.clear()
    aim(true, domain, rho=1.0, rng=5, fit_work=np.float64(1), final_fit_work=1)
    assert {s for s, _ in steps[1:]} == {MIN_FIT_STEPS}  # the floor
    for lifted in [math.inf, 10**400]:  # an int beyond any float: no bound either
        steps.clear()
        aim(true, domain, rho=1.0, rng=5, fit_work=lifted, final_fit_work=np.int64(10**18))
        assert {s for s, _ in steps[1:-1]} == {250} and steps[-1][0] == 2000  # every refit all its iterations


def test_one_way_marginals_over_the_cap_are_refused_before_any_count_is_read():
    with pytest.raises(ValueError, match="AIM: the 1-way marginals alone have 2,000,001 cells, over the limit"):
        check_parameters({"a": 2_000_000, "b": 1}, [("a", "b")])


@pytest.mark.parametrize(
    "change,message",
    [
        ({"rho": 0}, "rho"),
        ({"rho": float("nan")}, "rho"),
        ({"max_rows": 0}, "max_rows"),
        ({"rounds": -1}, "rounds"),
        ({"tolerance": -1.0}, "tolerance"),
        ({"final_tolerance": float("nan")}, "final_tolerance"),
        ({"tolerance": True}, "tolerance must be a real number"),  # review 8
        ({"fit_work": 0}, "fit_work must be > 0"),
        ({"final_fit_work": float("nan")}, "final_fit_work must be > 0"),
        ({"fit_work": True}, "fit_work must be a real number"),
        ({"fit_work": "3000"}, "fit_work must be a real number"),
        ({"iterations": 250.0}, "iterations must be an integer"),
        ({"final_iterations": 0}, "final_iterations must be an integer >= 1"),
        ({"smoothing": -0.5}, "smoothing"),
        ({"smoothing": float("inf")}, "smoothing"),
        ({"ordered": ["bathing", "nonexistent"]}, "ordered column 'nonexistent' is not in the domain"),
        ({"ordered": "bathing"}, "ordered must be a collection of column names"),
    ],
)
def test_bad_arguments(change, message):
    batch, domain = load("nltcs", 3)
    with pytest.raises(ValueError, match=message):
        aim(marginals(batch, domain, 2), domain, **{"rho": 0.1, **change})
    with pytest.raises(ValueError, match="no marginal"):
        aim({}, domain, rho=0.1)
    with pytest.raises(ValueError, match="does not match"):
        aim({("bathing",): np.zeros(3, int)}, domain, rho=0.1)


class _BrokenModel:
    """A model whose projections are not finite (what review 8 found a subnormal separator could make)."""

    def project(self, columns):
        return np.array([np.nan, np.inf, -np.inf, 5.0])


def test_a_model_that_is_not_finite_leaves_the_scores_within_their_sensitivity():
    """Review 8: NaN cast to INT64_MIN and wrapped the error, so two neighbouring truths' scores were 2^64
    apart under a sensitivity of 2^20. The public projection is made finite first (post-processing)."""
    candidates, weights = [("a", "b")], {("a", "b"): 1}
    truth = {("a", "b"): np.array([0, 1, 2, 3], np.int64)}
    neighbour = {("a", "b"): np.array([1, 1, 2, 3], np.int64)}  # one more row
    before, sensitivity = scores(candidates, weights, truth, _BrokenModel(), sigma=1.0, max_rows=1)
    after, _ = scores(candidates, weights, neighbour, _BrokenModel(), sigma=1.0, max_rows=1)
    assert abs(after[0] - before[0]) <= sensitivity


@pytest.mark.parametrize(  # 1,304 rows: one_way_error 1.6, 2.2 (K = 3), 0.9, 0.51, 0.49 (K = 3) and 0.07
    "rho, max_rows, share",
    [(0.002, 1, "top"), (0.01, 3, "top"), (0.0064, 1, "ramp"), (0.02, 1, "bottom"), (0.2, 3, "bottom"), (1.0, 1, None)],
)
def test_the_one_ways_are_measured_again_the_noisier_they_would_be(rho, max_rows, share):
    batch, domain = load("titanic", 5)
    result = aim(marginals(batch, domain, 2), domain, rho=rho, max_rows=max_rows, rng=97)
    d, one_ways = len(domain), [(c,) for c in domain]
    measured = 1 if share is None else 2
    assert result.measured[: measured * d] == one_ways * measured
    assert result.measured[measured * d : (measured + 1) * d] != one_ways  # the rounds follow
    first = math.fsum(r.rho for r in result.releases[:d])
    assert first == pytest.approx(FIRST_ONE_WAY_SHARE * rho, rel=1e-9)
    total = math.fsum(r.rho for r in result.releases[: measured * d]) / rho
    if share == "top":
        assert total == pytest.approx(SMALL_DATA_ONE_WAY_SHARE, rel=1e-9)
    elif share == "bottom":
        assert total == pytest.approx(ONE_WAY_SHARE, rel=1e-9)
    elif share == "ramp":
        assert ONE_WAY_SHARE * (1 + 1e-6) < total < SMALL_DATA_ONE_WAY_SHARE * (1 - 1e-6)
    assert math.fsum(r.rho for r in result.releases) <= rho


def test_the_one_way_share_rises_with_the_error_linearly_in_its_log():
    low, high = VERY_NOISY_ONE_WAYS
    assert one_way_share_for(NOISY_ONE_WAYS) == ONE_WAY_SHARE
    assert one_way_share_for(low) == ONE_WAY_SHARE
    assert one_way_share_for(high) == pytest.approx(SMALL_DATA_ONE_WAY_SHARE)
    assert one_way_share_for(100.0) == SMALL_DATA_ONE_WAY_SHARE
    middle = (ONE_WAY_SHARE + SMALL_DATA_ONE_WAY_SHARE) / 2
    assert one_way_share_for(math.sqrt(low * high)) == pytest.approx(middle)
    quarter = (3 * ONE_WAY_SHARE + SMALL_DATA_ONE_WAY_SHARE) / 4  # a quarter of the way up: linear in the log
    assert one_way_share_for(low**0.75 * high**0.25) == pytest.approx(quarter)
    errors = np.geomspace(NOISY_ONE_WAYS, 10.0, 200)
    assert np.all(np.diff([one_way_share_for(e) for e in errors]) >= 0)


def test_a_given_one_way_share_is_spent_once():
    batch, domain = load("titanic", 5)
    result = aim(marginals(batch, domain, 2), domain, rho=0.01, one_way_share=0.4, rng=98)
    d = len(domain)
    assert result.measured[d : 2 * d] != [(c,) for c in domain]  # the rounds follow (they may pick a 1-way)
    assert math.fsum(r.rho for r in result.releases[:d]) == pytest.approx(0.004, rel=1e-9)


@pytest.mark.parametrize("share", [0, 1, 0.995, 1 - 2**-53, 1.5, -0.2, float("nan"), True])
def test_a_one_way_share_outside_0_1_is_refused(share):
    batch, domain = load("titanic", 4)
    with pytest.raises(ValueError, match="one_way_share"):
        aim(marginals(batch, domain, 2), domain, rho=0.1, one_way_share=share)


def test_the_small_data_rule_reads_the_noisy_measurements_never_the_true_counts():
    domain, rho = {"a": 2}, 1e-4

    def shares(noisy: float, true: int) -> list[float]:
        measured = [Measurement(("a",), np.array([noisy / 2, noisy / 2]), 3.0)]
        run = SimpleNamespace(domain=domain, measurements=measured, max_rows=1, truth={("a",): np.array([true, 0])})
        return list(one_way_shares(run, rho=rho))

    def rows(error: float) -> float:  # where one_way_error is error: it falls as 1 / rows
        return one_way_error(domain, rows=1.0, rho=rho) / error

    first, low, high = FIRST_ONE_WAY_SHARE, VERY_NOISY_ONE_WAYS[0], VERY_NOISY_ONE_WAYS[1]
    bottom = pytest.approx(ONE_WAY_SHARE - first)
    assert shares(noisy=0.99 * rows(high), true=10**6) == [first, pytest.approx(SMALL_DATA_ONE_WAY_SHARE - first)]
    middle = math.sqrt(low * high)
    ramp = pytest.approx((ONE_WAY_SHARE + SMALL_DATA_ONE_WAY_SHARE) / 2 - first)
    assert shares(noisy=rows(middle), true=1) == [first, ramp]
    assert shares(noisy=rows(middle), true=10**6) == [first, ramp]
    assert shares(noisy=1.01 * rows(low), true=1) == [first, bottom]
    assert shares(noisy=0.99 * rows(NOISY_ONE_WAYS), true=10**6) == [first, bottom]
    assert shares(noisy=1.01 * rows(NOISY_ONE_WAYS), true=1) == [first]


@pytest.mark.parametrize("rows", [1.0, 1e-3, 0.5, 3e5, 1e300])  # 1-way errors from tiny to overflowing
def test_the_one_ways_are_measured_at_most_as_often_as_check_parameters_counts(rows):
    domain = {"a": 2, "b": 90}
    run = SimpleNamespace(domain=domain, measurements=[Measurement(("a",), np.array([rows, 0.0]), 1.0)], max_rows=1)
    shares = list(one_way_shares(run, rho=1e-6))
    assert 1 <= len(shares) <= ONE_WAY_MEASUREMENTS
    assert all(share > 0 for share in shares) and sum(shares) <= SMALL_DATA_ONE_WAY_SHARE + 1e-12


@pytest.mark.parametrize("rows, rho", [(0.0, 1.0), (-5.0, 1.0), (10.0, 0.0), (float("nan"), 1.0)])
def test_one_way_error_refuses_rows_or_rho_that_are_not_positive(rows, rho):
    with pytest.raises(ValueError):
        one_way_error({"a": 2}, rows=rows, rho=rho)


def test_the_first_model_fits_both_measurements_of_each_column():
    """Its 1-way marginals are the inverse-variance weighted means of both measurements (review 9: fitting
    only the second passed every test)."""
    domain = {"a": 3, "b": 2}
    truth = {("a",): np.array([500, 300, 200]), ("b",): np.array([600, 400])}
    run = _AimRun(domain, 1, random_source(99), {("a",): 1, ("b",): 1}, truth)
    run.measure_one_ways(0.001)
    run.measure_one_ways(0.01)
    run.fit_first_model(iterations=2000, tolerance=0.0)
    total = run.model.total
    for c in domain:
        first, second = (m for m in run.measurements if m.columns == (c,))
        w1, w2 = first.sigma**-2, second.sigma**-2
        mean = (w1 * first.values + w2 * second.values) / (w1 + w2)
        np.testing.assert_allclose(run.model.project((c,)), mean - (mean.sum() - total) / mean.size, atol=0.5)


def test_rare_codes_are_merged_from_the_noisy_one_ways_never_the_true_counts():
    """The map reads the released measurements; the true counts only move onto it."""
    domain = {"a": 4, "b": 2}
    truth = {
        ("a",): np.array([1000, 0, 0, 0]),
        ("b",): np.array([600, 400]),
        ("a", "b"): np.array([[600, 400]] + [[0, 0]] * 3),
    }
    run = _AimRun(domain, 1, random_source(100), {r: 1 for r in truth}, truth)
    noisy = {("a",): [5.0, 900.0, 3.0, 80.0], ("b",): [500.0, 500.0]}  # not the truth: codes 0 and 2 rare here
    run.measurements = [Measurement(c, np.array(v), 10.0) for c, v in noisy.items()]
    run.compress(3.0, frozenset({"a"}), 0.5)
    np.testing.assert_array_equal(run.compression.codes["a"], [2, 0, 2, 1])
    # a's rare codes 0 and 2 spread by their noisy counts (5, 3) blended with their neighbours' (900; 900 and 80)
    smoothed = np.array([(5 + 450) / 1.5, (3 + 490) / 2])
    np.testing.assert_allclose(run.compression.within["a"][[0, 2]], smoothed / smoothed.sum(), rtol=1e-9)
    assert run.domain == {"a": 3, "b": 2}
    np.testing.assert_array_equal(run.truth[("a",)], [0, 0, 1000])  # the true counts, moved onto the map
    np.testing.assert_array_equal(run.truth[("a", "b")], [[0, 0], [0, 0], [600, 400]])
    np.testing.assert_array_equal(run.measurements[0].values, [900.0, 80.0, 8.0])


@pytest.mark.parametrize("max_rows", [1, 2])
def test_with_rare_codes_merged_the_release_answers_on_the_original_codes(max_rows):
    batch, domain = load("titanic", 5)  # Age has 91 codes, most of them rare at this rho
    true = marginals(batch, domain, 3)
    result = aim(true, domain, rho=0.01, max_rows=max_rows, rng=101)
    assert isinstance(result.model, CompressedModel)
    assert any(result.model.compression.domain[c] < size for c, size in domain.items())
    assert math.fsum(r.rho for r in result.releases) <= 0.01
    for columns in [("Age",), ("Pclass", "Age", "Sex")]:
        assert result.model.project(columns).shape == tuple(domain[c] for c in columns)
    rows = result.model.sample(500, random_source(102))
    assert all(rows[c].min() >= 0 and rows[c].max() < domain[c] for c in domain)
    plain = aim(true, domain, rho=0.01, max_rows=max_rows, rng=101, rare=None)
    assert isinstance(plain.model, GraphicalModel)
    with pytest.raises(ValueError, match="rare"):
        aim(true, domain, rho=0.01, rare=-1.0)


def test_ordered_given_as_an_iterator_is_read_once_and_used():
    batch, domain = load("titanic", 5)
    column = max(domain, key=domain.get)  # the widest: its rare codes merge at this rho
    true = marginals(batch, domain, 2)
    as_list = aim(true, domain, rho=0.01, ordered=[column], smoothing=4.0, rng=5).model
    as_iterator = aim(true, domain, rho=0.01, ordered=iter([column]), smoothing=4.0, rng=5).model
    unsmoothed = aim(true, domain, rho=0.01, smoothing=4.0, rng=5).model
    np.testing.assert_array_equal(as_iterator.project((column,)), as_list.project((column,)))
    assert not np.array_equal(unsmoothed.project((column,)), as_list.project((column,)))
