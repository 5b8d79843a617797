"""Halfspace candidates: exact fit counts from bit patterns, weights decided exactly as written, limits."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pytest
from references import brute_force

from beam_expmech import halfspaces
from beam_expmech.predicates import MarginalCounts


def test_fit_counts_from_patterns_equal_the_row_by_row_count():
    rng = np.random.default_rng(41)
    x, y = rng.integers(0, 2, (3000, 5)), rng.integers(0, 2, 3000)
    names = [f"x{j}" for j in range(5)]
    batch = pa.record_batch({**{n: x[:, j] for j, n in enumerate(names)}, "y": y})
    patterns = MarginalCounts([*names, "y"], [2] * 6).count(batch)
    candidates = halfspaces.weight_grid([-1, 0, 0.5, 1], 5, max_candidates=10_000)
    weights = candidates.numerators / candidates.denominator  # dyadic: exact in float64
    np.testing.assert_array_equal(halfspaces.fit_counts(patterns, candidates), brute_force(x, y, weights))


FRACTIONAL = ["0.1", "0.2", "0.3", "0.7"]


def exact_fits(weights: list[str], num_features: int) -> np.ndarray:
    """Row by row in rationals, as written: does grid candidate i fit pattern p? (candidates, 2^(d+1)) bits.

    The grid's candidates are itertools.product of the sorted weights; pattern p holds the bits of
    (x_1 .. x_d, y), x_1 the most significant.
    """
    values = sorted(Fraction(w) for w in weights)
    patterns = list(itertools.product((0, 1), repeat=num_features + 1))
    return np.array([[int(sum(w * b for w, b in zip(pi, bits[:-1], strict=True)) >= bits[-1]) for bits in patterns]
                     for pi in itertools.product(values, repeat=num_features)])  # fmt: skip


def test_fractional_weights_are_decided_exactly_as_written():
    # 7/10 + 2/10 + 1/10 = 1: every order of (0.7, 0.2, 0.1) fits x = (1, 1, 1), y = 1, though
    # float64 sums some orders to just below 1.
    assert 0.7 + 0.2 + 0.1 < 1 <= 0.1 + 0.2 + 0.7
    candidates = halfspaces.weight_grid(FRACTIONAL, 3, max_candidates=100)
    fits = exact_fits(FRACTIONAL, 3)
    for pattern in range(16):
        np.testing.assert_array_equal(halfspaces.fit_counts(np.eye(16, dtype=np.int64)[pattern], candidates),
                                      fits[:, pattern], err_msg=f"pattern {pattern}")  # fmt: skip
    assert fits[:, 15].sum() > 0 and not fits[:, 15].all()  # the check has teeth: some fit, some do not


@pytest.mark.parametrize("num_features", [3, 4])
def test_a_fit_depends_on_the_candidate_and_the_pattern_alone(num_features):
    """A score is the sum of its per-pattern fits, whatever other patterns occur: one record moves it by 0 or 1.

    (Deciding pi . x >= y in float64 over the patterns present once moved a score from 0 to
    1,000,001 when one record of another pattern was added: the product's rounding depends on its shape.)
    """
    cells = 2 ** (num_features + 1)
    candidates = halfspaces.weight_grid(FRACTIONAL, num_features, max_candidates=10_000)
    fits = exact_fits(FRACTIONAL, num_features)
    rng = np.random.default_rng(num_features)
    histograms = [np.eye(cells, dtype=np.int64)[p] * 1_000_000 for p in range(1, cells, 2)]  # one heavy y = 1 pattern
    histograms += [rng.integers(0, 3, cells) * rng.integers(0, 2, cells) for _ in range(20)]  # some patterns absent
    scores = [halfspaces.fit_counts(histogram, candidates) for histogram in histograms]
    moves = [[halfspaces.fit_counts(histogram + one, candidates) - before for one in np.eye(cells, dtype=np.int64)]
             for histogram, before in zip(histograms, scores, strict=True)]  # one more record, anywhere  # fmt: skip
    assert np.isin(moves, [0, 1]).all(), f"one record moved a score by {np.abs(moves).max():,}"
    for histogram, before, moved in zip(histograms, scores, moves, strict=True):
        np.testing.assert_array_equal(np.transpose(moved), fits)  # each pattern's own fits, as written
        np.testing.assert_array_equal(before, fits @ histogram)


def test_weights_finer_than_float64_are_decided_in_int64():
    # Over the denominator 10^16 the numerator 9999999999999999 is odd and above 2^53: float64
    # would round it to 10^16 and make (0.9999999999999999, 0) fit x = (1, 0), y = 1.
    weights = ["0", "0.9999999999999999", "0.0000000000000001", "1"]
    candidates = halfspaces.weight_grid(weights, 2, max_candidates=100)
    assert candidates.denominator >= 2**53
    fits = exact_fits(weights, 2)
    for pattern in range(8):
        np.testing.assert_array_equal(halfspaces.fit_counts(np.eye(8, dtype=np.int64)[pattern], candidates),
                                      fits[:, pattern], err_msg=f"pattern {pattern}")  # fmt: skip
    assert fits[2 * 4 + 0, 0b101] == 0  # candidate (0.9999999999999999, 0) of the sorted grid, pattern (1, 0; 1)


def test_weights_too_fine_to_decide_exactly_are_refused():
    with pytest.raises(ValueError, match=r"^--weights: the weights are too fine .* over 62"):
        halfspaces.weight_grid(["1e-19", "1"], 2, max_candidates=100)
    with pytest.raises(ValueError, match=r"^c\.txt: the weights are too fine"):
        halfspaces.check_candidates([["1/3", "1e-18"], ["1", "0"]], 2, max_candidates=100, name="c.txt")
    with pytest.raises(ValueError, match="finite number"):
        halfspaces.check_candidates([[float("nan"), 0.0]], 2, max_candidates=100)


def test_too_many_candidates_names_the_count_and_the_limit():
    with pytest.raises(ValueError, match=r"14,348,907 candidates, over the limit of 100,000"):
        halfspaces.weight_grid([-1, 0, 1], 15, max_candidates=100_000)
    with pytest.raises(ValueError, match="empty"):
        halfspaces.weight_grid([], 3, max_candidates=10)
    with pytest.raises(ValueError, match="distinct"):
        halfspaces.check_candidates(np.array([[1.0, 0.0], [1.0, 0.0]]), 2, max_candidates=10)
