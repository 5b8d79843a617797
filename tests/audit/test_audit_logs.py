"""Audit of what a run prints: at INFO and above, the same on neighbouring datasets.

Each pipeline, as its command line runs (``beam-expmech COMMAND``, a process of its own), on D and on D' = D plus
one row that validation rejects (a null where a value must be). Under one test seed the release is the same on
both (the rejected row never reaches a mechanism), so whatever the run prints at INFO and above, on stdout and
on stderr, must be the same too, but for what differs between any two runs: the time of each log line, the
paths (each run its own folder) and the ledger's release ids. A line that appears only when a row was rejected
(issue 34: "WARNING rows were rejected") tells that one person's row is bad; a count of rows read tells the
exact size the noisy one hides. At DEBUG the counts are there, labelled non-private.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from beam_expmech.ledger import Ledger

ROWS = 400
# pipeline -> (its flags, the bad row's CSV line: a null in a column the release reads, or in the unit)
RUNS = {
    "select": (["--column", "item", "--candidate-range", "0:8", "--top-k", "2"], "7,,0.5,1,0,1"),
    "select keys": (["--column", "item", "--delta", "1e-6"], ",3,0.5,1,0,1"),
    "quantiles": (["--column", "x", "--lower", "0", "--upper", "1", "--quantiles", "0.5", "--bins", "64"],
                  "7,3,,1,0,1"),
    "learn": (["--features", "f0,f1", "--label", "y"], "7,3,0.5,,0,1"),
    "synthesize": (["--domain", "{domain}", "--method", "aim", "--rows", "30"], "7,3,0.5,1,0,"),
    "synthesize auto": (["--domain", "{domain}", "--rows", "30"], "7,3,0.5,1,0,"),  # its line names its path
}  # fmt: skip


def write_data(folder: Path, bad_row: str | None) -> Path:
    """D: ROWS clean rows of 100 users (the same on every call); D': the same and ``bad_row`` at the end."""
    rng = np.random.default_rng(5)
    user, item, f0, f1, y = (rng.integers(0, n, ROWS) for n in (100, 8, 2, 2, 2))
    x = rng.uniform(0, 1, ROWS)
    lines = ["user,item,x,f0,f1,y", *(",".join(map(str, r)) for r in zip(user, item, x, f0, f1, y, strict=True))]
    (folder / "data.csv").write_text("\n".join(lines + ([bad_row] if bad_row else [])) + "\n")
    domain = {"item": 8, "x": {"lower": 0, "upper": 1, "bins": "private", "count": 4, "share": 0.2}, "y": 2}
    (folder / "domain.json").write_text(json.dumps(domain))
    return folder / "data.csv"


def run(pipeline: str, folder: Path, dead_letter: bool, level: str) -> tuple[str, str]:
    """(stdout, stderr) of the command line, with what differs between any two runs taken out."""
    flags, _ = RUNS[pipeline]
    if not (folder / "ledger.json").exists():
        Ledger(str(folder / "ledger.json")).init("d", epsilon=100.0, delta=1e-5)
    output = folder / "out" / ("s.parquet" if pipeline.startswith("synthesize") else "r.json")
    command = [str(Path(sys.executable).with_name("beam-expmech")), pipeline.split()[0], "--input",
               str(folder / "data.csv"), *(f.replace("{domain}", str(folder / "domain.json")) for f in flags),
               "--epsilon", "1", "--privacy-unit", "user", "--max-rows-per-unit", "3", "--seed", "11",
               "--output", str(output), "--budget-ledger", str(folder / "ledger.json"), "--dataset-id", "d",
               "--log-level", level,
               *(["--dead-letter", str(folder / "dead.csv")] if dead_letter else [])]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr

    def public(text: str) -> str:
        text = text.replace(str(folder), "FOLDER")
        return re.sub(r"(?m)^[\d-]+ [\d:,]+ |[0-9a-f]{32}", "", text)  # a log line's time; the ledger's ids

    return public(done.stdout), public(done.stderr)


@pytest.mark.parametrize("dead_letter", [False, True], ids=["no dead letter", "a dead letter"])
@pytest.mark.parametrize("pipeline", RUNS)
def test_what_a_run_prints_at_info_is_the_same_on_neighbouring_data(audit, tmp_path, pipeline, dead_letter):
    folders = {name: tmp_path / name for name in ("D", "D'")}
    for name, folder in folders.items():
        folder.mkdir()
        write_data(folder, RUNS[pipeline][1] if name == "D'" else None)
    with ThreadPoolExecutor(2) as pool:  # the two runs side by side: two processes
        printed = dict(zip(folders, pool.map(lambda f: run(pipeline, f, dead_letter, "INFO"), folders.values()),
                           strict=True))  # fmt: skip
    differing = [i for i, (a, b) in enumerate(zip(printed["D"], printed["D'"], strict=True)) if a != b]
    audit.check(f"{pipeline}, {'with' if dead_letter else 'without'} --dead-letter",
                "stdout and stderr at INFO differ on D and D' (one rejected row)", cases=2, worst=len(differing),
                bound=0)  # fmt: skip
    assert "INFO" in printed["D"][1]  # the log was on, and said something
    if dead_letter:
        assert (folders["D'"] / "dead.csv").read_text().count("\n") == 2  # the header and the bad row
    else:
        assert not list(tmp_path.rglob("*dead*"))  # no raw row kept where none was asked for


def test_at_debug_the_counts_are_there_and_labelled_non_private(tmp_path):
    write_data(tmp_path, RUNS["select"][1])
    _, stderr = run("select", tmp_path, False, "DEBUG")
    assert f"DEBUG beam_expmech.releases.passes: non-private: read {ROWS + 1} rows; 1 rejected" in stderr
    _, quiet = run("select", tmp_path, False, "WARNING")
    assert quiet == ""  # nothing at WARNING on a good run, rejected row or not
