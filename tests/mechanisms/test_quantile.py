"""The quantile mechanism: the pmf from its definition, exact integer scores, a uniform point inside the
bin, accuracy on a payroll-sized table (privacy over neighbouring histograms and the sampler: tests/audit)."""

from __future__ import annotations

import itertools

import numpy as np
from references import reference_pmf
from scipy import stats

from beam_expmech.mechanisms.quantile import private_quantile, quantile_probabilities, quantile_scores


def test_pmf_matches_the_definition_with_unequal_and_zero_widths():
    histogram, edges = [3, 0, 5, 2, 7], [0.0, 0.5, 0.5, 2.0, 2.25, 4.0]
    for q in (0.1, 0.5, 0.75):
        got = quantile_probabilities(histogram, edges, q, epsilon=0.8, max_rows=2)
        np.testing.assert_allclose(got, reference_pmf(histogram, edges, q, 0.8, 2), rtol=1e-12)
        assert got[1] == 0.0  # zero width: never chosen, no NaN


def test_scores_are_exact_integers_and_sensitivity_is_never_rounded_down():
    scores, sensitivity = quantile_scores(np.array([4, 1, 0, 5]), 0.1, max_rows=3)
    a, b = (0.1).as_integer_ratio()
    ranks = [0, 4, 5, 5, 10]
    expected = [-max(0, b * low - a * 10, a * 10 - b * high) for low, high in itertools.pairwise(ranks)]
    assert [int(s) for s in scores] == expected
    assert sensitivity >= 3 * (b - a)


def test_point_inside_the_chosen_bin_is_uniform():
    histogram, edges = np.array([0, 1000, 0]), np.array([0.0, 10.0, 13.5, 20.0])
    rng = np.random.default_rng(32)
    points = np.array([private_quantile(histogram, edges, 0.5, epsilon=1e4, rng=rng) for _ in range(4_000)])
    assert ((points >= 10.0) & (points < 13.5)).all()
    assert stats.kstest((points - 10.0) / 3.5, "uniform").pvalue > 1e-6


def test_accuracy_on_a_payroll_sized_table():
    """135,727 pay codes in 0..32 (the size and the skew of a city payroll: most pay low, a long tail)."""
    rng = np.random.default_rng(33)
    pay = np.minimum(rng.lognormal(mean=2.3, sigma=0.6, size=135_727), 32.99).astype(int)
    gross = np.clip(pay + rng.integers(-2, 3, pay.size), 0, 32)  # a second, correlated column
    for values in (pay, gross):
        edges = np.linspace(0, 33, 4 * 33 + 1)  # a quarter-code grid
        histogram = np.histogram(values, bins=edges)[0]
        for q in (0.25, 0.5, 0.75):
            truth = np.quantile(values, q)
            estimates = [private_quantile(histogram, edges, q, epsilon=1.0, rng=rng) for _ in range(20)]
            # 135,727 rows at epsilon 1: the rank error is a few dozen rows, well inside one code.
            assert all(abs(e - truth) <= 1.0 for e in estimates), (q, truth, estimates)
