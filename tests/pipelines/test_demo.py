"""`make demo`'s job runs end to end on the DirectRunner and releases only the selection."""

from __future__ import annotations

import json
import subprocess
import sys


def test_demo_generates_data_and_releases_a_private_top_3(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "pipelines.demo", "--rows", "60000", "--epsilon", "5", "--workdir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    release = json.loads((tmp_path / "top3.json").read_text())
    assert len(release["selected"]) == 3 and len(set(release["selected"])) == 3
    assert release["epsilon"] == 5 and release["sensitivity"] == 5 and release["privacy_unit"] == "user_id"
    assert f"selected {', '.join(release['selected'])}" in run.stdout
    assert not list(tmp_path.glob("*dead_letter*"))  # no raw row kept unless the operator names a place
    assert not list(tmp_path.glob(".tmp-*"))  # the atomic writes left no temporary file behind
