"""`make demo`'s job runs end to end on the DirectRunner and releases only the selection."""

from __future__ import annotations

import json
import subprocess
import sys


def test_demo_prints_a_private_top_3_and_writes_the_release(tmp_path):
    output = tmp_path / "release.json"
    run = subprocess.run(
        [sys.executable, "-m", "pipelines.demo", "--rows", "120000", "--epsilon", "5", "--output", str(output)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    release = json.loads(output.read_text())
    assert len(release["selected"]) == 3 and len(set(release["selected"])) == 3
    assert set(release) == {
        "selected",
        "mechanism",
        "epsilon",
        "sensitivity",
        "monotonic",
        "num_candidates",
        "accuracy_bound",
    }
    assert release["epsilon"] == 5
    for label in release["selected"]:
        assert label in run.stdout
    assert "budget: spent 5 of 5" in run.stdout
    assert not list(tmp_path.glob("*.tmp"))  # the atomic write left no temporary file behind
