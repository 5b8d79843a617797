"""Exact discrete Laplace: Bernoulli(exp(-gamma)) against its pmf, the noise scale (the noise pmf: tests/audit)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from sampling import assert_follows

from beam_expmech.mechanisms.discrete_laplace import bernoulli_exp_minus, discrete_laplace_mechanism
from beam_expmech.mechanisms.randomness import random_source


@pytest.mark.parametrize("gamma", [Fraction(0), Fraction(1, 3), Fraction(7, 3), Fraction(5)])
def test_bernoulli_exp_minus(gamma):
    source = random_source(71)
    draws = [bernoulli_exp_minus(gamma, source) for _ in range(20_000)]
    p = math.exp(-gamma)
    assert_follows(draws, {True: p, False: 1 - p} if p < 1 else {True: 1.0})


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
