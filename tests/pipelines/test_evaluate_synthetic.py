"""pipelines.evaluate_synthetic: the workload error against a numpy reference, values outside the domain."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import numpy as np
from public_tables import DATA

NLTCS = DATA / "nltcs"


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
