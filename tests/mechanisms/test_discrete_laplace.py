"""Exact discrete Laplace: Bernoulli(exp(-gamma)) against its pmf, the noise scale (the noise pmf: tests/audit)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from sampling import assert_follows

from beam_expmech.mechanisms.discrete_laplace import (
    bernoulli_exp_minus,
    bernoulli_exp_minus_ratio,
    discrete_laplace_mechanism,
)
from beam_expmech.mechanisms.randomness import random_source


@pytest.mark.parametrize("gamma", [Fraction(0), Fraction(1, 3), Fraction(7, 3), Fraction(5)])
def test_bernoulli_exp_minus(gamma):
    source = random_source(71)
    draws = [bernoulli_exp_minus(gamma, source) for _ in range(20_000)]
    p = math.exp(-gamma)
    assert_follows(draws, {True: p, False: 1 - p} if p < 1 else {True: 1.0})


def _rational_bernoulli_exp_minus(gamma: Fraction, source) -> bool:
    """CKS 2020's Algorithm 1 in Fractions, as the library drew it until 2026-12-07: the reference."""
    while gamma > 1:
        if not _rational_bernoulli_exp_minus(Fraction(1), source):
            return False
        gamma -= 1
    k = 1
    while source.below((gamma / k).denominator) < (gamma / k).numerator:
        k += 1
    return k % 2 == 1


@pytest.mark.parametrize(
    "gamma", [Fraction(0), Fraction(1), Fraction(1, 3), Fraction(9, 4), Fraction(10**30 + 1, 10**29)]
)
def test_integer_series_takes_the_same_bits_as_the_rational_one(gamma):
    # Seeded runs (tests, golden files) repeat across the change; unreduced ratios draw as their lowest terms.
    reference, source = random_source(5), random_source(5)
    expected = [_rational_bernoulli_exp_minus(gamma, reference) for _ in range(3_000)]
    unreduced = (gamma.numerator * 3, gamma.denominator * 3)
    assert [bernoulli_exp_minus_ratio(*unreduced, source) for _ in range(3_000)] == expected
    assert reference.bits(64) == source.bits(64)  # and no bit more or fewer


def test_mechanism_adds_noise_of_the_right_scale_to_every_cell():
    counts = np.arange(12).reshape(3, 4)
    noisy = discrete_laplace_mechanism(counts, epsilon=1e6, sensitivity=1, rng=73)
    np.testing.assert_array_equal(noisy, counts)  # epsilon huge: noise is 0 with overwhelming probability
    spread = discrete_laplace_mechanism(np.zeros(4000, int), epsilon=0.5, sensitivity=2, rng=74)
    assert abs(np.abs(spread).mean() - 4) < 0.4  # E|Z| ~ scale = 4 for a wide discrete Laplace
    with pytest.raises(ValueError, match="integers"):
        discrete_laplace_mechanism(np.array([0.5]), epsilon=1)
    with pytest.raises(ValueError, match="epsilon"):
        discrete_laplace_mechanism(np.array([1]), epsilon=0)
