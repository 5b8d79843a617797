"""Permute-and-flip: the pmf from its definition, its accuracy, its arguments (privacy: tests/audit)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from beam_expmech.mechanisms import permute_and_flip, permute_and_flip_probabilities, selection_probabilities


def pf_by_permutations(scores, epsilon, sensitivity, monotonic=False):
    """The pmf by enumerating every order of the candidates (the mechanism's definition)."""
    c = 1 if monotonic else 2
    coins = [math.exp(epsilon * (s - max(scores)) / (c * sensitivity)) for s in scores]
    pmf = np.zeros(len(scores))
    orders = list(itertools.permutations(range(len(scores))))
    for order in orders:
        fail = 1.0
        for r in order:
            pmf[r] += fail * coins[r] / len(orders)
            fail *= 1 - coins[r]
    return pmf


def test_pmf_matches_the_definition():
    for scores in ([0.0, 1.0, 2.5, 2.5], [3.0, -1.0, 0.0, 0.5, 2.0]):
        for monotonic in (False, True):
            np.testing.assert_allclose(
                permute_and_flip_probabilities(scores, epsilon=1.3, sensitivity=1, monotonic=monotonic),
                pf_by_permutations(scores, 1.3, 1, monotonic),
                rtol=1e-12,
            )


def test_never_less_accurate_than_the_exponential_mechanism(small_score_grid):
    for scores in small_score_grid:
        pf = permute_and_flip_probabilities(scores, epsilon=1, sensitivity=1) @ scores
        em = selection_probabilities(scores, epsilon=1, sensitivity=1) @ scores
        assert pf >= em - 1e-12


def test_bad_arguments():
    with pytest.raises(ValueError, match="epsilon"):
        permute_and_flip([1, 2], epsilon=0, sensitivity=1)
    with pytest.raises(ValueError, match="sensitivity"):
        permute_and_flip([1, 2], epsilon=1, sensitivity=float("nan"))
    with pytest.raises(ValueError, match="scores"):
        permute_and_flip([], epsilon=1, sensitivity=1)
    with pytest.raises(ValueError, match="at most 200"):
        permute_and_flip_probabilities(np.zeros(201), epsilon=1, sensitivity=1)
