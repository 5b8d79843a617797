"""pipelines.evaluate_synthetic: the workload error against a numpy reference, values outside the domain."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from public_tables import DATA

from beam_expmech.io.release_files import manifest_path
from pipelines import evaluate_synthetic, learning

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
    (tmp_path / "published").mkdir()
    (tmp_path / "published" / "sample.csv").write_text("\n".join(lines[:1501]) + "\n")
    run = run_evaluate(str(NLTCS / "nltcs.csv"), str(NLTCS / "domain.json"), str(tmp_path / "published" / "sample.csv"),
                       "--columns", ",".join(lines[0].split(",")[:6]),
                       "--json", str(tmp_path / "owner" / "e.json"))  # fmt: skip
    assert run.returncode == 0, run.stderr
    rows = np.array([[int(v) for v in line.split(",")] for line in lines[1:]])[:, :6]
    errors = numpy_workload_error(rows, rows[:1500], [2] * 6, 3)
    assert f"20 3-way marginals: average L1 error {np.mean(errors):.4f}, max {np.max(errors):.4f}" in run.stdout
    assert "not a release" in run.stdout
    result = json.loads((tmp_path / "owner" / "e.json").read_text())
    refused = run_evaluate(
        str(NLTCS / "nltcs.csv"),
        str(NLTCS / "domain.json"),
        str(tmp_path / "sample.csv"),
        "--report",
        str(tmp_path / "report.html"),
    )  # beside the table: exact shares, refused
    assert refused.returncode == 2 and "must lie outside the synthetic table's folder" in refused.stderr
    names = lines[0].split(",")[:6]
    by_marginal = {tuple(e["columns"]): e["error"] for e in result["errors"]}
    expected = dict(zip(itertools.combinations(names, 3), errors, strict=True))
    assert by_marginal.keys() == expected.keys()
    assert all(abs(by_marginal[m] - expected[m]) < 1e-12 for m in expected)
    assert result["workload"]["max_error"] == max(by_marginal.values())
    assert result["rows"] == {"real": len(rows), "synthetic": 1500}
    assert "not a differentially private release" in result["evaluation"]


def test_evaluate_rejects_values_outside_the_domain(tmp_path):
    (tmp_path / "real.csv").write_text("a,b\n0,1\n1,0\n")
    (tmp_path / "synth.csv").write_text("a,b\n0,1\n2,0\n")
    (tmp_path / "domain.json").write_text(json.dumps({"a": 2, "b": 2}))
    run = run_evaluate(str(tmp_path / "real.csv"), str(tmp_path / "domain.json"), str(tmp_path / "synth.csv"),
                       "--degree", "2")  # fmt: skip
    assert run.returncode == 2 and "a: outside the domain [0, 2)" in run.stderr


def test_a_numeric_column_is_counted_on_its_grid_in_both_tables(tmp_path, capsys):
    """Real x (integers, Parquet) 0, 5, 9, 12 on bins [0, 5) and [5, 10]: 1 and 3 (12 clamped into the last);
    synthetic x (CSV, read as floats) 1, 2, 7.5: 2 and 1. L1 = |1/4 - 2/3| + |3/4 - 1/3| = 5/6. y: 2 and 2
    against 1 and 2, L1 = 1/3. The average of the two 1-way marginals: 7/12."""
    pq.write_table(pa.table({"x": [0, 5, 9, 12], "y": [0, 0, 1, 1]}), tmp_path / "real.parquet")
    (tmp_path / "synth.csv").write_text("x,y\n1,0\n2,1\n7.5,1\n")
    (tmp_path / "domain.json").write_text(json.dumps({"x": {"lower": 0, "upper": 10, "bins": 2}, "y": 2}))
    assert evaluate_synthetic.main([str(tmp_path / "real.parquet"), str(tmp_path / "domain.json"),
                                    str(tmp_path / "synth.csv"), "--degree", "1"]) == 0  # fmt: skip
    assert f"2 1-way marginals: average L1 error {7 / 12:.4f}, max {5 / 6:.4f}" in capsys.readouterr().out


def test_evaluate_refuses_a_numeric_grid_on_a_text_column(tmp_path):
    pq.write_table(pa.table({"x": ["0", "5"]}), tmp_path / "real.parquet")
    (tmp_path / "synth.csv").write_text("x\n1\n")
    (tmp_path / "domain.json").write_text(json.dumps({"x": {"lower": 0, "upper": 10, "bins": 2}}))
    run = run_evaluate(str(tmp_path / "real.parquet"), str(tmp_path / "domain.json"), str(tmp_path / "synth.csv"),
                       "--degree", "1")  # fmt: skip
    assert run.returncode == 2 and "column 'x' holds text, but" in run.stderr


def test_semicolon_files_are_read_with_delimiter_and_refused_without(tmp_path):
    """Both tables as ';'-separated CSV: with --delimiter ';' the same numbers as the comma files; without it,
    the missing column and the hint; --delimiter where neither table is CSV, refused."""
    lines = (NLTCS / "nltcs.csv").read_text().splitlines()[:801]
    (tmp_path / "real.csv").write_text("\n".join(lines) + "\n")
    (tmp_path / "published").mkdir()
    (tmp_path / "published" / "sample.csv").write_text("\n".join(lines[:301]) + "\n")
    for name in ("real.csv", "published/sample.csv"):
        (tmp_path / name.replace(".csv", ".semi.csv")).write_text((tmp_path / name).read_text().replace(",", ";"))
    columns = ("--columns", ",".join(lines[0].split(",")[:4]))
    comma = run_evaluate(str(tmp_path / "real.csv"), str(NLTCS / "domain.json"),
                         str(tmp_path / "published" / "sample.csv"), *columns)  # fmt: skip
    semi = [
        str(tmp_path / "real.semi.csv"),
        str(NLTCS / "domain.json"),
        str(tmp_path / "published" / "sample.semi.csv"),
    ]
    semicolon = run_evaluate(*semi, *columns, "--delimiter", ";")
    assert comma.returncode == semicolon.returncode == 0, semicolon.stderr
    assert semicolon.stdout == comma.stdout
    unsaid = run_evaluate(*semi, *columns)
    assert unsaid.returncode == 2 and "is that the delimiter? --delimiter" in unsaid.stderr
    table = pa.table({c: np.zeros(3, np.int64) for c in lines[0].split(",")[:4]})
    pq.write_table(table, tmp_path / "real.parquet")
    pq.write_table(table, tmp_path / "published" / "s.parquet")
    parquet = run_evaluate(str(tmp_path / "real.parquet"), str(NLTCS / "domain.json"),
                           str(tmp_path / "published" / "s.parquet"), *columns, "--delimiter", ";")  # fmt: skip
    assert parquet.returncode == 2 and "--delimiter is for CSV files, and neither table is one" in parquet.stderr


def test_a_target_adds_what_the_rows_teach_a_classifier_of_it(tmp_path):
    """Real rows as the "synthetic" table: trained on them, a model of bathing scores as one trained on real rows
    held apart (the same rows, bar the held-out ones); a bad target is refused."""
    lines = (NLTCS / "nltcs.csv").read_text().splitlines()
    (tmp_path / "published").mkdir()
    sample = tmp_path / "published" / "sample.csv"
    sample.write_text("\n".join(lines[:3001]) + "\n")
    columns = ",".join(lines[0].split(",")[:6])
    run = run_evaluate(str(NLTCS / "nltcs.csv"), str(NLTCS / "domain.json"), str(sample), "--columns", columns,
                       "--target", "bathing", "--json", str(tmp_path / "owner" / "e.json"))  # fmt: skip
    assert run.returncode == 0, run.stderr
    learned = json.loads((tmp_path / "owner" / "e.json").read_text())["learning"]
    synthetic, real = learned["trained_on_synthetic"], learned["trained_on_real"]
    assert f"bathing, held-out real rows: AUC {synthetic['auc']:.3f} trained on the synthetic rows" in run.stdout
    assert real["auc"] > 0.8 and abs(synthetic["auc"] - real["auc"]) < 0.02
    assert learned["held_out"]["rows"] == round(0.2 * (len(lines) - 1))
    refused = run_evaluate(str(NLTCS / "nltcs.csv"), str(NLTCS / "domain.json"), str(sample),
                           "--columns", columns, "--target", "walking")  # fmt: skip
    assert refused.returncode == 2 and "--target 'walking' must be one of the columns evaluated" in refused.stderr


@pytest.mark.parametrize(("synthesized_for", "said"), [
    ("bathing", None), ("eating", "the target 'eating'"), (None, "no target"), ("no manifest", None),
])  # fmt: skip
def test_a_target_other_than_the_manifests_is_said(tmp_path, capsys, synthesized_for, said):
    """A classifier of a column the rows were not synthesized for scores what they were not made for: said on
    stderr and in the JSON, not where the manifest names that target or there is none."""
    lines = (NLTCS / "nltcs.csv").read_text().splitlines()
    (tmp_path / "published").mkdir()
    sample = tmp_path / "published" / "sample.csv"
    sample.write_text("\n".join(lines[:1001]) + "\n")
    if synthesized_for != "no manifest":
        Path(manifest_path(str(sample))).write_text(json.dumps({"generator": "aim", "target": synthesized_for}))
    code = evaluate_synthetic.main([str(NLTCS / "nltcs.csv"), str(NLTCS / "domain.json"), str(sample), "--columns",
                                    ",".join(lines[0].split(",")[:6]), "--target", "bathing", "--json",
                                    str(tmp_path / "owner" / "e.json")])  # fmt: skip
    assert code == 0
    assert json.loads((tmp_path / "owner" / "e.json").read_text())["learning"]["synthesized_for"] == said
    note = f"note: the synthetic rows were synthesized for {said} (their manifest), not --target 'bathing'"
    assert (note in capsys.readouterr().err) == (said is not None)


def test_learning_samples_a_large_table_as_it_reads_it(tmp_path, monkeypatch):
    """Review: every row of both tables was held; above learning.MAX_ROWS each table is sampled as it is read."""
    monkeypatch.setattr(learning, "MAX_ROWS", 2_000)
    lines = (NLTCS / "nltcs.csv").read_text().splitlines()
    (tmp_path / "sample.csv").write_text("\n".join(lines[:3001]) + "\n")
    result = evaluate_synthetic.evaluation(str(NLTCS / "nltcs.csv"), str(NLTCS / "domain.json"),
                                           str(tmp_path / "sample.csv"), columns=lines[0].split(",")[:6],
                                           target="bathing")  # fmt: skip
    learned = result["learning"]
    real = learned["held_out"]["rows"] + learned["trained_on_real"]["rows"]
    assert result["rows"]["real"] == len(lines) - 1 and 1_800 < real < 2_200  # about 2,000 of 21,574
    assert 1_800 < learned["trained_on_synthetic"]["rows"] < 2_200  # about 2,000 of 3,000
    assert learned["trained_on_real"]["auc"] > 0.8
