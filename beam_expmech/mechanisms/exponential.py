"""The exponential mechanism (McSherry and Talwar 2007), its one-shot top-k, its pmf and its accuracy.

Given scores q(d, r), a sensitivity Dq (the most one privacy unit can move any single score)
and a base measure mu, the mechanism outputs r with probability proportional to

    mu(r) * exp(epsilon * q(d, r) / (c * Dq)),    c = 2, or c = 1 when q is monotone

(monotone: between neighbours all scores move in the same direction, as counts do under
adding or removing one unit). Privacy: epsilon-DP, and epsilon-bounded-range, hence
epsilon**2 / 8-zCDP (Cesar and Rogers 2021). ``epsilon`` is always the guarantee, never the raw
exponent.

Sampling is exact (see ``exact.py``): the returned index follows this distribution for the
exact values of the float or int inputs, not a floating-point approximation of it.
"""

from __future__ import annotations

import math
from fractions import Fraction

import gmpy2
import numpy as np

from beam_expmech import parameters
from beam_expmech.mechanisms.exact import LogWeights, Noise, noisy_top_k
from beam_expmech.mechanisms.randomness import RandomLike, random_source


def log_weights(
    scores: object,
    *,
    epsilon: object,
    sensitivity: object,
    monotonic: bool = False,
    log_measure: object = None,
    rounds: int = 1,
) -> LogWeights:
    """Validate the arguments shared by every selection mechanism and build its log weights.

    The scale is epsilon / (c * sensitivity * rounds): top-k spends epsilon / k per round.
    """
    scores = parameters.scores_array(scores)
    epsilon = parameters.positive_finite(epsilon, "epsilon")
    sensitivity = parameters.positive_finite(sensitivity, "sensitivity")
    if not isinstance(monotonic, (bool, np.bool_)):
        raise ValueError(f"monotonic must be True or False, got {monotonic!r}")
    log_measure = parameters.log_measure_array(log_measure, scores.size)
    c = 1 if monotonic else 2
    scale = Fraction(epsilon) / (c * rounds * Fraction(sensitivity))
    return LogWeights(scores, scale, log_measure)


def exponential_mechanism(
    scores: object,
    *,
    epsilon: float,
    sensitivity: float,
    monotonic: bool = False,
    log_measure: object = None,
    rng: RandomLike = None,
) -> int:
    """Index r with probability proportional to exp(log_measure[r] + epsilon * scores[r] / (c * sensitivity)).

    Privacy: epsilon-DP and epsilon-bounded-range (epsilon**2/8-zCDP) when no privacy unit can
    move any score by more than ``sensitivity`` (c = 1 if ``monotonic``, else 2).

    Args:
        scores: finite ints or floats, one per candidate.
        epsilon: the privacy guarantee, finite and > 0.
        sensitivity: the scores' sensitivity, finite and > 0.
        monotonic: True only if, between any two neighbours, all scores move the same way.
        log_measure: optional log base measure per candidate; -inf marks a candidate of
            measure zero, which is never chosen.
        rng: None (the OS CSPRNG, the only private choice) or, for tests, a seed or Generator.
    """
    weights = log_weights(
        scores, epsilon=epsilon, sensitivity=sensitivity, monotonic=monotonic, log_measure=log_measure
    )
    return noisy_top_k(weights, 1, Noise.GUMBEL, random_source(rng))[0]


def top_k(
    scores: object,
    k: int,
    *,
    epsilon: float,
    sensitivity: float,
    monotonic: bool = False,
    rng: RandomLike = None,
) -> list[int]:
    """k distinct indices, best first: k rounds of the exponential mechanism with epsilon / k each.

    Drawn in one shot (the k largest Gumbel-noised scores), which equals peeling in
    distribution (Durfee and Rogers 2019). Privacy: epsilon-DP in total by composition, and
    epsilon**2/(8k)-zCDP (each round is (epsilon/k)-bounded-range), for scores of the given
    sensitivity (c = 1 if ``monotonic``, else 2, per round).
    """
    # The scores themselves are checked once, in log_weights (an empty set is reported there).
    k = parameters.count(k, "k", at_most=max(np.size(scores), 1))
    weights = log_weights(scores, epsilon=epsilon, sensitivity=sensitivity, monotonic=monotonic, rounds=k)
    return noisy_top_k(weights, k, Noise.GUMBEL, random_source(rng))


def selection_probabilities(
    scores: object,
    *,
    epsilon: float,
    sensitivity: float,
    monotonic: bool = False,
    log_measure: object = None,
) -> np.ndarray:
    """The exponential mechanism's pmf as float64 (for audits and reports; touches no randomness).

    Computed in log space with the largest weight shifted to 0, so extreme scores neither
    overflow nor turn to NaN; an entry too small for float64 is 0.
    """
    weights = log_weights(
        scores, epsilon=epsilon, sensitivity=sensitivity, monotonic=monotonic, log_measure=log_measure
    )
    return _softmax(weights)


def _softmax(weights: LogWeights) -> np.ndarray:
    positive = np.ones(weights.scores.size, bool) if weights.log_measure is None else weights.log_measure > -np.inf
    w, extra = weights.floats()
    if not (np.isfinite(w[positive]).all() and np.isfinite(np.broadcast_to(extra, w.shape)[positive]).all()):
        # Beyond float range: shift exactly, then round once (slow; only for extreme inputs).
        exact = {r: weights.exact(r) for r in np.flatnonzero(positive)}
        top = max(exact.values())
        w = np.full(weights.scores.size, -np.inf)
        for r, value in exact.items():
            w[r] = float(gmpy2.mpfr(gmpy2.mpq(value - top)))
    w = np.where(positive, w, -np.inf)
    with np.errstate(under="ignore"):
        p = np.exp(w - w.max())
    return p / p.sum()


def accuracy_bound(
    *,
    epsilon: float,
    sensitivity: float,
    beta: float,
    num_candidates: int | None = None,
    log_measure: object = None,
    monotonic: bool = False,
) -> float:
    """Utility loss t: with probability >= 1 - beta the chosen score is >= max(scores) - t.

    t = (c * sensitivity / epsilon) * (ln(mu(R) / mu(R_OPT)) + ln(1 / beta)), the exponential
    mechanism's accuracy theorem. It needs no data: with ``num_candidates`` (counting measure)
    mu(R) / mu(R_OPT) <= num_candidates; with ``log_measure`` the smallest positive measure
    stands in for mu(R_OPT), the worst case. Give exactly one of the two.
    """
    epsilon = parameters.positive_finite(epsilon, "epsilon")
    sensitivity = parameters.positive_finite(sensitivity, "sensitivity")
    beta = parameters.probability(beta, "beta")
    if (num_candidates is None) == (log_measure is None):
        raise ValueError("give exactly one of num_candidates and log_measure")
    if num_candidates is not None:
        log_ratio = math.log(parameters.count(num_candidates, "num_candidates"))
    else:
        lm = np.asarray(log_measure, dtype=np.float64)
        lm = parameters.log_measure_array(lm, lm.size)
        lm = lm[lm > -np.inf]
        top = lm.max()
        log_total = top + math.log(np.exp(lm - top).sum())
        log_ratio = log_total - lm.min()
    c = 1 if monotonic else 2
    return c * sensitivity / epsilon * (log_ratio + math.log(1 / beta))
