"""JointExp: the pmf from its definition, epsilon-DP over neighbouring histograms, and the exact
sampler (float-DP proposal, exact acceptance) against the pmf."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from conftest import assert_follows

from beam_expmech.mechanisms.joint_quantiles import joint_probabilities, joint_problem, joint_quantiles, sample_bins
from beam_expmech.mechanisms.randomness import random_source


def definition_pmf(histogram, edges, qs, epsilon, max_rows=1):
    """Independent of the library: enumerate bin sequences, score with floats, volume with k!."""
    n, widths = sum(histogram), np.diff(edges)
    below = [sum(histogram[: b + 1]) for b in range(len(histogram))]  # points sit at left edges
    targets = [0, *qs, 1]
    weights = {}
    for bins in itertools.combinations_with_replacement(range(len(histogram)), len(qs)):
        ranks = [0] + [below[b] for b in bins] + [n]
        u = -sum(abs(ranks[j] - ranks[j - 1] - (targets[j] - targets[j - 1]) * n) for j in range(1, len(ranks)))
        volume = math.prod(widths[b] for b in bins) / math.prod(
            math.factorial(len(list(g))) for _, g in itertools.groupby(bins)
        )
        weights[bins] = volume * math.exp(epsilon * u / (2 * 2 * max_rows))
    total = sum(weights.values())
    return {bins: w / total for bins, w in weights.items()}


def test_pmf_matches_the_definition():
    histogram, edges = [3, 1, 4, 0, 2], [0.0, 1.0, 1.5, 3.0, 3.25, 5.0]
    for qs, epsilon, k in [([0.5], 1.0, 1), ([0.25, 0.75], 2.0, 1), ([0.1, 0.5, 0.9], 1.5, 2)]:
        got = joint_probabilities(histogram, edges, qs, epsilon=epsilon, max_rows=k)
        want = definition_pmf(histogram, edges, qs, epsilon, k)
        assert set(got) == set(want)
        for bins in want:
            assert got[bins] == pytest.approx(want[bins], rel=1e-10)


@pytest.mark.parametrize("max_rows", [1, 2])
def test_epsilon_dp_over_neighbouring_histograms(max_rows):
    epsilon, edges, qs, worst = 1.0, np.linspace(0, 3, 4), [0.3, 0.6], 0.0
    for histogram in itertools.product(range(3), repeat=3):
        p = joint_probabilities(np.array(histogram), edges, qs, epsilon=epsilon, max_rows=max_rows)
        for moved in itertools.product(range(-max_rows, max_rows + 1), repeat=3):
            same_sign = all(m >= 0 for m in moved) or all(m <= 0 for m in moved)
            other = np.array(histogram) + np.array(moved)
            if not same_sign or sum(map(abs, moved)) > max_rows or (other < 0).any():
                continue
            q = joint_probabilities(other, edges, qs, epsilon=epsilon, max_rows=max_rows)
            worst = max(worst, max(abs(math.log(p[b] / q[b])) for b in p))
    assert worst <= epsilon * (1 + 1e-9)
    assert worst > 0.3 * epsilon


@pytest.mark.parametrize(
    "histogram,qs",
    [([3, 1, 4, 0, 2], [0.25, 0.5, 0.75]), ([0, 30, 0], [0.25, 0.5, 0.75])],  # the second: runs in one bin
)
def test_sampler_follows_the_pmf(histogram, qs):
    edges = np.linspace(0, len(histogram), len(histogram) + 1)
    problem = joint_problem(np.array(histogram), edges, qs, epsilon=2.0, max_rows=1)
    source = random_source(51)
    draws = [tuple(sample_bins(problem, len(qs), source)) for _ in range(6000)]
    assert_follows(draws, joint_probabilities(np.array(histogram), edges, qs, epsilon=2.0))


def test_estimates_are_sorted_inside_the_range_and_accurate():
    rng = np.random.default_rng(52)
    values = rng.lognormal(4, 0.8, 200_000)
    edges = np.linspace(0, 1024, 1025)
    histogram = np.histogram(np.clip(values, 0, 1023.9), bins=edges)[0]
    qs = [i / 10 for i in range(1, 10)]
    estimates = joint_quantiles(histogram, edges, qs, epsilon=1.0, rng=53)
    assert estimates == sorted(estimates) and estimates[0] >= 0 and estimates[-1] <= 1024
    np.testing.assert_allclose(estimates, np.quantile(values, qs), atol=2.5)


def test_bad_arguments():
    edges = np.linspace(0, 3, 4)
    with pytest.raises(ValueError, match="distinct and increasing"):
        joint_quantiles(np.array([1, 2, 3]), edges, [0.5, 0.2], epsilon=1)
    with pytest.raises(ValueError, match="at most 4096 bins"):
        joint_quantiles(np.ones(5000, int), np.linspace(0, 1, 5001), [0.5], epsilon=1)
    with pytest.raises(ValueError, match="epsilon"):
        joint_quantiles(np.array([1, 2, 3]), edges, [0.5], epsilon=0)
