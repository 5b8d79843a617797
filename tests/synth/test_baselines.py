"""The independent-marginals baseline: its cost, its model's marginals, its noise."""

from __future__ import annotations

import math

import numpy as np
import pytest

from beam_expmech.synth.baselines import independent_marginals


def test_each_column_costs_epsilon_over_d_and_the_whole_is_epsilon():
    one_way = {"a": np.array([50, 30, 20]), "b": np.array([10, 90]), "c": np.array([1, 1, 1, 97])}
    _, releases = independent_marginals(one_way, epsilon=0.9, rng=1)
    assert [r.epsilon for r in releases] == pytest.approx([0.3, 0.3, 0.3])
    assert math.fsum(r.epsilon for r in releases) == pytest.approx(0.9)
    assert all(r.rho == pytest.approx(0.3**2 / 2) for r in releases)  # discrete Laplace: pure DP only


def test_the_model_is_the_product_of_the_noisy_marginals():
    one_way = {"a": np.array([6_000, 3_000, 1_000]), "b": np.array([2_000, 8_000])}
    model, _ = independent_marginals(one_way, epsilon=50.0, rng=2)  # little noise
    joint = model.marginal(("a", "b"))
    np.testing.assert_allclose(joint, np.outer([0.6, 0.3, 0.1], [0.2, 0.8]), atol=0.01)
    np.testing.assert_allclose(joint.sum(), 1.0)


def test_the_noise_grows_with_the_rows_per_unit():
    one_way = {"a": np.full(20, 500)}
    errors = []
    for max_rows in (1, 50):
        model, _ = independent_marginals(one_way, epsilon=1.0, max_rows=max_rows, rng=3)
        errors.append(np.abs(model.marginal(("a",)) - 1 / 20).sum())
    assert errors[1] > 5 * errors[0]


def test_a_column_whose_noisy_counts_vanish_becomes_uniform():
    model, _ = independent_marginals({"a": np.zeros(4, dtype=np.int64)}, epsilon=1e-9, rng=4)
    marginal = model.marginal(("a",))
    assert marginal.sum() == pytest.approx(1.0) and (marginal >= 0).all()
