"""The command line: logging through Python logging (what was charged, read, rejected) and its --help."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from beam_data import pages_zeroed, purchases, write

from beam_expmech.ledger import Ledger


def run_select(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess:
    data = tmp_path / "data.csv"
    if not data.exists():
        write(purchases(1_000), data, "csv")
        with open(data, "a") as handle:
            handle.write("7,not-an-item,1.0\n")  # one bad row: the dead letter
        Ledger(str(tmp_path / "ledger.json")).init("shop", epsilon=5.0)
    script = str(Path(sys.executable).with_name("beam-expmech"))
    command = [script, "select", "--input", str(data), "--column", "item", "--candidate-range", "0:50",
               "--epsilon", "1", "--output", str(tmp_path / "r.json"),
               "--budget-ledger", str(tmp_path / "ledger.json"), "--dataset-id", "shop", *flags]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_a_run_logs_its_charge_and_where_rejected_rows_go_on_stderr_their_counts_at_debug_only(tmp_path):
    run = run_select(tmp_path)
    assert run.returncode == 0, run.stderr
    assert "INFO beam_expmech.ledger: dataset 'shop': reserved epsilon=1 (rho=0.125) for select" in run.stderr
    assert (
        "INFO beam_expmech.releases.passes: rows that fail validation are counted (at DEBUG, non-private), not kept"
        in run.stderr
    )
    assert "marked done" in run.stderr and "1001" not in run.stderr and "rejected" not in run.stderr
    assert not list(tmp_path.glob("*dead_letter*"))  # none asked for: no raw row written
    assert "selected" in run.stdout and "selected" not in run.stderr  # the result on stdout, the log apart

    kept = run_select(tmp_path, "--dead-letter", str(tmp_path.parent / f"{tmp_path.name}-dead.csv"))
    assert f"rows that fail validation, if any, go to {tmp_path.parent / f'{tmp_path.name}-dead.csv'}" in kept.stderr
    quiet = run_select(tmp_path, "--log-level", "WARNING")
    assert quiet.returncode == 0 and quiet.stderr == ""  # whether a row was rejected is no warning's business
    debug = run_select(tmp_path, "--log-level", "DEBUG")
    assert "DEBUG beam_expmech.releases.passes: non-private: read 1001 rows; 1 rejected" in debug.stderr


def test_at_info_the_log_of_a_synthesis_is_the_same_whatever_the_size_of_the_data(tmp_path):
    """An exact row count in the log would undo the noise of the manifest's row count."""
    logs, written = [], []
    for rows in (300, 420):
        folder = tmp_path / "run"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        (folder / "d.csv").write_text("a,b\n" + "0,1\n1,0\n" * (rows // 2) + "2,1\n")  # one row outside the domain
        (folder / "domain.json").write_text(json.dumps({"a": 2, "b": 2}))
        Ledger(str(folder / "ledger.json")).init("d", epsilon=5.0)
        script = str(Path(sys.executable).with_name("beam-expmech"))
        command = [script, "synthesize", "--input", str(folder / "d.csv"), "--domain", str(folder / "domain.json"),
                   "--method", "mwem", "--rounds", "2", "--epsilon", "1", "--seed", "3", "--output",
                   str(folder / "s.csv"), "--budget-ledger", str(folder / "ledger.json"),
                   "--dataset-id", "d"]  # fmt: skip
        run = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        written.append(run.stdout)
        # what differs between any two runs: the time of each line, the ledger's release ids
        logs.append([re.sub(r"^[\d-]+ [\d:,]+ |[0-9a-f]{32}", "", line) for line in run.stderr.splitlines()])
    assert logs[0] == logs[1] and any("rows that fail validation" in line for line in logs[0])
    assert written[0] != written[1]  # the noisy sizes on stdout: the data did differ


def test_a_bad_log_level_is_a_usage_error(tmp_path):
    run = run_select(tmp_path, "--log_level", "LOUD")
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "--log-level" in run.stderr
    assert Ledger(str(tmp_path / "ledger.json")).dataset("shop")["releases"] == []


def test_every_command_takes_a_dead_letter_path_and_says_it_is_raw_data():
    from pipelines import learn, quantiles, select, synthesize

    for module in (select, quantiles, learn, synthesize):  # else Beam would take the flag, and ignore it
        flag = next(a for a in module.build_parser()._actions if "--dead-letter" in a.option_strings)
        assert flag.dest == "dead_letter" and "raw data" in flag.help


def test_every_flag_of_every_command_says_what_it_means():
    from pipelines import learn, quantiles, select, synthesize

    for module in (select, quantiles, learn, synthesize):
        parser = module.build_parser()
        for action in parser._actions:
            assert action.help, f"{parser.prog} {action.option_strings[0]} has no --help text"
        epsilon = next(a for a in parser._actions if a.dest == "epsilon")
        assert "privacy unit" in epsilon.help and "e^epsilon" in epsilon.help


def test_a_job_that_fails_while_reading_says_so_in_one_line_without_a_traceback(tmp_path):
    data = tmp_path / "data.parquet"
    write(purchases(3_000), data, "parquet")
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(pages_zeroed(data.read_bytes()))
    Ledger(str(tmp_path / "ledger.json")).init("shop", epsilon=5.0)
    script = str(Path(sys.executable).with_name("beam-expmech"))
    run = subprocess.run([script, "select", "--input", str(bad), "--column", "item", "--candidate-range", "0:50",
                          "--epsilon", "1", "--output", str(tmp_path / "r.json"),
                          "--budget-ledger", str(tmp_path / "ledger.json"), "--dataset-id", "shop"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith("error: the job failed: ")
    assert not (tmp_path / "r.json").exists()
    assert [r["status"] for r in Ledger(str(tmp_path / "ledger.json")).dataset("shop")["releases"]] == ["failed"]
