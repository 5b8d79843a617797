"""The exponential mechanism and its top-k: exact pmf checks, then the sampler against the pmf."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from conftest import assert_follows, neighbours

from beam_expmech.mechanisms import accuracy_bound, exact, exponential_mechanism, selection_probabilities, top_k
from beam_expmech.mechanisms.exact import Noise, exact_top_k
from beam_expmech.mechanisms.exponential import log_weights
from beam_expmech.mechanisms.randomness import random_source


def reference_pmf(scores, epsilon, sensitivity, monotonic=False, log_measure=None):
    """The pmf from its definition with math.exp on small inputs (independent of the library)."""
    c = 1 if monotonic else 2
    lm = [0.0] * len(scores) if log_measure is None else list(log_measure)
    weights = [
        0.0 if m == -math.inf else math.exp(m + epsilon * s / (c * sensitivity))
        for s, m in zip(scores, lm, strict=True)
    ]
    return np.array(weights) / sum(weights)


def peeling_pmf(scores, k, epsilon, sensitivity, monotonic=False):
    """P(ordered k-tuple) for k rounds of the exponential mechanism with epsilon / k each."""
    c = 1 if monotonic else 2
    pmf = {}
    for seq in itertools.permutations(range(len(scores)), k):
        p, remaining = 1.0, set(range(len(scores)))
        for r in seq:
            weights = {j: math.exp(epsilon / k * scores[j] / (c * sensitivity)) for j in remaining}
            p *= weights[r] / sum(weights.values())
            remaining.remove(r)
        pmf[seq] = p
    return pmf


# --- the pmf ---------------------------------------------------------------------------------


def test_selection_probabilities_match_the_definition():
    scores, lm = [3, -1, 0.5, 2], [0.0, math.log(3), -math.inf, -0.25]
    for monotonic in (False, True):
        got = selection_probabilities(scores, epsilon=0.7, sensitivity=1.5, monotonic=monotonic, log_measure=lm)
        np.testing.assert_allclose(got, reference_pmf(scores, 0.7, 1.5, monotonic, lm), rtol=1e-12)
    assert got[2] == 0.0


@pytest.mark.parametrize("epsilon,sensitivity", [(0.5, 1.0), (2.0, 1.0), (1.0, 0.5)])
def test_epsilon_dp_and_bounded_range_over_all_neighbours(small_score_grid, epsilon, sensitivity):
    worst_dp, worst_range = 0.0, 0.0
    for scores in small_score_grid:
        log_p = np.log(selection_probabilities(scores, epsilon=epsilon, sensitivity=sensitivity))
        for other in neighbours(scores, sensitivity):
            ratio = log_p - np.log(selection_probabilities(other, epsilon=epsilon, sensitivity=sensitivity))
            worst_dp = max(worst_dp, np.abs(ratio).max())
            worst_range = max(worst_range, ratio.max() - ratio.min())
    assert worst_dp <= epsilon * (1 + 1e-9)
    assert worst_range <= epsilon * (1 + 1e-9)  # epsilon-bounded-range: the basis of epsilon^2/8-zCDP
    assert worst_dp >= 0.5 * epsilon  # the grid does reach the guarantee, so the check has teeth


def test_monotone_scores_get_the_factor_of_two_and_only_when_monotone(small_score_grid):
    epsilon, worst_monotone, worst_any = 1.0, 0.0, 0.0
    for scores in small_score_grid:
        log_p = np.log(selection_probabilities(scores, epsilon=epsilon, sensitivity=1, monotonic=True))
        for other in neighbours(scores, 1.0, monotone=True):
            log_q = np.log(selection_probabilities(other, epsilon=epsilon, sensitivity=1, monotonic=True))
            worst_monotone = max(worst_monotone, np.abs(log_p - log_q).max())
        for other in neighbours(scores, 1.0):
            log_q = np.log(selection_probabilities(other, epsilon=epsilon, sensitivity=1, monotonic=True))
            worst_any = max(worst_any, np.abs(log_p - log_q).max())
    assert worst_monotone <= epsilon * (1 + 1e-9)
    assert worst_any > 1.5 * epsilon  # claiming monotone for a non-monotone score breaks the guarantee


def test_log_measure_changes_nothing_in_the_privacy_loss(small_score_grid):
    lm = np.log([0.5, 2.0, 7.0])
    for scores in small_score_grid:
        log_p = np.log(selection_probabilities(scores, epsilon=1, sensitivity=1, log_measure=lm))
        for other in neighbours(scores, 1.0):
            log_q = np.log(selection_probabilities(other, epsilon=1, sensitivity=1, log_measure=lm))
            assert np.abs(log_p - log_q).max() <= 1 + 1e-9


def test_top_k_peeling_pmf_is_epsilon_dp():
    epsilon, worst = 1.2, 0.0
    for scores in itertools.product((0, 2), repeat=4):
        base = peeling_pmf(np.array(scores, float), 2, epsilon, 1)
        for other in neighbours(np.array(scores, float), 1.0):
            moved = peeling_pmf(other, 2, epsilon, 1)
            worst = max(worst, max(abs(math.log(base[s] / moved[s])) for s in base))
    assert worst <= epsilon * (1 + 1e-9)


def test_extreme_scores_neither_overflow_nor_give_nan():
    huge = selection_probabilities([1e12, 1e12 - 1e6, 1e12], epsilon=1, sensitivity=1)
    np.testing.assert_array_equal(huge, [0.5, 0.0, 0.5])
    edge = selection_probabilities([1.7e308, -1.7e308, 0.0], epsilon=1e300, sensitivity=1e-300)
    np.testing.assert_array_equal(edge, [1.0, 0.0, 0.0])
    flat = selection_probabilities([1e300, -1e300], epsilon=5e-324, sensitivity=1)
    np.testing.assert_allclose(flat, [0.5, 0.5])


# --- the sampler ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "scores,epsilon,monotonic,log_measure",
    [
        ([1, 2, 3, 10], 1.0, False, None),
        ([0.0, 0.25, 0.5, 0.5, 1.0, 3.0], 2.0, True, None),
        ([5, 5, 5, 5, 5], 1.0, False, None),  # ties: all intervals overlap at first
        ([1, 2, 3, 4], 1.0, False, [0.0, -math.inf, math.log(5), -2.0]),
    ],
)
def test_sampler_follows_the_pmf(scores, epsilon, monotonic, log_measure):
    pmf = selection_probabilities(scores, epsilon=epsilon, sensitivity=1, monotonic=monotonic, log_measure=log_measure)
    rng = np.random.default_rng(11)
    draws = [
        exponential_mechanism(
            scores, epsilon=epsilon, sensitivity=1, monotonic=monotonic, log_measure=log_measure, rng=rng
        )
        for _ in range(20_000)
    ]
    assert_follows(draws, dict(enumerate(pmf)))


def test_exact_reference_sampler_follows_the_pmf():
    """The slow path alone (no float screen), started from zero bits of every uniform."""
    scores = [0, 1, 1, 2.5]
    weights = log_weights(scores, epsilon=1.5, sensitivity=1)
    source = random_source(5)
    draws = [exact_top_k(weights, 1, Noise.GUMBEL, source)[0] for _ in range(6_000)]
    assert_follows(draws, dict(enumerate(selection_probabilities(scores, epsilon=1.5, sensitivity=1))))


def test_draws_settled_by_exact_arithmetic_follow_the_pmf(monkeypatch):
    """A log measure of 1e14 makes the float margins wide, so many draws reach the exact step."""
    decide, calls = exact.decide, []
    monkeypatch.setattr(exact, "decide", lambda *args: calls.append(1) or decide(*args))
    scores, lm = [0, 0, 1], [1e14, 1e14, 1e14]
    rng = np.random.default_rng(13)
    draws = [exponential_mechanism(scores, epsilon=1, sensitivity=1, log_measure=lm, rng=rng) for _ in range(6_000)]
    assert 0.2 < len(calls) / len(draws) < 0.9  # both paths are exercised
    assert_follows(draws, dict(enumerate(reference_pmf(scores, 1.0, 1.0))))


def test_exact_reference_top_k_follows_peeling():
    scores = np.array([0.0, 1.0, 1.0, 3.0])
    weights = log_weights(scores, epsilon=2.0, sensitivity=1, rounds=2)
    source = random_source(6)
    draws = [tuple(exact_top_k(weights, 2, Noise.GUMBEL, source)) for _ in range(4_000)]
    assert_follows(draws, peeling_pmf(scores, 2, 2.0, 1))


def test_top_k_follows_peeling():
    scores = np.array([0.0, 1.0, 2.0, 2.0, 4.0])
    pmf = peeling_pmf(scores, 2, 3.0, 1)
    rng = np.random.default_rng(3)
    draws = [tuple(top_k(scores, 2, epsilon=3.0, sensitivity=1, rng=rng)) for _ in range(20_000)]
    assert_follows(draws, pmf)


def test_top_k_returns_distinct_indices_best_first():
    scores = np.arange(1000)
    picked = top_k(scores, 10, epsilon=1e6, sensitivity=1, rng=0)
    assert picked == list(range(999, 989, -1))
    assert len(set(top_k(np.zeros(50), 50, epsilon=1, sensitivity=1, rng=1))) == 50


def test_zero_measure_is_never_chosen():
    lm = np.full(200, -np.inf)
    lm[[3, 150]] = 0.0
    scores = np.arange(200.0) * 10  # the zero-measure candidates above 150 score far better
    scores[3] = scores[150]
    picks = {exponential_mechanism(scores, epsilon=1, sensitivity=1, log_measure=lm, rng=i) for i in range(300)}
    assert picks == {3, 150}


def test_integers_beyond_float_precision_are_exact():
    # 2**60 and 2**60 + 1 are one float apart only as ints; the mechanism must see the difference.
    scores = np.array([2**60, 2**60 + 1, 2**60 - 1], dtype=np.int64)
    pmf = reference_pmf([1, 2, 0], 2.0, 1.0)
    rng = np.random.default_rng(8)
    draws = [exponential_mechanism(scores, epsilon=2, sensitivity=1, rng=rng) for _ in range(10_000)]
    assert_follows(draws, dict(enumerate(pmf)))
    big = [10**30, 10**30 + 2, 10**30 + 1]  # Python ints past 64 bits
    rng = np.random.default_rng(9)
    draws = [exponential_mechanism(big, epsilon=2, sensitivity=1, rng=rng) for _ in range(3_000)]
    assert_follows(draws, dict(enumerate(reference_pmf([0, 2, 1], 2.0, 1.0))))


def test_extreme_inputs_are_handled():
    assert exponential_mechanism([1e12, 1e12 - 1e6], epsilon=1, sensitivity=1) == 0
    assert exponential_mechanism([-1.7e308, 1.7e308], epsilon=1, sensitivity=1) == 1
    assert exponential_mechanism([0.0, 1.0], epsilon=1e300, sensitivity=1e-300) == 1
    assert exponential_mechanism([1.0, 0.0], epsilon=5e-324, sensitivity=1e300) in (0, 1)
    many = np.zeros(10**7, dtype=np.int32)
    many[1234567] = 100
    assert exponential_mechanism(many, epsilon=1, sensitivity=1) == 1234567


def test_tiny_epsilon_is_uniform():
    rng = np.random.default_rng(4)
    draws = [exponential_mechanism([0.0, 1e6, -1e6], epsilon=1e-300, sensitivity=1, rng=rng) for _ in range(3000)]
    assert_follows(draws, {0: 1 / 3, 1: 1 / 3, 2: 1 / 3})


def test_seeded_draws_repeat():
    scores = np.random.default_rng(0).normal(size=1000)
    assert top_k(scores, 5, epsilon=1, sensitivity=1, rng=42) == top_k(scores, 5, epsilon=1, sensitivity=1, rng=42)


# --- accuracy ---------------------------------------------------------------------------------


def test_accuracy_bound_formula():
    t = accuracy_bound(epsilon=0.5, sensitivity=2, beta=0.05, num_candidates=1000)
    assert t == pytest.approx(2 * 2 / 0.5 * (math.log(1000) + math.log(20)))
    assert accuracy_bound(epsilon=0.5, sensitivity=2, beta=0.05, num_candidates=1000, monotonic=True) == t / 2
    lm = [0.0, 0.0, math.log(2), -math.inf]  # mu(R) = 4, smallest positive measure 1
    assert accuracy_bound(epsilon=1, sensitivity=1, beta=0.1, log_measure=lm) == pytest.approx(
        2 * (math.log(4) + math.log(10))
    )


def test_accuracy_bound_holds_empirically():
    rng = np.random.default_rng(12)
    scores = rng.integers(0, 40, size=500)
    t = accuracy_bound(epsilon=1, sensitivity=1, beta=0.1, num_candidates=500)
    losses = np.array(
        [scores.max() - scores[exponential_mechanism(scores, epsilon=1, sensitivity=1, rng=rng)] for _ in range(2000)]
    )
    assert (losses > t).mean() <= 0.1


# --- bad arguments ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,named",
    [
        ({"epsilon": 0}, "epsilon"),
        ({"epsilon": -1}, "epsilon"),
        ({"epsilon": float("nan")}, "epsilon"),
        ({"epsilon": float("inf")}, "epsilon"),
        ({"epsilon": True}, "epsilon"),
        ({"sensitivity": -1}, "sensitivity"),
        ({"sensitivity": 0.0}, "sensitivity"),
        ({"sensitivity": float("inf")}, "sensitivity"),
        ({"scores": []}, "scores"),
        ({"scores": [1.0, float("nan")]}, "scores"),
        ({"scores": [1.0, float("inf")]}, "scores"),
        ({"scores": [[1, 2]]}, "scores"),
        ({"scores": ["a", "b"]}, "scores"),
        ({"log_measure": [0.0, 0.0]}, "log_measure"),
        ({"log_measure": [0.0, float("nan"), 0.0]}, "log_measure"),
        ({"log_measure": [-np.inf] * 3}, "log_measure"),
        ({"rng": "seed"}, "rng"),
        ({"monotonic": "yes"}, "monotonic"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs, named):
    args = {"scores": [1, 2, 3], "epsilon": 1.0, "sensitivity": 1.0, **kwargs}
    with pytest.raises(ValueError, match=named):
        exponential_mechanism(**args)


@pytest.mark.parametrize("k", [0, 4, -1, 1.5, None])
def test_bad_k(k):
    with pytest.raises(ValueError, match="k"):
        top_k([1, 2, 3], k, epsilon=1, sensitivity=1)


@pytest.mark.parametrize(
    "kwargs,named",
    [
        ({"beta": 0}, "beta"),
        ({"beta": 1}, "beta"),
        ({"num_candidates": 0}, "num_candidates"),
        ({"num_candidates": None}, "exactly one"),
        ({"log_measure": [0.0]}, "exactly one"),
        ({"epsilon": 0}, "epsilon"),
    ],
)
def test_bad_accuracy_arguments(kwargs, named):
    args = {"epsilon": 1.0, "sensitivity": 1.0, "beta": 0.05, "num_candidates": 10, **kwargs}
    with pytest.raises(ValueError, match=named):
        accuracy_bound(**args)


def test_weights_are_exact_rationals_of_the_inputs():
    weights = log_weights([3, 0.1], epsilon=0.3, sensitivity=0.7, monotonic=False, log_measure=[0.5, -1.0])
    assert weights.exact(1) == Fraction(0.3) / (2 * Fraction(0.7)) * Fraction(0.1) + Fraction(-1.0)
