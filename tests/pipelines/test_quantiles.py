"""pipelines.quantiles end to end: sorted releases, the joint method, bad arguments."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from commands import assert_usage_error

from beam_expmech.manifest import FIXED_FIELDS
from pipelines import quantiles


def test_pipeline_releases_sorted_quantiles(tmp_path):
    rng = np.random.default_rng(34)
    values = rng.normal(50, 10, 40_000)
    values[:5] = [np.nan, np.inf, -np.inf, 1e9, -1e9]  # bad rows and values to clamp
    pq.write_table(pa.table({"x": values, "user": rng.integers(0, 4000, values.size)}), tmp_path / "d.parquet")
    out = tmp_path / "out" / "q.json"
    assert quantiles.main(["--input", str(tmp_path / "d.parquet"), "--column", "x", "--lower", "0", "--upper", "100",
                           "--quantiles", "0.9,0.1,0.5", "--epsilon", "3", "--privacy-unit", "user",
                           "--max-rows-per-unit", "2", "--output", str(out),
                           "--dead-letter", str(tmp_path / "q.dead_letter.csv")]) == 0  # fmt: skip
    release = json.loads(out.read_text())
    assert list(release["quantiles"]) == ["0.1", "0.5", "0.9"]
    got = list(release["quantiles"].values())
    assert got == sorted(got)
    truth = np.quantile(values[5:], [0.1, 0.5, 0.9])
    assert np.allclose(got, truth, atol=1.0)
    assert release["epsilon_per_quantile"] == pytest.approx(1.0)
    assert set(release) == {"quantiles", *FIXED_FIELDS, "method", "epsilon_per_quantile", "lower", "upper", "bins"}
    dead = (tmp_path / "q.dead_letter.csv").read_text().splitlines()
    assert len(dead) == 1 + 3 and all("NaN or infinite" in line for line in dead[1:])


def test_pipeline_joint_method(tmp_path):
    values = np.random.default_rng(35).lognormal(3, 0.5, 50_000)
    pq.write_table(pa.table({"x": values}), tmp_path / "d.parquet")
    qs = [i / 10 for i in range(1, 10)]
    out = tmp_path / "q.json"
    assert quantiles.main(["--input", str(tmp_path / "d.parquet"), "--column", "x", "--lower", "0", "--upper", "200",
                           "--quantiles", ",".join(map(str, qs)), "--epsilon", "1", "--method", "joint",
                           "--output", str(out)]) == 0  # fmt: skip
    release = json.loads(out.read_text())
    assert release["method"] == "joint" and release["epsilon_per_quantile"] is None
    got = list(release["quantiles"].values())
    assert got == sorted(got)
    np.testing.assert_allclose(got, np.quantile(values, qs), atol=1.0)  # joint bins are 200/1024 wide


@pytest.mark.parametrize(
    "change,message",
    [
        ({"--lower": "5", "--upper": "5"}, "lower must be below upper, both finite"),
        ({"--quantiles": "0.5,1.0"}, "quantile 1.0"),
        ({"--quantiles": "0.5,0.5"}, "quantiles 0.5, 0.5: two would be released under one name"),
        ({"--epsilon": "-1"}, "epsilon"),
        ({"--bins": "0"}, "bins"),
    ],
)
def test_bad_arguments(tmp_path, change, message):
    pq.write_table(pa.table({"x": [1.0, 2.0]}), tmp_path / "d.parquet")
    args = {"--input": str(tmp_path / "d.parquet"), "--column": "x", "--lower": "0", "--upper": "10",
            "--quantiles": "0.5", "--epsilon": "1", "--output": str(tmp_path / "q.json"), **change}  # fmt: skip
    assert_usage_error("pipelines.quantiles", args, message)
