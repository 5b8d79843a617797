"""Audit of the quantile mechanisms: one quantile (exponential mechanism with the bin width as
base measure) and JointExp, by exact pmf over neighbouring histograms, then their samplers."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from privacy_loss import PrivacyLoss, histogram_neighbours, record_sampler

from beam_expmech.accounting import Release
from beam_expmech.mechanisms.joint_quantiles import joint_probabilities, joint_problem, sample_bins
from beam_expmech.mechanisms.quantile import private_quantile, quantile_probabilities
from beam_expmech.mechanisms.randomness import random_source


@pytest.mark.parametrize("q,max_rows", [(0.5, 1), (0.2, 1), (0.9, 2)])
def test_quantile_pmf(audit, q, max_rows):
    epsilon, edges = 1.0, np.array([0.0, 0.5, 2.0, 2.25, 4.0])  # unequal widths: the base measure matters
    loss = PrivacyLoss()
    for histogram in itertools.product(range(3), repeat=4):
        p = quantile_probabilities(np.array(histogram), edges, q, epsilon=epsilon, max_rows=max_rows)
        for other in histogram_neighbours(histogram, max_rows):
            loss.add(p, quantile_probabilities(other, edges, q, epsilon=epsilon, max_rows=max_rows))
    claimed = Release.exponential_mechanism(epsilon, "quantile")
    loss.report(audit, "quantile (base measure)", epsilon=claimed.epsilon, bounded_range=True, rho=claimed.rho)
    assert loss.epsilon > 0.3 * epsilon


def test_quantile_sampler(audit):
    histogram, edges = np.array([2, 6, 1, 0, 3]), np.array([0.0, 1.0, 1.5, 3.0, 3.0, 5.0])
    pmf = quantile_probabilities(histogram, edges, 0.5, epsilon=1.0)
    rng = np.random.default_rng(31)
    points = [private_quantile(histogram, edges, 0.5, epsilon=1.0, rng=rng) for _ in range(12_000)]
    bins = np.searchsorted(edges, points, side="right") - 1
    record_sampler(audit, "quantile (base measure)", bins.tolist(), dict(enumerate(pmf)))


@pytest.mark.parametrize("max_rows", [1, 2])
def test_joint_exp_pmf(audit, max_rows):
    epsilon, edges, qs = 1.0, np.linspace(0, 3, 4), [0.3, 0.6]
    loss = PrivacyLoss()
    for histogram in itertools.product(range(3), repeat=3):
        p = joint_probabilities(np.array(histogram), edges, qs, epsilon=epsilon, max_rows=max_rows)
        for other in histogram_neighbours(histogram, max_rows):
            loss.add(p, joint_probabilities(other, edges, qs, epsilon=epsilon, max_rows=max_rows))
    claimed = Release.exponential_mechanism(epsilon, "JointExp")  # what pipelines.quantiles charges
    loss.report(audit, "JointExp (2 quantiles)", epsilon=claimed.epsilon, bounded_range=True, rho=claimed.rho)
    assert loss.epsilon > 0.3 * epsilon


@pytest.mark.parametrize(
    "histogram,qs",
    [
        ([3, 1, 4, 0, 2], [0.25, 0.5, 0.75]),
        ([0, 30, 0], [0.25, 0.5, 0.75]),  # runs in one bin
        ([10**10, 3, 0, 10**10 - 5, 0], [0.25, 0.5, 0.75]),  # single rows decide among 2 * 10^10
    ],
)
def test_joint_exp_sampler(audit, histogram, qs):
    edges = np.linspace(0, len(histogram), len(histogram) + 1)
    problem = joint_problem(np.array(histogram), edges, qs, epsilon=2.0, max_rows=1)
    source = random_source(51)
    draws = [tuple(sample_bins(problem, len(qs), source)) for _ in range(6000)]
    record_sampler(audit, "JointExp", draws, joint_probabilities(np.array(histogram), edges, qs, epsilon=2.0))
