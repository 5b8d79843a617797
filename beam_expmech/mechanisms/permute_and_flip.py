"""Permute-and-flip (McKenna and Sheldon 2020): never less accurate than the exponential mechanism.

Visit the candidates in a uniformly random order and stop at the first r that passes a coin
with heads probability exp(epsilon * (q(d, r) - max_r' q(d, r')) / (c * Dq)), c = 2, or 1 when
q is monotone. Privacy: epsilon-DP (pure) only. It is NOT bounded-range, so it cannot be charged
as epsilon**2/8-zCDP (the mistake in OpenDP 0.15.1, #2911); charge it as a pure epsilon release.

We draw it as report-noisy-max with Exp(1) noise on the scaled scores, which has exactly the
same distribution (Ding et al. 2021), so the exact sampler of ``exact.py`` serves both.
"""

from __future__ import annotations

import math

import numpy as np

from beam_expmech.mechanisms.exact import Noise, noisy_top_k
from beam_expmech.mechanisms.exponential import log_weights
from beam_expmech.mechanisms.randomness import RandomLike, random_source

_PMF_LIMIT = 200  # the pmf below is O(C^3): an audit tool for small candidate sets


def permute_and_flip(
    scores: object,
    *,
    epsilon: float,
    sensitivity: float,
    monotonic: bool = False,
    rng: RandomLike = None,
) -> int:
    """An index drawn by permute-and-flip. epsilon-DP (pure only) for scores of the given sensitivity."""
    weights = log_weights(scores, epsilon=epsilon, sensitivity=sensitivity, monotonic=monotonic)
    return noisy_top_k(weights, 1, Noise.EXPONENTIAL, random_source(rng))[0]


def permute_and_flip_probabilities(
    scores: object, *, epsilon: float, sensitivity: float, monotonic: bool = False
) -> np.ndarray:
    """Permute-and-flip's pmf as float64, from its definition (for audits; at most 200 candidates).

    With p_j the coin of candidate j, r is chosen when the candidates before it in the random
    order all fail and r passes: P(r) = p_r * sum_S P(S precedes r) * prod_{j in S} (1 - p_j),
    and a set S of size s precedes r with probability s! (C-1-s)! / C!.
    """
    weights = log_weights(scores, epsilon=epsilon, sensitivity=sensitivity, monotonic=monotonic)
    size = weights.scores.size
    if size > _PMF_LIMIT:
        raise ValueError(f"permute_and_flip_probabilities handles at most {_PMF_LIMIT} candidates, got {size}")
    w, _ = weights.floats()  # shifted so the best score has w = 0
    with np.errstate(under="ignore"):
        coins = np.exp(w)
    order_weight = np.array([1 / (size * math.comb(size - 1, s)) for s in range(size)])
    pmf = np.empty(size)
    for r in range(size):
        # Elementary symmetric polynomials of the other candidates' failure probabilities.
        e = np.zeros(size)
        e[0] = 1.0
        for j in range(size):
            if j != r:
                e[1:] = e[1:] + e[:-1] * (1 - coins[j])
        pmf[r] = coins[r] * (e * order_weight).sum()
    return pmf
