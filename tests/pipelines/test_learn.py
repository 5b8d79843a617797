"""pipelines.learn end to end on NLTCS: the learner, the dead letter, a candidates file, bad arguments."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from commands import assert_usage_error
from public_tables import csv_path
from references import brute_force

from beam_expmech import halfspaces
from pipelines import learn

NLTCS = csv_path("nltcs")


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
                "--output", str(tmp_path / "out" / "h.json"),
                "--dead-letter", str(tmp_path / "h.dead_letter.csv")])  # fmt: skip
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
    with pytest.raises(ValueError, match=r"^candidates: the weights are too fine to decide pi \. x >= y exactly"):
        learn.main([*flags, "--candidates", str(tmp_path / "fine.txt"), "--epsilon", "1"])


@pytest.mark.parametrize(
    "change,message",
    [
        ({"--weights": ","}, "weight set is empty"),
        ({"--features": "a,y"}, "features must name distinct columns, none of them the label"),
        ({"--max-candidates": "3"}, "over the limit of 3"),
        ({"--weights": "1e-19,1"}, "weights: the weights are too fine to decide pi . x >= y exactly"),
        ({"--weights": "0.1,1/0"}, "a weight must be a finite number, such as 0.1 or 1/3"),
        ({"--epsilon": "0"}, "epsilon"),
    ],
)
def test_bad_arguments(tmp_path, change, message):
    (tmp_path / "d.csv").write_text("a,b,y\n1,0,1\n")
    args = {"--input": str(tmp_path / "d.csv"), "--features": "a,b", "--label": "y", "--epsilon": "1",
            "--output": str(tmp_path / "h.json"), **change}  # fmt: skip
    assert_usage_error("pipelines.learn", args, message)
