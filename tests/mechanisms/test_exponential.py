"""The exponential mechanism and its top-k: the pmf, extreme inputs, exactness, accuracy, arguments.

Its privacy (exact pmf over neighbours, the sampler against the pmf) is audited in tests/audit."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from sampling import assert_follows

from beam_expmech.mechanisms import accuracy_bound, exact, exponential_mechanism, selection_probabilities, top_k
from beam_expmech.mechanisms.exponential import log_weights


def reference_pmf(scores, epsilon, sensitivity, monotonic=False, log_measure=None):
    """The pmf from its definition with math.exp on small inputs (independent of the library)."""
    c = 1 if monotonic else 2
    lm = [0.0] * len(scores) if log_measure is None else list(log_measure)
    weights = [
        0.0 if m == -math.inf else math.exp(m + epsilon * s / (c * sensitivity))
        for s, m in zip(scores, lm, strict=True)
    ]
    return np.array(weights) / sum(weights)


# --- the pmf ---------------------------------------------------------------------------------


def test_selection_probabilities_match_the_definition():
    scores, lm = [3, -1, 0.5, 2], [0.0, math.log(3), -math.inf, -0.25]
    for monotonic in (False, True):
        got = selection_probabilities(scores, epsilon=0.7, sensitivity=1.5, monotonic=monotonic, log_measure=lm)
        np.testing.assert_allclose(got, reference_pmf(scores, 0.7, 1.5, monotonic, lm), rtol=1e-12)
    assert got[2] == 0.0


def test_extreme_scores_neither_overflow_nor_give_nan():
    huge = selection_probabilities([1e12, 1e12 - 1e6, 1e12], epsilon=1, sensitivity=1)
    np.testing.assert_array_equal(huge, [0.5, 0.0, 0.5])
    edge = selection_probabilities([1.7e308, -1.7e308, 0.0], epsilon=1e300, sensitivity=1e-300)
    np.testing.assert_array_equal(edge, [1.0, 0.0, 0.0])
    flat = selection_probabilities([1e300, -1e300], epsilon=5e-324, sensitivity=1)
    np.testing.assert_allclose(flat, [0.5, 0.5])


# --- the sampler ------------------------------------------------------------------------------


def test_draws_settled_by_exact_arithmetic_follow_the_pmf(monkeypatch):
    """A log measure of 1e14 makes the float margins wide, so many draws reach the exact step."""
    decide, calls = exact.decide, []
    monkeypatch.setattr(exact, "decide", lambda *args: calls.append(1) or decide(*args))
    scores, lm = [0, 0, 1], [1e14, 1e14, 1e14]
    rng = np.random.default_rng(13)
    draws = [exponential_mechanism(scores, epsilon=1, sensitivity=1, log_measure=lm, rng=rng) for _ in range(6_000)]
    assert 0.2 < len(calls) / len(draws) < 0.9  # both paths are exercised
    assert_follows(draws, dict(enumerate(reference_pmf(scores, 1.0, 1.0))))


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
