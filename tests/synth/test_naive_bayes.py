"""synth.naive_bayes: the target's 2-way marginals, what they cost, and the model made of them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from beam_expmech.accounting import PrivacyBudget
from beam_expmech.mechanisms.randomness import random_source
from beam_expmech.synth import naive_bayes, normalised

DOMAIN = {"a": 4, "y": 3, "b": 5}


def workload(rows: int, seed: int = 0) -> tuple[dict[tuple[str, ...], np.ndarray], np.ndarray]:
    """The 3-way marginal of ``rows`` rows where a and b each follow y (test-only randomness), and its counts."""
    rng = np.random.default_rng(seed)
    y = rng.choice(3, rows, p=[0.5, 0.3, 0.2])
    a = np.where(rng.random(rows) < 0.8, y, rng.integers(0, 4, rows))
    b = np.where(rng.random(rows) < 0.7, 4 - y, rng.integers(0, 5, rows))
    counts = np.zeros(tuple(DOMAIN.values()), np.int64)
    np.add.at(counts, (a, y, b), 1)
    return {("a", "y", "b"): counts}, counts


def fit(rows: int, *, epsilon: float = 1.0, smoothing: float = 0.0, max_rows: int = 1, seed: int = 1):
    marginals, _ = workload(rows)
    return naive_bayes.naive_bayes(marginals, DOMAIN, target="y", epsilon=epsilon, max_rows=max_rows,
                                   count=(rows, 0.01), smoothing=smoothing, source=random_source(seed))  # fmt: skip


def test_it_measures_the_targets_two_way_marginals_spending_exactly_epsilon_split_by_their_cells():
    result = fit(2_000, epsilon=0.7)
    assert result.generator == "naive bayes"
    assert result.measured == [("y", "a"), ("y", "b")]
    cells = [3 * 4, 3 * 5]
    expected = [0.7 * math.sqrt(n) / sum(map(math.sqrt, cells)) for n in cells]
    assert [r.epsilon for r in result.releases] == pytest.approx(expected)
    budget = PrivacyBudget(epsilon=0.7)
    for release in result.releases:
        budget.charge(release)
    assert budget.spent() == pytest.approx(0.7, rel=1e-12) and all(r.delta == 0 for r in result.releases)


def test_every_draw_is_told_sensitivity_k_and_its_share(monkeypatch):
    told = []
    laplace = naive_bayes.discrete_laplace_mechanism

    def spy(counts, **parameters):
        told.append((counts.shape, parameters["epsilon"], parameters["sensitivity"]))
        return laplace(counts, **parameters)

    monkeypatch.setattr(naive_bayes, "discrete_laplace_mechanism", spy)
    result = fit(500, epsilon=2.0, max_rows=3)
    assert [shape for shape, _, _ in told] == [(3, 4), (3, 5)]
    assert {k for _, _, k in told} == {3}
    assert [e for _, e, _ in told] == [r.epsilon for r in result.releases]
    assert math.fsum(e for _, e, _ in told) == pytest.approx(2.0, rel=1e-12)


def test_with_little_noise_the_model_is_the_datas_naive_bayes_fit():
    rows = 200_000
    result = fit(rows, epsilon=50.0)
    _, counts = workload(rows)
    y = counts.sum(axis=(0, 2))
    np.testing.assert_allclose(result.model.marginal(["y"]), y / rows, atol=2e-3)
    for column, truth in (("a", counts.sum(axis=2).T), ("b", counts.sum(axis=0))):  # (y, column)
        np.testing.assert_allclose(result.model.given[column], truth / truth.sum(axis=1, keepdims=True), atol=5e-3)
        np.testing.assert_allclose(result.model.marginal(["y", column]), truth / rows, atol=2e-3)
    assert abs(result.rows - rows) < 0.01 * rows
    # a and b are independent given y, not overall: the model keeps what links them through y
    ab = result.model.marginal(["a", "b"])
    assert np.abs(ab - np.outer(ab.sum(axis=1), ab.sum(axis=0))).sum() > 0.1
    joint = result.model.marginal(["b", "y", "a"])
    assert joint.shape == (5, 3, 4) and joint.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(joint.sum(axis=(0, 2)), result.model.prior)


def test_drawn_rows_follow_the_model():
    model = fit(5_000, epsilon=5.0).model
    rows = model.sample(60_000, random_source(9))
    assert set(rows) == set(DOMAIN) and all(v.size == 60_000 for v in rows.values())
    y = np.bincount(rows["y"], minlength=3)
    assert np.all(np.abs(y - 60_000 * model.prior) <= 1)  # a systematic sample: within a row of its expectation
    for column in ("a", "b"):
        pair = np.zeros((3, DOMAIN[column]))
        np.add.at(pair, (rows["y"], rows[column]), 1)
        np.testing.assert_allclose(pair / pair.sum(axis=1, keepdims=True), model.given[column], atol=0.01)


@pytest.mark.parametrize("smoothing", [0.0, 0.5, 1.0])
def test_clipped_counts_get_smoothing_times_their_noise_scale(monkeypatch, smoothing):
    """Each 2-way drawn as 20 in its first cell and -2 elsewhere: clipped to 0, then smoothing K / epsilon_c added."""

    def drawn(counts, **parameters):
        out = np.full(counts.shape, -2)
        out.flat[0] = 20
        return out

    monkeypatch.setattr(naive_bayes, "discrete_laplace_mechanism", drawn)
    result = fit(1_000, epsilon=1.0, smoothing=smoothing, max_rows=2)
    for column, release in zip(("a", "b"), result.releases, strict=True):
        expected = np.zeros((3, DOMAIN[column]))
        expected[0, 0] = 20
        expected += smoothing * 2 / release.epsilon
        np.testing.assert_allclose(result.model.given[column], normalised(expected))
    if smoothing == 0:  # rows of y but the first are all zero: uniform; the prior from the unclipped sums
        np.testing.assert_allclose(result.model.given["a"][1], np.full(4, 0.25))
        np.testing.assert_allclose(result.model.prior, [1.0, 0.0, 0.0])


def test_a_marginal_of_more_columns_than_letters_is_the_product_of_its_factors():
    """np.einsum's subscripts have 52 letters; a workload may be of every column (--workload-degree): 50 columns,
    of one code but two."""
    domain = {f"c{i}": 1 for i in range(60)} | {"a": 2, "b": 3, "y": 2}
    given = {c: np.ones((2, 1)) for c in domain} | {"a": np.array([[0.9, 0.1], [0.2, 0.8]]),
                                                  "b": np.array([[0.5, 0.25, 0.25], [0.1, 0.1, 0.8]])}  # fmt: skip
    del given["y"]
    model = naive_bayes.NaiveBayesModel(domain, "y", np.array([0.25, 0.75]), given)
    columns = ["a", *(f"c{i}" for i in range(48)), "b"]
    joint = model.marginal(columns)
    assert joint.shape == (2, *(1,) * 48, 3) and joint.sum() == pytest.approx(1.0)
    expected = 0.25 * np.outer(given["a"][0], given["b"][0]) + 0.75 * np.outer(given["a"][1], given["b"][1])
    np.testing.assert_allclose(joint.reshape(2, 3), expected)
    assert model.marginal(["a", "y"])[1, 1] == pytest.approx(0.75 * 0.8)
