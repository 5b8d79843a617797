"""Exact discrete Gaussian: the noise scale, the zCDP cost, bad arguments (the pmf and privacy: tests/audit)."""

from __future__ import annotations

import numpy as np
import pytest

from beam_expmech.mechanisms.discrete_gaussian import discrete_gaussian_mechanism, rho


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
    with pytest.raises(ValueError, match="underflows"):  # review: sigma^2 of 0 divided by zero
        discrete_gaussian_mechanism(np.array([1]), sigma=1e-162)
