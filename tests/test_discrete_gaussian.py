"""Exact discrete Gaussian: draws against the pmf (seeded), the zCDP cost, bad arguments."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from conftest import assert_follows

from beam_expmech.mechanisms.discrete_gaussian import discrete_gaussian, discrete_gaussian_mechanism, rho
from beam_expmech.mechanisms.randomness import random_source


@pytest.mark.parametrize("sigma2", [Fraction(1, 5), Fraction(9, 4), Fraction(49)])
def test_discrete_gaussian_follows_its_pmf(sigma2):
    source = random_source(81)
    draws = [discrete_gaussian(sigma2, source) for _ in range(20_000)]
    weights = {z: math.exp(-(z**2) / (2 * sigma2)) for z in range(-80, 81)}
    total = sum(weights.values())
    assert_follows(draws, {z: w / total for z, w in weights.items()})


def test_mechanism_noise_scale_and_cost():
    noisy = discrete_gaussian_mechanism(np.full((50, 40), 1000), sigma=3.0, sensitivity=2, rng=82)
    assert noisy.shape == (50, 40) and noisy.dtype == np.int64
    assert abs((noisy - 1000).std() - 3.0) < 0.15 and abs((noisy - 1000).mean()) < 0.2
    assert rho(sigma=3.0, sensitivity=2) >= 4 / (2 * 9.0)  # K^2 / (2 sigma^2), never rounded down
    assert rho(sigma=3.0, sensitivity=2) == pytest.approx(2 / 9, rel=1e-15)


def test_bad_arguments():
    with pytest.raises(ValueError, match="integers"):
        discrete_gaussian_mechanism(np.array([0.5]), sigma=1)
    with pytest.raises(ValueError, match="sigma"):
        discrete_gaussian_mechanism(np.array([1]), sigma=0)
    with pytest.raises(ValueError, match="sigma"):
        rho(sigma=float("inf"))
