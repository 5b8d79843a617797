"""The ledger from the command line: pipelines reserve before reading, the ledger command, dry runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from beam_data import purchases, write

from beam_expmech.ledger import Ledger, LedgerError
from beam_expmech.releases import queries
from pipelines import console, select
from pipelines import ledger as ledger_cli


def test_pipelines_reserve_before_reading_and_exit_3_when_spent(tmp_path, capsys, monkeypatch):
    write(purchases(2_000), tmp_path / "data.parquet", "parquet")
    path = str(tmp_path / "ledger.json")
    assert ledger_cli.main(["init", "--budget-ledger", path, "--dataset-id", "shop", "--epsilon", "1.5"]) == 0
    args = ["--input", str(tmp_path / "data.parquet"), "--column", "item", "--candidate-range", "0:50",
            "--epsilon", "1", "--output", str(tmp_path / "r.json"),
            "--budget-ledger", path, "--dataset-id", "shop"]  # fmt: skip
    assert select.main(args) == 0
    capsys.readouterr()
    assert console.run_cli(select.main, args) == 3
    assert "dataset 'shop': 0.5 of its epsilon=1.5" in capsys.readouterr().err
    # The release's pass (Prepared.run's run_pipeline, inside the charge) fails after the reservation.
    monkeypatch.setattr(queries, "run_pipeline", lambda *a, **k: (_ for _ in ()).throw(OSError("worker lost")))
    args[args.index("--epsilon") + 1] = "0.5"
    with pytest.raises(OSError):
        select.main(args)
    assert ledger_cli.main(["show", "--budget-ledger", path, "--dataset-id", "shop"]) == 0
    shown = capsys.readouterr().out
    assert shown.count(" done ") == 1 and shown.count(" failed ") == 1 and "remaining 0" in shown
    assert console.run_cli(select.main, [*args[:-4], "--budget-ledger", path]) == 2  # --dataset-id missing
    # A dataset the ledger has no budget for: the command line says how to set one, the library does not.
    capsys.readouterr()
    assert console.run_cli(select.main, [*args[:-1], "unknown"]) == 2
    assert "python -m pipelines.ledger init" in capsys.readouterr().err
    with pytest.raises(LedgerError, match="has no budget") as raised:
        Ledger(path).dataset("unknown")
    assert "python -m" not in str(raised.value)


def test_the_console_script_runs_every_command(tmp_path):
    script = str(Path(sys.executable).with_name("beam-expmech"))
    path = str(tmp_path / "ledger.json")
    done = subprocess.run([script, "ledger", "init", "--budget-ledger", path, "--dataset-id", "d", "--epsilon", "3"],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0 and "budget epsilon=3" in done.stdout
    shown = subprocess.run([script, "ledger", "show", "--budget-ledger", path, "--dataset-id", "d"],
                           capture_output=True, text=True)  # fmt: skip
    assert "spent 0, remaining 3" in shown.stdout
    wrong = subprocess.run([script, "selec"], capture_output=True, text=True)
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1 and "choose a command" in wrong.stderr


def test_dry_run_prints_the_plan_and_spends_nothing(tmp_path, capsys):
    write(purchases(500), tmp_path / "data.parquet", "parquet")
    path = str(tmp_path / "ledger.json")
    Ledger(path).init("shop", epsilon=2.0)
    out = tmp_path / "r.json"
    args = ["--input", str(tmp_path / "data.parquet"), "--column", "item", "--candidate-range", "0:50",
            "--epsilon", "1", "--output", str(out), "--budget-ledger", path, "--dataset-id", "shop",
            "--dry-run"]  # fmt: skip
    assert select.main(args) == 0
    plan = capsys.readouterr().out
    assert "no data read, nothing spent" in plan and "dataset 'shop' has 2 of epsilon=2 left" in plan
    assert '"loss_per_pick"' in plan and "cost: epsilon=1" in plan
    assert not out.exists() and Ledger(path).dataset("shop")["releases"] == []
