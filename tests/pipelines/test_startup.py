"""What a command pays before its first row (pipelines/startup.py): Beam's Google Cloud modules are left
out of a command on local paths and local runners, and kept for everything else."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines import startup

LOCAL = ["--input", "data/*.parquet", "--column", "item", "--candidate-range", "0:10", "--epsilon", "1",
         "--output", "out/top.json", "--budget-ledger", "ledger.json", "--dataset-id", "shop"]  # fmt: skip
# What Beam's Google Cloud modules bring in when they are imported (an import left out is still listed by
# -X importtime, under its own name, as tried).
GOOGLE_CLOUD = ("google.cloud.storage", "google.cloud.pubsub_v1", "google.cloud.bigquery",
                "google.cloud.dataflow_v1beta3", "apitools.base.py.base_api", "apache_beam.io.gcp.gcsio")  # fmt: skip


def test_only_local_paths_on_a_local_runner_go_without_google_cloud():
    assert not startup.uses_google_cloud(LOCAL)
    for runner in (["--runner", "DirectRunner", "--direct_running_mode", "multi_processing"],
                   ["--runner=DaskRunner", "--dask_client_address", "tcp://127.0.0.1:8786"],
                   ["--runner", "apache_beam.runners.dask.dask_runner.DaskRunner"]):  # fmt: skip
        assert not startup.uses_google_cloud([*LOCAL, *runner])
    for flags in (["--input", "gs://bucket/data/*.parquet"], ["--budget-ledger", "gs://bucket/ledger.json"],
                  ["--dead-letter=gs://ops/dead.csv"], ["--candidates", "gs://bucket/candidates.txt"],
                  ["--temp_location", "gs://bucket/tmp"], ["--runner", "DataflowRunner"],
                  ["--runner=PortableRunner"]):  # fmt: skip
        assert startup.uses_google_cloud([*LOCAL, *flags]), flags


def test_only_a_process_launched_as_a_command_leaves_anything_out():
    python = sys.executable
    assert startup.launched_as_command([python, "-m", "pipelines.select", *LOCAL])
    assert startup.launched_as_command([python, "-X", "importtime", "-m", "pipelines.quantiles"])
    assert startup.launched_as_command([python, "/venv/bin/beam-expmech", "select", *LOCAL])
    for other in ([python, "-m", "pytest", "tests"], [python, "-c", "import pipelines"], [python, "launcher.py"],
                  [python, "-m", "benchmarks.bench_select"], [python]):  # fmt: skip
        assert not startup.launched_as_command(other), other
    # This test process is not a command: it gets all of Beam, and then it is too late to leave anything out.
    assert not startup.launched_as_command()
    import apache_beam  # noqa: F401

    assert sys.modules.get("apache_beam.io.gcp.gcsfilesystem") is not None
    assert not startup.skip_unused_google_cloud(LOCAL)


def test_a_command_on_local_paths_releases_without_importing_google_cloud(tmp_path):
    pq.write_table(pa.table({"user_id": [1, 2], "item": [3, 4]}), tmp_path / "two.parquet")
    out = tmp_path / "top.json"
    run = subprocess.run([sys.executable, "-X", "importtime", "-m", "pipelines.select", "--input",
                          str(tmp_path / "two.parquet"), "--column", "item", "--candidate-range", "0:10",
                          "--epsilon", "1", "--seed", "3", "--output", str(out)],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    imported = {line.rsplit("|", 1)[1].strip() for line in run.stderr.splitlines() if line.startswith("import time:")}
    assert "apache_beam" in imported and "beam_expmech.releases.passes" in imported
    assert not [name for name in imported if name.startswith(GOOGLE_CLOUD)]
    assert len(json.loads(out.read_text())["selected"]) == 1
