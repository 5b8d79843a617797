"""``beam-expmech COMMAND``: every command under one name, and each says its name as the user typed it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pipelines import cli

SCRIPT = str(Path(sys.executable).with_name("beam-expmech"))  # the console script setup.py installs


def _run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def _usage(*command: str) -> str:
    """The first line of ``command --help``."""
    run = _run(*command, "--help")
    assert run.returncode == 0, run.stderr
    return run.stdout.splitlines()[0]


def test_a_command_names_itself_as_it_was_started():
    assert _usage(SCRIPT, "ledger").startswith("usage: beam-expmech ledger [")
    assert _usage(SCRIPT, "evaluate-synthetic").startswith("usage: beam-expmech evaluate-synthetic [")
    assert _usage(sys.executable, "-m", "pipelines.cli", "ledger", "show").startswith(
        "usage: beam-expmech ledger show ["
    )
    assert _usage(sys.executable, "-m", "pipelines.ledger").startswith("usage: python -m pipelines.ledger [")
    wrong = _run(SCRIPT, "ledger", "show")  # and so does a usage error, in one line
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1
    assert wrong.stderr.startswith("error: beam-expmech ledger show: the following arguments are required")


def test_help_lists_every_command_and_a_dashed_one_runs_its_module(capsys):
    assert cli.main(["--help"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]]
    assert listed == list(cli.COMMANDS) and "evaluate-synthetic" in listed
    with pytest.raises(SystemExit) as stop:  # pipelines.evaluate_synthetic's own check
        cli.main(["evaluate-synthetic", "--degree", "2"])
    assert stop.value.code == 2
    assert "the following arguments are required: real, domain, synthetic" in capsys.readouterr().err
    assert cli.main(["evaluate_synthetic"]) == 2  # a module's name is not a command
    assert "choose a command" in capsys.readouterr().err
