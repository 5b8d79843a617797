"""pipelines.learning: the AUC against its pairwise definition, the regression against closed forms, the split."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from pipelines import learning


def pairwise_auc(positive: np.ndarray, score: np.ndarray) -> float:
    """P(a positive row scores above a negative one), ties a half: every pair, one by one."""
    pairs = list(itertools.product(score[positive], score[~positive]))
    return sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in pairs) / len(pairs)


@pytest.mark.parametrize("seed", range(4))
def test_the_auc_is_the_share_of_pairs_ranked_right_ties_a_half(seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, 60)
    probabilities = rng.dirichlet(np.ones(3), 60).round(1)  # rounded: many ties
    expected = np.mean([pairwise_auc(y == c, probabilities[:, c]) for c in range(3)])
    assert learning.auc(y, probabilities) == pytest.approx(expected, abs=1e-12)
    two = np.column_stack([1 - probabilities[:, 0], probabilities[:, 0]])
    assert learning.auc(y == 0, two) == pytest.approx(pairwise_auc(y == 0, probabilities[:, 0]), abs=1e-12)
    assert learning.auc(np.zeros(5, int), np.full((5, 2), 0.5)) is None  # one class: no AUC


def test_the_regression_of_one_feature_gives_the_labels_frequencies_given_it():
    """With one categorical feature, the maximum-likelihood softmax regression predicts, for each code, the share
    of each label among that code's rows (the L2 penalty is small enough to leave it within 0.01)."""
    rng = np.random.default_rng(1)
    a = rng.integers(0, 4, 5_000)
    shares = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4], [0.05, 0.05, 0.9]])
    y = np.array([rng.choice(3, p=shares[code]) for code in a])
    x = learning.one_hot({"a": a}, {"a": 4}, ["a"])
    assert x.shape == (5_000, 5) and np.all(x.sum(axis=1) == 2)  # one code and the intercept
    predicted = learning._softmax(learning.one_hot({"a": np.arange(4)}, {"a": 4}, ["a"]) @ learning.fit(x, y, 3))
    empirical = np.array([np.bincount(y[a == code], minlength=3) / np.sum(a == code) for code in range(4)])
    np.testing.assert_allclose(predicted, empirical, atol=0.01)


def table(rows: int, *, linked: bool, seed: int) -> dict[str, np.ndarray]:
    """y follows a (when ``linked``), b is noise."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 5, rows)
    y = np.where(rng.random(rows) < 0.9, a % 2, rng.integers(0, 2, rows)) if linked else rng.integers(0, 2, rows)
    return {"a": a, "y": y, "b": rng.integers(0, 3, rows)}


def test_rows_that_keep_the_link_score_as_the_real_ones_and_rows_that_lose_it_score_far_below():
    sizes = {"a": 5, "y": 2, "b": 3}
    real = table(3_000, linked=True, seed=2)
    kept = learning.train_on_synthetic(real, table(2_000, linked=True, seed=3), sizes, "y")
    lost = learning.train_on_synthetic(real, table(2_000, linked=False, seed=4), sizes, "y")
    assert kept["held_out"] == {"share": 0.2, "seed": learning.SPLIT_SEED, "rows": 600}
    assert kept["trained_on_real"]["rows"] == 2_400 and kept["trained_on_synthetic"]["rows"] == 2_000
    assert kept["trained_on_real"]["auc"] > 0.9 and kept["trained_on_synthetic"]["auc"] > 0.9
    assert abs(kept["trained_on_synthetic"]["auc"] - kept["trained_on_real"]["auc"]) < 0.02
    # trained on noise, the model's ranking is an accident (here well under a coin's 0.5), its guesses a coin's
    assert lost["trained_on_synthetic"]["auc"] < 0.75 and lost["trained_on_synthetic"]["accuracy"] < 0.65
    assert lost["trained_on_real"] == kept["trained_on_real"]
    held = np.random.default_rng(learning.SPLIT_SEED).permutation(3_000)[:600]
    majority = max(np.mean(real["y"][held] == 0), np.mean(real["y"][held] == 1))
    assert kept["majority_class_accuracy"] in (pytest.approx(majority), pytest.approx(1 - majority))


def test_too_few_rows_to_hold_some_out_are_refused():
    sizes = {"a": 5, "y": 2, "b": 3}
    with pytest.raises(ValueError, match="too few rows"):
        learning.train_on_synthetic(table(2, linked=True, seed=0), table(10, linked=True, seed=0), sizes, "y")
    with pytest.raises(ValueError, match="too few rows"):
        learning.train_on_synthetic(table(100, linked=True, seed=0), table(0, linked=True, seed=0), sizes, "y")
