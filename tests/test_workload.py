"""All marginals of a workload in one pass (MarginalWorkload), on Beam, and the evaluation command."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.testing.util import assert_that, equal_to
from public_tables import DATA

from beam_expmech.predicates import MarginalWorkload
from beam_expmech.transforms import GatherCounts, PredicateCounts

NLTCS = DATA / "nltcs"


def table(rows: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({"a": rng.integers(0, 3, rows), "b": rng.integers(0, 2, rows), "c": rng.integers(0, 4, rows)})


def test_workload_counts_every_marginal_in_one_vector():
    data = table(5000)
    domain = {"a": 3, "b": 2, "c": 4}
    workload = MarginalWorkload(list(itertools.combinations("abc", 2)), domain)
    assert workload.num_candidates == 3 * 2 + 3 * 4 + 2 * 4
    split = workload.split(workload.count(data.to_batches()[0]))
    for (x, y), counts in split.items():
        expected = np.zeros((domain[x], domain[y]), int)
        np.add.at(expected, (data.column(x).to_numpy(), data.column(y).to_numpy()), 1)
        np.testing.assert_array_equal(counts, expected)
    assert workload.labels([0, 6]) == ["a=0,b=0", "a=0,c=0"]


def test_workload_on_beam_sums_across_batches():
    data = table(20_000, seed=1)
    workload = MarginalWorkload([("a",), ("b", "c")], {"a": 3, "b": 2, "c": 4})
    expected = workload.count(data.combine_chunks().to_batches()[0]).tolist()
    with beam.Pipeline() as pipeline:
        counts = (
            pipeline
            | beam.Create(data.to_batches(max_chunksize=1500))
            | PredicateCounts(workload)
            | GatherCounts()
            | beam.Map(np.ndarray.tolist)
        )
        assert_that(counts, equal_to([expected]))


def numpy_workload_error(real: np.ndarray, synthetic: np.ndarray, sizes: list[int], degree: int) -> list[float]:
    errors = []
    for cols in itertools.combinations(range(real.shape[1]), degree):
        shape = [sizes[c] for c in cols]
        p = np.bincount(np.ravel_multi_index(real[:, cols].T, shape), minlength=int(np.prod(shape))) / len(real)
        q = np.bincount(np.ravel_multi_index(synthetic[:, cols].T, shape), minlength=int(np.prod(shape))) / len(
            synthetic
        )
        errors.append(np.abs(p - q).sum())
    return errors


def run_evaluate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipelines.evaluate_synthetic", *args], capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def test_evaluate_synthetic_on_nltcs(tmp_path):
    lines = (NLTCS / "nltcs.csv").read_text().splitlines()
    (tmp_path / "sample.csv").write_text("\n".join(lines[:1501]) + "\n")
    run = run_evaluate(str(NLTCS / "nltcs.csv"), str(NLTCS / "domain.json"), str(tmp_path / "sample.csv"),
                       "--columns", ",".join(lines[0].split(",")[:6]))  # fmt: skip
    assert run.returncode == 0, run.stderr
    rows = np.array([[int(v) for v in line.split(",")] for line in lines[1:]])[:, :6]
    errors = numpy_workload_error(rows, rows[:1500], [2] * 6, 3)
    assert f"20 3-way marginals: average L1 error {np.mean(errors):.4f}, max {np.max(errors):.4f}" in run.stdout
    assert "not a release" in run.stdout


def test_evaluate_rejects_values_outside_the_domain(tmp_path):
    (tmp_path / "real.csv").write_text("a,b\n0,1\n1,0\n")
    (tmp_path / "synth.csv").write_text("a,b\n0,1\n2,0\n")
    (tmp_path / "domain.json").write_text(json.dumps({"a": 2, "b": 2}))
    run = run_evaluate(str(tmp_path / "real.csv"), str(tmp_path / "domain.json"), str(tmp_path / "synth.csv"),
                       "--degree", "2")  # fmt: skip
    assert run.returncode == 2 and "a: outside the domain [0, 2)" in run.stderr
