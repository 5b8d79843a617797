"""The private halfspace learner: exact fit counts from bit patterns, and the pipeline on NLTCS."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import assert_usage_error

from beam_expmech import halfspaces
from beam_expmech.predicates import MarginalCounts
from pipelines import learn

NLTCS = Path(__file__).resolve().parents[2] / "shared" / "data" / "nltcs" / "nltcs.csv"


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
    np.testing.assert_array_equal(halfspaces.fit_counts(patterns, candidates), brute_force(x, y, candidates))


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
    fits = brute_force(data[:, :4], data[:, 4], candidates)
    chosen = fits[candidates.tolist().index(release["weights"])]
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


@pytest.mark.parametrize(
    "change,message",
    [
        ({"--weights": ","}, "weight set is empty"),
        ({"--features": "a,y"}, "none of them the --label"),
        ({"--max-candidates": "3"}, "over the limit of 3"),
        ({"--epsilon": "0"}, "epsilon"),
    ],
)
def test_bad_arguments(tmp_path, change, message):
    (tmp_path / "d.csv").write_text("a,b,y\n1,0,1\n")
    args = {"--input": str(tmp_path / "d.csv"), "--features": "a,b", "--label": "y", "--epsilon": "1",
            "--output": str(tmp_path / "h.json"), **change}  # fmt: skip
    assert_usage_error("pipelines.learn", args, message)
