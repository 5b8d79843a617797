"""Every pipeline against the adversarial corpus (corpus.py): a one-line refusal before any budget is
spent, or the clean rows' release with the bad rows in the dead letter, or a clean failure. Never a
traceback, never a silently different answer, never an output that looks complete but is not, and
never the planted secret in any output, log record (ours at DEBUG) or exception text."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from corpus_cases import CASES, ITEMS, SECRET, Case, big_unit_rows, clean_rows, csv_text, write_corpus

from beam_expmech.ledger import Ledger
from beam_expmech.manifest import FIXED_FIELDS
from pipelines import console, learn, quantiles, select, synthesize

PIPELINES = {
    "select": (select, ["--column", "item", "--candidate-range", f"0:{ITEMS}", "--top-k", "2"], "json"),
    "quantiles": (
        quantiles,
        ["--column", "x", "--lower", "0", "--upper", "10", "--quantiles", "0.25,0.5,0.75", "--bins", "64"],
        "json",
    ),
    "learn": (learn, ["--features", "f0,f1", "--label", "y"], "json"),
    "synthesize": (
        synthesize,
        ["--domain", "{domain}", "--method", "mwem", "--rounds", "2", "--rows", "50"],
        "parquet",
    ),
}
# K above any clean user's row count: bounding keeps every clean row, so releases can be compared.
UNIT = ["--privacy-unit", "user", "--max-rows-per-unit", "40", "--epsilon", "1", "--seed", "3"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("corpus")
    (folder / "domain.json").write_text(json.dumps({"item": ITEMS, "f0": 2, "f1": 2, "y": 2}))
    write_corpus(folder, clean_rows())
    return folder


def run(pipeline: str, source: str, folder: Path, out: Path, capsys, caplog, *extra: str) -> tuple[int, str, Ledger]:
    """The pipeline on ``source`` as its command line runs it (our loggers at DEBUG), charged to a fresh
    ledger; whatever it prints or logs must not show the planted secret. ``extra`` flags (a flag, then its
    value) take the place of the same flags' defaults here (a flag given twice is refused)."""
    module, flags, _kind = PIPELINES[pipeline]
    ledger = Ledger(str(out.parent / "ledger.json"))
    ledger.init("d", epsilon=100.0)
    flags = [f.replace("{domain}", str(folder / "domain.json")) for f in flags]
    argv = ["--input", source, *flags, *UNIT, "--output", str(out), "--dead-letter", str(dead_letter_of(out)),
            "--budget-ledger", ledger.path, "--dataset-id", "d", "--log-level", "DEBUG"]  # fmt: skip
    given = dict(zip(argv[::2], argv[1::2], strict=True)) | dict(zip(extra[::2], extra[1::2], strict=True))
    argv = [x for flag_value in given.items() for x in flag_value]
    capsys.readouterr()
    code = console.run_cli(module.main, argv)  # an uncaught exception here is a traceback: the test fails
    printed = capsys.readouterr()
    assert SECRET not in printed.out + printed.err + caplog.text  # caplog.text holds every traceback logged
    return code, printed.err, ledger


def released(out: Path, kind: str):
    if kind == "json":
        return json.loads(out.read_text())
    return pq.read_table(out).to_pydict()


def dead_letter_of(out: Path) -> Path:
    """Where a run keeps its rejected rows: beside the release's folder, never inside it (refused there)."""
    return out.parent.parent / f"{out.parent.name}.dead_letter.csv"


def dead_letter_rows(out: Path) -> int:
    with open(dead_letter_of(out), newline="") as handle:
        return sum(1 for _ in csv.reader(handle)) - 1


BASELINES: dict = {}


def baseline(pipeline: str, folder: Path, name: str, tmp_path_factory, capsys, caplog):
    if (pipeline, name) not in BASELINES:
        out = tmp_path_factory.mktemp(f"baseline-{pipeline}") / ("out.json" if PIPELINES[pipeline][2] == "json"
                                                                    else "out.parquet")  # fmt: skip
        code, err, _ = run(pipeline, str(folder / name), folder, out, capsys, caplog)
        assert code == 0, err
        BASELINES[pipeline, name] = released(out, PIPELINES[pipeline][2])
    return BASELINES[pipeline, name]


@pytest.mark.parametrize(
    "pipeline,case",
    [(p, c) for c in CASES for p in sorted(PIPELINES) if c.applies_to(p)],
    ids=lambda v: v if isinstance(v, str) else v.name,
)
def test_every_pipeline_on_every_corpus_file(
    pipeline: str, case: Case, corpus, tmp_path, tmp_path_factory, capsys, caplog
):
    folder = corpus
    kind = PIPELINES[pipeline][2]
    out = tmp_path / ("out.json" if kind == "json" else "out.parquet")
    code, err, ledger = run(pipeline, str(folder / case.file), folder, out, capsys, caplog)
    records = ledger.dataset("d")["releases"]
    lines = err.strip().splitlines()
    if case.expect == "usage":
        assert code == console.USAGE_ERROR and len(lines) == 1 and lines[0].startswith("error: "), err
        assert records == [] and not out.exists()
    elif case.expect == "failed":
        assert code == console.JOB_ERROR and lines[-1].startswith("error: "), err
        assert [r["status"] for r in records] == ["failed"] and not out.exists()
    else:
        assert code == 0, err
        assert [r["status"] for r in records] == ["done"]
        assert dead_letter_rows(out) == case.rejected(pipeline)
        manifest = json.loads((out if kind == "json" else out.with_suffix(".manifest.json")).read_text())
        assert set(FIXED_FIELDS) <= set(manifest), f"{pipeline}: a release without the fields every release carries"
        if case.same_as is not None:
            assert released(out, kind) == baseline(pipeline, folder, case.same_as, tmp_path_factory, capsys, caplog)


def test_one_unit_with_a_million_rows_is_bounded(tmp_path, capsys, caplog):
    rows = big_unit_rows(clean_rows(), 1_000_000)
    (tmp_path / "big.csv").write_text(csv_text(rows))
    out = tmp_path / "out.json"
    code, err, _ledger = run("select", str(tmp_path / "big.csv"), tmp_path, out, capsys, caplog)
    assert code == 0, err
    assert dead_letter_rows(out) == 0 and released(out, "json")["max_rows_per_unit"] == 40


@pytest.mark.parametrize("pipeline,column", [("select", "item"), ("quantiles", "x"), ("learn", "f1"),
                                             ("synthesize", "y")])  # fmt: skip
def test_a_privacy_unit_that_is_also_a_column_the_release_reads(pipeline, column, corpus, tmp_path, capsys, caplog):
    out = tmp_path / ("out.json" if PIPELINES[pipeline][2] == "json" else "out.parquet")
    code, err, ledger = run(pipeline, str(corpus / "clean.csv"), corpus, out, capsys, caplog, "--privacy-unit", column)
    assert (
        code == console.USAGE_ERROR
        and err == f"error: the privacy unit {column!r} is also a column the release reads\n"
    )
    assert ledger.dataset("d")["releases"] == [] and not out.exists()


@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
def test_a_bucket_that_does_not_exist(pipeline, gcs_emulator, corpus, tmp_path, capsys, caplog):
    out = tmp_path / ("out.json" if PIPELINES[pipeline][2] == "json" else "out.parquet")
    code, err, ledger = run(pipeline, "gs://no-such-bucket/data/*.parquet", corpus, out, capsys, caplog)
    assert code == console.USAGE_ERROR and err.count("\n") == 1 and "no-such-bucket" in err
    assert ledger.dataset("d")["releases"] == [] and not out.exists()


# DEBUG only: a level is a threshold, so whatever a run prints at INFO it prints at DEBUG too.
@pytest.mark.parametrize("level", ["DEBUG"])
@pytest.mark.parametrize(
    "name,code",
    [
        ("int64_max_and_negative_codes", 0),  # the secret in units kept: rows Beam handles (and at DEBUG would log)
        ("corrupt_parquet_pages", console.JOB_ERROR),
        ("malformed_rows", 0),
        ("malformed_row_not_utf8", 0),
    ],
)
def test_the_command_line_prints_no_data_value(name, code, level, corpus, tmp_path):
    """The installed command, with its own logging (Beam's error filter, Python's report of ignored errors,
    Beam's loggers kept at WARNING whatever --log-level)."""
    source = corpus / next(c.file for c in CASES if c.name == name)
    script = str(Path(sys.executable).with_name("beam-expmech"))
    run = subprocess.run([script, "select", "--input", str(source), *PIPELINES["select"][1], *UNIT,
                          "--output", str(tmp_path / "out.json"), "--log-level", level],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == code, run.stderr
    assert SECRET not in run.stdout + run.stderr and "0xe9" not in run.stderr  # é in Latin-1
