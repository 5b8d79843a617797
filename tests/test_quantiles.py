"""Private quantiles: the pmf from its definition, a uniform point inside the bin, accuracy on
real data, the pipeline (privacy over neighbouring histograms and the sampler: tests/audit)."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import assert_usage_error
from scipy import stats

from beam_expmech.mechanisms.quantile import private_quantile, quantile_probabilities, quantile_scores
from pipelines import quantiles


def reference_pmf(histogram, edges, q, epsilon, max_rows=1):
    """From the definition with math.exp: width * exp(-eps * dist(q n, [c_i, c_i+1]) / (2 K max(q, 1-q)))."""
    n, sensitivity = sum(histogram), max_rows * max(q, 1 - q)
    weights = []
    for i, width in enumerate(np.diff(edges)):
        low, high = sum(histogram[:i]), sum(histogram[: i + 1])
        distance = max(0, low - q * n, q * n - high)
        weights.append(width * math.exp(-epsilon * distance / (2 * sensitivity)))
    return np.array(weights) / sum(weights)


def test_pmf_matches_the_definition_with_unequal_and_zero_widths():
    histogram, edges = [3, 0, 5, 2, 7], [0.0, 0.5, 0.5, 2.0, 2.25, 4.0]
    for q in (0.1, 0.5, 0.75):
        got = quantile_probabilities(histogram, edges, q, epsilon=0.8, max_rows=2)
        np.testing.assert_allclose(got, reference_pmf(histogram, edges, q, 0.8, 2), rtol=1e-12)
        assert got[1] == 0.0  # zero width: never chosen, no NaN


def test_scores_are_exact_integers_and_sensitivity_is_never_rounded_down():
    scores, sensitivity = quantile_scores(np.array([4, 1, 0, 5]), 0.1, max_rows=3)
    a, b = (0.1).as_integer_ratio()
    ranks = [0, 4, 5, 5, 10]
    expected = [-max(0, b * low - a * 10, a * 10 - b * high) for low, high in itertools.pairwise(ranks)]
    assert [int(s) for s in scores] == expected
    assert sensitivity >= 3 * (b - a)


def test_point_inside_the_chosen_bin_is_uniform():
    histogram, edges = np.array([0, 1000, 0]), np.array([0.0, 10.0, 13.5, 20.0])
    rng = np.random.default_rng(32)
    points = np.array([private_quantile(histogram, edges, 0.5, epsilon=1e4, rng=rng) for _ in range(4_000)])
    assert ((points >= 10.0) & (points < 13.5)).all()
    assert stats.kstest((points - 10.0) / 3.5, "uniform").pvalue > 1e-6


def test_accuracy_on_a_payroll_sized_table():
    """135,727 pay codes in 0..32 (the size and the skew of a city payroll: most pay low, a long tail)."""
    rng = np.random.default_rng(33)
    pay = np.minimum(rng.lognormal(mean=2.3, sigma=0.6, size=135_727), 32.99).astype(int)
    gross = np.clip(pay + rng.integers(-2, 3, pay.size), 0, 32)  # a second, correlated column
    for values in (pay, gross):
        edges = np.linspace(0, 33, 4 * 33 + 1)  # a quarter-code grid
        histogram = np.histogram(values, bins=edges)[0]
        for q in (0.25, 0.5, 0.75):
            truth = np.quantile(values, q)
            estimates = [private_quantile(histogram, edges, q, epsilon=1.0, rng=rng) for _ in range(20)]
            # 135,727 rows at epsilon 1: the rank error is a few dozen rows, well inside one code.
            assert all(abs(e - truth) <= 1.0 for e in estimates), (q, truth, estimates)


def test_pipeline_releases_sorted_quantiles(tmp_path):
    rng = np.random.default_rng(34)
    values = rng.normal(50, 10, 40_000)
    values[:5] = [np.nan, np.inf, -np.inf, 1e9, -1e9]  # bad rows and values to clamp
    pq.write_table(pa.table({"x": values, "user": rng.integers(0, 4000, values.size)}), tmp_path / "d.parquet")
    out = tmp_path / "q.json"
    assert quantiles.main(["--input", str(tmp_path / "d.parquet"), "--column", "x", "--lower", "0", "--upper", "100",
                           "--quantiles", "0.9,0.1,0.5", "--epsilon", "3", "--privacy-unit", "user",
                           "--max-rows-per-unit", "2", "--output", str(out)]) == 0  # fmt: skip
    release = json.loads(out.read_text())
    assert list(release["quantiles"]) == ["0.1", "0.5", "0.9"]
    got = list(release["quantiles"].values())
    assert got == sorted(got)
    truth = np.quantile(values[5:], [0.1, 0.5, 0.9])
    assert np.allclose(got, truth, atol=1.0)
    assert release["epsilon_per_quantile"] == pytest.approx(1.0)
    assert set(release) == {"quantiles", "mechanism", "method", "epsilon", "epsilon_per_quantile", "lower", "upper",
                            "bins", "privacy_unit", "max_rows_per_unit", "accuracy", "private_randomness"}  # fmt: skip
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
        ({"--lower": "5", "--upper": "5"}, "--lower must be below --upper"),
        ({"--quantiles": "0.5,1.0"}, "quantile 1.0"),
        ({"--quantiles": "0.5,0.5"}, "duplicate"),
        ({"--epsilon": "-1"}, "epsilon"),
        ({"--bins": "0"}, "bins"),
    ],
)
def test_bad_arguments(tmp_path, change, message):
    pq.write_table(pa.table({"x": [1.0, 2.0]}), tmp_path / "d.parquet")
    args = {"--input": str(tmp_path / "d.parquet"), "--column": "x", "--lower": "0", "--upper": "10",
            "--quantiles": "0.5", "--epsilon": "1", "--output": str(tmp_path / "q.json"), **change}  # fmt: skip
    assert_usage_error("pipelines.quantiles", args, message)
