"""Failure injection: a worker that fails its first attempt, a kill while the release is written, and
eight runs racing for a budget that holds three. The budget charge is never lost and no output is ever partial."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest
from beam_data import purchases, write

from beam_expmech.io import readers
from beam_expmech.ledger import Ledger
from pipelines import console, select

ROOT = Path(__file__).resolve().parents[2]


def select_args(data: Path, out: Path, ledger: str, epsilon: float = 1.0) -> list[str]:
    return ["--input", str(data), "--column", "item", "--candidate-range", "0:50", "--epsilon", str(epsilon),
            "--seed", "4", "--output", str(out), "--budget-ledger", ledger, "--dataset-id", "shop"]  # fmt: skip


def fails_first_attempt(function, marker: Path):
    """A step's function whose first call raises, as a worker lost mid-bundle would (test only)."""

    @functools.wraps(function)
    def wrapped(*args, **kwargs):
        if not marker.exists():
            marker.touch()
            raise OSError("worker lost (injected)")
        return function(*args, **kwargs)

    return wrapped


def test_a_bundle_that_fails_once_retries_to_the_same_release_or_fails_cleanly(tmp_path, monkeypatch, capsys):
    data = write(purchases(3_000), tmp_path / "data.parquet", "parquet")
    ledger = Ledger(str(tmp_path / "ledger.json"))
    ledger.init("shop", epsilon=5.0)
    assert select.main(select_args(data, tmp_path / "clean.json", ledger.path)) == 0

    monkeypatch.setattr(readers, "read_split", fails_first_attempt(readers.read_split, tmp_path / "failed-once"))
    capsys.readouterr()
    code = console.run_cli(select.main, select_args(data, tmp_path / "flaky.json", ledger.path))
    statuses = [r["status"] for r in ledger.dataset("shop")["releases"]]
    assert (tmp_path / "failed-once").exists()  # the failure did happen
    if code == 0:  # the runner retried the bundle: the same release
        released = json.loads((tmp_path / "flaky.json").read_text())["selected"]
        assert released == json.loads((tmp_path / "clean.json").read_text())["selected"]
        assert statuses == ["done", "done"]
    else:  # the runner gave up: one line, no output, the charge kept
        err = capsys.readouterr().err.strip().splitlines()
        assert code == console.JOB_ERROR and err[-1].startswith("error: the job failed: OSError;")
        assert not (tmp_path / "flaky.json").exists() and statuses == ["done", "failed"]


# Runs pipelines.select, killing its own process (SIGKILL) halfway through writing the release.
KILLED_WHILE_WRITING = """
import os, signal, sys, tempfile
from beam_expmech.io import writers
from pipelines import console, select

real = tempfile.NamedTemporaryFile

class HalfThenKilled:
    def __init__(self, **kwargs):
        self.handle = real(**kwargs)
        self.name = self.handle.name
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        return self.handle.__exit__(*exc)
    def write(self, data):
        if b'"selected"' in data:  # the release, not the dead letter
            self.handle.write(data[: len(data) // 2])
            self.handle.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        return self.handle.write(data)
    def __getattr__(self, name):
        return getattr(self.handle, name)

writers.tempfile = type("T", (), {"NamedTemporaryFile": staticmethod(HalfThenKilled)})
sys.exit(console.run_cli(select.main, sys.argv[1:]))
"""


def test_a_kill_while_writing_leaves_no_partial_release_and_a_rerun_completes(tmp_path):
    data = write(purchases(3_000), tmp_path / "data.parquet", "parquet")
    ledger = Ledger(str(tmp_path / "ledger.json"))
    ledger.init("shop", epsilon=5.0)
    out = tmp_path / "release.json"
    killed = subprocess.run([sys.executable, "-c", KILLED_WHILE_WRITING, *select_args(data, out, ledger.path)],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert killed.returncode == -9, killed.stderr
    assert not out.exists()  # a temporary file may remain, never a partial one under the final name
    assert [r["status"] for r in ledger.dataset("shop")["releases"]] == ["reserved"]  # the charge stays

    assert select.main(select_args(data, out, ledger.path)) == 0
    assert json.loads(out.read_text())["selected"]
    assert [r["status"] for r in ledger.dataset("shop")["releases"]] == ["reserved", "done"]


def race(data: Path, tmp_path: Path, ledger: str, runs: int) -> list[int]:
    script = str(Path(sys.executable).with_name("beam-expmech"))
    running = [
        subprocess.Popen(
            [script, "select", *select_args(data, tmp_path / f"r{i}.json", ledger)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i in range(runs)
    ]
    return sorted(p.wait(timeout=600) for p in running)


@pytest.mark.parametrize("where", ["local", "gs"])
def test_five_concurrent_runs_never_overspend_a_budget_for_two(where, tmp_path, request):
    data = write(purchases(500), tmp_path / "data.parquet", "parquet")
    if where == "gs":
        request.getfixturevalue("gcs_server_with_preconditions")
        path = "gs://test-bucket/race/ledger.json"
    else:
        path = str(tmp_path / "ledger.json")
    Ledger(path).init("shop", epsilon=2.0)
    assert race(data, tmp_path, path, 5) == [0] * 2 + [console.BUDGET_ERROR] * 3
    records = Ledger(path).dataset("shop")["releases"]
    assert len(records) == 2 and {r["status"] for r in records} == {"done"}
    assert len({r["output"] for r in records}) == 2  # two different runs, none lost
