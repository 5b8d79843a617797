"""Audit of the selection mechanisms: the exponential mechanism, permute-and-flip and top-k.

Each: the exact pmf over every neighbouring pair of a small score grid (pure DP, and where
zCDP is claimed, bounded range and the Renyi bound), then the real sampler against the pmf.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from privacy_loss import PrivacyLoss, record_sampler, score_neighbours
from sampling import peeling_pmf

from beam_expmech.accounting import Release
from beam_expmech.mechanisms import (
    exponential_mechanism,
    permute_and_flip,
    permute_and_flip_probabilities,
    selection_probabilities,
    top_k,
)
from beam_expmech.mechanisms.exact import Noise, exact_top_k
from beam_expmech.mechanisms.exponential import log_weights
from beam_expmech.mechanisms.randomness import random_source

# --- the exponential mechanism ---------------------------------------------------------------


@pytest.mark.parametrize("epsilon,sensitivity", [(0.5, 1.0), (2.0, 1.0), (1.0, 0.5)])
@pytest.mark.parametrize("monotonic", [False, True])
def test_exponential_mechanism_pmf(audit, small_score_grid, epsilon, sensitivity, monotonic):
    loss = PrivacyLoss()
    for scores in small_score_grid:
        p = selection_probabilities(scores, epsilon=epsilon, sensitivity=sensitivity, monotonic=monotonic)
        for other in score_neighbours(scores, sensitivity, monotone=monotonic):
            loss.add(p, selection_probabilities(other, epsilon=epsilon, sensitivity=sensitivity, monotonic=monotonic))
    claimed = Release.exponential_mechanism(epsilon, "audit")
    loss.report(
        audit,
        "exponential" + (" (monotone)" if monotonic else ""),
        epsilon=claimed.epsilon,
        bounded_range=True,
        rho=claimed.rho,
    )
    assert loss.epsilon >= 0.5 * epsilon  # the grid reaches the guarantee: the check has teeth


def test_exponential_mechanism_with_a_base_measure_pmf(audit, small_score_grid):
    lm = np.log([0.5, 2.0, 7.0])
    loss = PrivacyLoss()
    for scores in small_score_grid:
        p = selection_probabilities(scores, epsilon=1, sensitivity=1, log_measure=lm)
        for other in score_neighbours(scores, 1.0):
            loss.add(p, selection_probabilities(other, epsilon=1, sensitivity=1, log_measure=lm))
    loss.report(audit, "exponential (base measure)", epsilon=1.0, bounded_range=True, rho=1 / 8)


def test_claiming_monotone_for_a_non_monotone_score_would_break_the_guarantee(small_score_grid):
    loss = PrivacyLoss()
    for scores in small_score_grid:
        p = selection_probabilities(scores, epsilon=1, sensitivity=1, monotonic=True)
        for other in score_neighbours(scores, 1.0):
            loss.add(p, selection_probabilities(other, epsilon=1, sensitivity=1, monotonic=True))
            if loss.epsilon > 1.5:
                return  # one pair past the guarantee is the point; the rest of the grid adds nothing
    raise AssertionError(f"no neighbouring pair broke epsilon = 1 (worst {loss.epsilon:.3g})")


@pytest.mark.parametrize(
    "scores,epsilon,monotonic,log_measure",
    [
        ([1, 2, 3, 10], 1.0, False, None),
        ([0.0, 0.25, 0.5, 0.5, 1.0, 3.0], 2.0, True, None),
        ([5, 5, 5, 5, 5], 1.0, False, None),  # ties: all intervals overlap at first
        ([1, 2, 3, 4], 1.0, False, [0.0, -math.inf, math.log(5), -2.0]),
    ],
)
def test_exponential_mechanism_sampler(audit, scores, epsilon, monotonic, log_measure):
    pmf = selection_probabilities(scores, epsilon=epsilon, sensitivity=1, monotonic=monotonic, log_measure=log_measure)
    rng = np.random.default_rng(11)
    draws = [
        exponential_mechanism(
            scores, epsilon=epsilon, sensitivity=1, monotonic=monotonic, log_measure=log_measure, rng=rng
        )
        for _ in range(10_000)
    ]
    record_sampler(audit, "exponential", draws, dict(enumerate(pmf)))


@pytest.mark.parametrize(
    "subject,noise,pmf_of,scores,epsilon,seed",
    [
        ("exponential (exact path only)", Noise.GUMBEL, selection_probabilities, [0, 1, 1, 2.5], 1.5, 5),
        (
            "permute-and-flip (exact path only)",
            Noise.EXPONENTIAL,
            permute_and_flip_probabilities,
            [0, 2, 2, 3],
            1.0,
            22,
        ),
    ],
)
def test_exact_path_sampler(audit, subject, noise, pmf_of, scores, epsilon, seed):
    """The slow path alone (no float screen), started from zero bits of every uniform."""
    weights = log_weights(scores, epsilon=epsilon, sensitivity=1)
    source = random_source(seed)
    draws = [exact_top_k(weights, 1, noise, source)[0] for _ in range(6_000)]
    record_sampler(audit, subject, draws, dict(enumerate(pmf_of(scores, epsilon=epsilon, sensitivity=1))))


# --- permute-and-flip -----------------------------------------------------------------------------


@pytest.mark.parametrize("monotonic", [False, True])
def test_permute_and_flip_pmf_is_pure_dp_and_not_bounded_range(audit, small_score_grid, monotonic):
    loss = PrivacyLoss()
    for scores in small_score_grid:
        p = permute_and_flip_probabilities(scores, epsilon=1.0, sensitivity=1, monotonic=monotonic)
        for other in score_neighbours(scores, 1.0, monotone=monotonic):
            loss.add(p, permute_and_flip_probabilities(other, epsilon=1.0, sensitivity=1, monotonic=monotonic))
    loss.report(audit, "permute-and-flip" + (" (monotone)" if monotonic else ""), epsilon=1.0)
    if not monotonic:
        # Not bounded-range, so charged as pure DP only (rho = eps^2/2), never eps^2/8 (OpenDP #2911).
        assert loss.range > 1.05
        assert Release.pure(1.0, "p&f").rho == 0.5


@pytest.mark.parametrize("scores,monotonic", [([1, 2, 3, 5], False), ([0.5, 0.5, 0.0, 2.0, 1.0], True)])
def test_permute_and_flip_sampler(audit, scores, monotonic):
    pmf = permute_and_flip_probabilities(scores, epsilon=1.0, sensitivity=1, monotonic=monotonic)
    rng = np.random.default_rng(21)
    draws = [permute_and_flip(scores, epsilon=1.0, sensitivity=1, monotonic=monotonic, rng=rng) for _ in range(20_000)]
    record_sampler(audit, "permute-and-flip", draws, dict(enumerate(pmf)))


# --- top-k ---------------------------------------------------------------------------------------


def test_top_k_pmf(audit):
    epsilon, k = 1.2, 2
    loss = PrivacyLoss()
    for scores in itertools.product((0, 2), repeat=3):  # 3 candidates: one is left out after the 2 rounds
        base = peeling_pmf(np.array(scores, float), k, epsilon, 1)
        for other in score_neighbours(np.array(scores, float), 1.0):
            loss.add(base, peeling_pmf(other, k, epsilon, 1))
    # k rounds of (epsilon/k)-bounded-range: epsilon-DP and k (epsilon/k)^2/8-zCDP by composition (the
    # whole is not epsilon-bounded-range: the rounds' ranges shift with the earlier picks).
    loss.report(audit, "top-k (k=2)", epsilon=epsilon, rho=k * (epsilon / k) ** 2 / 8)


def test_top_k_sampler(audit):
    scores = np.array([0.0, 1.0, 2.0, 2.0, 4.0])
    rng = np.random.default_rng(3)
    draws = [tuple(top_k(scores, 2, epsilon=3.0, sensitivity=1, rng=rng)) for _ in range(20_000)]
    record_sampler(audit, "top-k (k=2)", draws, peeling_pmf(scores, 2, 3.0, 1))


def test_top_k_exact_path_sampler(audit):
    scores = np.array([0.0, 1.0, 1.0, 3.0])
    weights = log_weights(scores, epsilon=2.0, sensitivity=1, rounds=2)
    source = random_source(6)
    draws = [tuple(exact_top_k(weights, 2, Noise.GUMBEL, source)) for _ in range(4_000)]
    record_sampler(audit, "top-k (exact path only)", draws, peeling_pmf(scores, 2, 2.0, 1))
