"""Progress on long work: the data pass's bytes of files read, a generator's rounds, the row fitting; on a terminal
one redrawn line that ends before anything else is written."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from beam_data import purchases, write

from beam_expmech import Budget, PrivacyUnit, PrivateRelease, Select, Synthesis
from beam_expmech.ledger import Ledger
from beam_expmech.synth import row_fitting
from pipelines import console

ROOT = Path(__file__).resolve().parents[2]


def recorder() -> tuple[list, callable]:
    calls = []
    return calls, lambda what, done, total: calls.append((what, done, total))


def check_passes(calls: list, what: str, total: float) -> None:
    """Every call of one pass, in order: never backwards, the last one total of total."""
    done = [d for w, d, t in calls if w == what and t == total]
    assert len(done) == len([c for c in calls if c[0] == what]) and done[-1] == total
    assert all(a <= b for a, b in itertools.pairwise(done))


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_a_pass_is_told_the_bytes_of_the_files_it_has_read(tmp_path, fmt):
    paths = [write(purchases(2_000, seed=seed), tmp_path / f"part-{seed}.{fmt}", fmt) for seed in range(3)]
    total = float(sum(p.stat().st_size for p in paths))
    release = PrivateRelease(source=str(tmp_path / f"*.{fmt}"), query=Select("item", candidates=range(50)),
                             budget=Budget(1.0), output=str(tmp_path / "out" / "top.json"),
                             unit=PrivacyUnit("user_id", max_rows=5))  # fmt: skip
    calls, progress = recorder()
    release.run(progress=progress)
    what = f"reading 3 files ({total / 1e6:,.1f} MB)"
    check_passes(calls, what, total)
    # Each split told as it is read (a Parquet file's row groups, a CSV file), the last as the pass ends.
    parts = sum(pq.ParquetFile(p).metadata.num_row_groups for p in paths) if fmt == "parquet" else 3
    assert parts <= len(calls) <= parts + 1 and parts >= 3
    assert {c[0] for c in calls} == {what}


def test_synthesis_tells_each_pass_its_rounds_and_the_row_fitting(tmp_path):
    table = purchases(3_000)
    write(table.append_column("region", pa.array(table["item"].to_numpy() % 7)), tmp_path / "data.parquet", "parquet")
    total = float((tmp_path / "data.parquet").stat().st_size)
    release = PrivateRelease(source=str(tmp_path / "data.parquet"), query=Synthesis({"item": 50, "region": 7}),
                             budget=Budget(1.0, 1e-6), output=str(tmp_path / "rows.parquet"),
                             unit=PrivacyUnit("user_id", max_rows=5), seed=1)  # fmt: skip
    calls, progress = recorder()
    release.run(progress=progress)
    order = list(dict.fromkeys(c[0] for c in calls))
    assert order == [f"reading 1 file ({total / 1e6:,.1f} MB)", "AIM: rho spent", row_fitting.FITTING]
    check_passes(calls, order[0], total)
    fitting = [c for c in calls if c[0] == row_fitting.FITTING]
    assert fitting[-1][1:] == (row_fitting.WORK, row_fitting.WORK) and all(c[2] == row_fitting.WORK for c in fitting)


def test_on_a_terminal_the_bar_is_one_line_ended_before_the_summary(tmp_path):
    """select run as a user runs it, its stderr a terminal (a pseudo-terminal): the bar is redrawn in place,
    ends at 100% with a line break, and the summary goes to stdout alone."""
    data = write(purchases(3_000), tmp_path / "data.parquet", "parquet")
    leader, follower = os.openpty()
    args = [sys.executable, "-m", "pipelines.select", "--input", str(data), "--column", "item",
            "--candidate-range", "0:50", "--epsilon", "1", "--output", str(tmp_path / "top.json"),
            "--log-level", "WARNING"]  # fmt: skip
    done = subprocess.run(args, stderr=follower, stdout=subprocess.PIPE, text=True, cwd=ROOT, timeout=300)
    os.close(follower)
    terminal = b""
    while chunk := _read(leader):
        terminal += chunk
    os.close(leader)
    assert done.returncode == 0 and done.stdout.startswith("selected ") and "reading" not in done.stdout
    drawn = terminal.decode().replace("\r\n", "\n")
    bars = re.findall(r"\rreading 1 file \([0-9.]+ MB\) \[[#.]{30}\] (\d+)%\x1b\[K", drawn)
    assert bars and bars[-1] == "100" and drawn.endswith("100%\x1b[K\n")


def _read(descriptor: int) -> bytes:
    try:
        return os.read(descriptor, 65536)
    except OSError:  # the terminal closed: everything was read
        return b""


def test_an_error_after_a_bar_starts_a_line_of_its_own(capsys):
    def fails(argv):
        console.draw_progress("reading 2 files (1.0 MB)", 0.5, 1.0)
        raise ValueError("no")

    assert console.run_cli(fails, []) == console.USAGE_ERROR
    err = capsys.readouterr().err
    assert err.endswith("50%\x1b[K\nerror: no\n")


def test_a_named_release_tells_its_reading_only(tmp_path):
    """A release id may be drawn again by a retry: its draws (AIM's rho, the row fitting) are not told, so that a
    failed attempt showed nothing of its draw; the files' bytes are."""
    table = purchases(3_000)
    write(table.append_column("region", pa.array(table["item"].to_numpy() % 7)), tmp_path / "data.parquet", "parquet")
    Ledger(str(tmp_path / "ledger.json")).init("shop", epsilon=2, delta=1e-6)
    budget = Budget(1.0, 1e-6, str(tmp_path / "ledger.json"), "shop", "rows/2026-12-01")
    release = PrivateRelease(source=str(tmp_path / "data.parquet"), query=Synthesis({"item": 50, "region": 7}),
                             budget=budget, output=str(tmp_path / "rows.parquet"),
                             unit=PrivacyUnit("user_id", max_rows=5))  # fmt: skip
    calls, progress = recorder()
    release.run(progress=progress)
    assert {c[0] for c in calls} == {f"reading 1 file ({(tmp_path / 'data.parquet').stat().st_size / 1e6:,.1f} MB)"}
