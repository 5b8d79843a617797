"""The private halfspace learner: exact fit counts from bit patterns, and the pipeline on NLTCS."""

from __future__ import annotations

import csv
import itertools
import json
import re
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pytest
from conftest import assert_usage_error
from public_tables import csv_path

from beam_expmech import halfspaces
from beam_expmech.predicates import MarginalCounts
from pipelines import learn

NLTCS = csv_path("nltcs")


def brute_force(x: np.ndarray, y: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """Row by row: how many records each candidate fits."""
    return np.array([int(((x @ w) >= y).sum()) for w in candidates])


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


def nltcs_columns():
    with open(NLTCS) as handle:
        header = next(csv.reader(handle))
        data = np.array([[int(v) for v in row] for row in csv.reader(handle)])
    return header, data


@pytest.mark.parametrize("epsilon", [1e4, 0.01])
def test_learner_on_nltcs(tmp_path, epsilon):
    header, data = nltcs_columns()
    features, label = header[:4], header[4]
    out = tmp_path / "h.json"
    assert learn.main(["--input", str(NLTCS), "--features", ",".join(features), "--label", label,
                       "--weights", "-1,0,1", "--epsilon", str(epsilon), "--output", str(out)]) == 0  # fmt: skip
    release = json.loads(out.read_text())
    candidates = halfspaces.weight_grid([-1, 0, 1], 4, max_candidates=100)
    weights = [candidates.weights(i) for i in range(len(candidates))]
    fits = brute_force(data[:, :4], data[:, 4], np.array(weights))
    chosen = fits[weights.index(release["weights"])]
    if epsilon > 1:
        assert chosen == fits.max()  # with a large epsilon, the best halfspace in the grid
    assert release["num_candidates"] == 81 and release["monotonic"] and release["sensitivity"] == 1
    assert "accuracy" in release and set(release) >= {"weights", "features", "label", "epsilon"}
    assert "train" not in json.dumps(release)  # no training accuracy: it would be a non-private release


def test_non_binary_values_go_to_the_dead_letter(tmp_path):
    (tmp_path / "d.csv").write_text("a,b,y\n1,0,1\n2,0,1\n0,1,0\n1,1,-1\n")
    learn.main(["--input", str(tmp_path / "d.csv"), "--features", "a,b", "--label", "y", "--epsilon", "1",
                "--output", str(tmp_path / "h.json")])  # fmt: skip
    dead = (tmp_path / "h.dead_letter.csv").read_text().splitlines()
    assert sorted(dead[1:]) == sorted(['"2","0","1","a: outside the domain [0, 2)"',
                                       '"1","1","-1","y: outside the domain [0, 2)"'])  # fmt: skip


def test_a_candidates_file_is_read_exactly_as_written(tmp_path):
    # (0.7, 0.2, 0.1) fits x = (1, 1, 1), y = 1 (7/10 + 2/10 + 1/10 = 1) though float64 sums it to
    # 0.9999999999999999: it fits 30 records and (1, -1, 0) fits 10, so it wins.
    (tmp_path / "d.csv").write_text("a,b,c,y\n" + "1,1,1,1\n" * 30 + "1,0,0,1\n" * 10)
    (tmp_path / "c.txt").write_text("0.7,0.2,0.1\n1,-1,0\n")
    (tmp_path / "fine.txt").write_text("1e-19,1,0\n0,0,0\n")
    out = tmp_path / "h.json"
    flags = ["--input", str(tmp_path / "d.csv"), "--features", "a,b,c", "--label", "y", "--output", str(out)]
    assert learn.main([*flags, "--candidates", str(tmp_path / "c.txt"), "--epsilon", "10", "--seed", "3"]) == 0
    assert json.loads(out.read_text())["weights"] == [0.7, 0.2, 0.1]  # as written, as numbers
    with pytest.raises(ValueError, match=f"^{re.escape(str(tmp_path / 'fine.txt'))}: the weights are too fine"):
        learn.main([*flags, "--candidates", str(tmp_path / "fine.txt"), "--epsilon", "1"])


@pytest.mark.parametrize(
    "change,message",
    [
        ({"--weights": ","}, "weight set is empty"),
        ({"--features": "a,y"}, "none of them the --label"),
        ({"--max-candidates": "3"}, "over the limit of 3"),
        ({"--weights": "1e-19,1"}, "--weights: the weights are too fine to decide pi . x >= y exactly"),
        ({"--weights": "0.1,1/0"}, "--weights must be numbers separated by commas"),
        ({"--epsilon": "0"}, "epsilon"),
    ],
)
def test_bad_arguments(tmp_path, change, message):
    (tmp_path / "d.csv").write_text("a,b,y\n1,0,1\n")
    args = {"--input": str(tmp_path / "d.csv"), "--features": "a,b", "--label": "y", "--epsilon": "1",
            "--output": str(tmp_path / "h.json"), **change}  # fmt: skip
    assert_usage_error("pipelines.learn", args, message)
