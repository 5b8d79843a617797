"""The discrete Gaussian mechanism, sampled exactly (Canonne, Kamath, Steinke 2020, Algorithm 3).

Adding Z with P(Z = z) proportional to exp(-z^2 / (2 sigma^2)) to integer counts of L2
sensitivity D is (D^2 / (2 sigma^2))-zCDP (CKS 2020, Theorem 4), exactly as the continuous
Gaussian. sigma^2 is taken as the rational value of its float, and every draw uses integer and
rational arithmetic only (a discrete Laplace proposal, accepted with probability
exp(-(|Y| - sigma^2/t)^2 / (2 sigma^2))), so no floating-point leak.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from beam_expmech import parameters
from beam_expmech.mechanisms.discrete_laplace import bernoulli_exp_minus_ratio, discrete_laplace
from beam_expmech.mechanisms.randomness import RandomLike, RandomSource, random_source


def discrete_gaussian(sigma2: Fraction, source: RandomSource) -> int:
    """One draw of Z with P(Z = z) proportional to exp(-z^2 / (2 sigma2))."""
    a, b = sigma2.numerator, sigma2.denominator
    t = math.isqrt(a // b) + 1  # floor(sigma) + 1
    scale = Fraction(t)
    while True:
        y = discrete_laplace(scale, source)
        # accepted with probability exp(-gamma), gamma = (|y| - sigma2 / t)^2 / (2 sigma2)
        # = (|y| b t - a)^2 / (2 a b t^2), in integers
        if bernoulli_exp_minus_ratio((abs(y) * b * t - a) ** 2, 2 * a * b * t * t, source):
            return y


def discrete_gaussian_mechanism(
    counts: object, *, sigma: float, sensitivity: int = 1, rng: RandomLike = None
) -> np.ndarray:
    """counts + discrete Gaussian noise of scale ``sigma``, cell by cell.

    Privacy: (sensitivity^2 / (2 sigma^2))-zCDP (see ``rho``) when the counts' L2 sensitivity
    is ``sensitivity`` (for a marginal with at most K rows per unit: K).
    """
    counts = np.asarray(counts)
    if counts.dtype.kind not in "iu":
        raise ValueError("counts must be integers")
    sigma2 = _variance(sigma)
    parameters.count(sensitivity, "sensitivity")
    source = random_source(rng)
    noise = np.array([discrete_gaussian(sigma2, source) for _ in range(counts.size)], dtype=np.int64)
    return counts.astype(np.int64) + noise.reshape(counts.shape)


def rho(*, sigma: float, sensitivity: int = 1) -> float:
    """The zCDP cost of ``discrete_gaussian_mechanism`` with these parameters (rounded up)."""
    sigma2 = _variance(sigma)
    exact = Fraction(parameters.count(sensitivity, "sensitivity") ** 2) / (2 * sigma2)
    value = float(exact)
    return value if Fraction(value) >= exact else math.nextafter(value, math.inf)


def _variance(sigma: float) -> Fraction:
    """sigma^2 as the rational value of its float; a ValueError where it underflows to 0."""
    variance = parameters.positive_finite(sigma, "sigma") ** 2
    if variance == 0:
        raise ValueError(f"sigma is too small: its square underflows to 0, got {sigma!r}")
    return Fraction(variance)
