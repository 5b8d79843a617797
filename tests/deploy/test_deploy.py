"""Deployment without a cloud: Flex Template metadata matches the command lines, the wheel holds the
package, and every pipeline builds and serialises its graph for the DataflowRunner."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import apache_beam as beam
import pytest
from beam_data import purchases, write
from public_tables import DATA

from beam_expmech.releases import JobFailedError
from deploy.dataflow import metadata as template_metadata
from pipelines import learn, quantiles, select, synthesize

ROOT = Path(__file__).resolve().parents[2]
NLTCS = DATA / "nltcs"
MODULES = {"select": select, "quantiles": quantiles, "learn": learn, "synthesize": synthesize}


@pytest.mark.parametrize("pipeline", sorted(MODULES))
def test_template_metadata_matches_the_command_line(pipeline):
    stored = json.loads((ROOT / "deploy" / "dataflow" / pipeline / "metadata.json").read_text())
    assert stored == template_metadata.metadata(pipeline), "run: python -m deploy.dataflow.metadata"
    parser = MODULES[pipeline].build_parser()
    for parameter in stored["parameters"]:
        action = parser._option_string_actions[f"--{parameter['name']}"]  # Dataflow passes --name=value
        assert action.nargs != 0 and parameter["isOptional"] == (not action.required)
    required = {a.dest for a in parser._actions if a.required}
    assert required <= {p["name"] for p in stored["parameters"] if not p["isOptional"]}


def test_the_wheel_holds_the_library_and_the_pipelines(tmp_path):
    shutil.rmtree(ROOT / "build", ignore_errors=True)  # setuptools' own scratch: stale files would enter the wheel
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(ROOT),
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("beam_expmech-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for module in ("beam_expmech/__init__.py", "beam_expmech/synth/aim.py", "pipelines/select.py", "pipelines/cli.py"):
        assert module in names
    assert not any(n.startswith(("tests/", "benchmarks/", "deploy/")) for n in names)


class Built(Exception):
    """Raised instead of running: the graph was built and serialised."""


@pytest.mark.parametrize("pipeline", sorted(MODULES))
def test_every_pipeline_builds_its_graph_for_dataflow(tmp_path, monkeypatch, gcs_emulator, pipeline):
    """Beam's Dataflow option checks look up the temp bucket: the emulator answers, not the internet."""
    write(purchases(200), tmp_path / "data.parquet", "parquet")
    data = str(tmp_path / "data.parquet")
    flags = {
        "select": ["--input", data, "--column", "item", "--candidate_range", "0:50", "--output", "gs://test-bucket/top.json"],
        "quantiles": ["--input", data, "--column", "amount", "--quantiles", "0.5", "--lower", "0", "--upper", "100",
                      "--output", "gs://test-bucket/q.json"],
        "learn": ["--input", str(NLTCS / "nltcs.csv"), "--features", "bathing,cooking", "--label", "eating",
                  "--output", "gs://test-bucket/h.json"],
        "synthesize": ["--input", str(NLTCS / "nltcs.csv"), "--domain", str(NLTCS / "domain.json"),
                       "--columns", "bathing,cooking,eating", "--output", "gs://test-bucket/s.parquet"],
    }[pipeline]  # fmt: skip
    dataflow = ["--runner=DataflowRunner", "--project=demo", "--region=europe-west1", "--temp_location=gs://test-bucket/tmp",
                f"--setup_file={ROOT / 'setup.py'}", "--labels=airflow-version=3"]  # fmt: skip
    graphs = []

    def build_only(self, test_runner_api="AUTO"):
        graphs.append((self.runner, self.to_runner_api()))
        raise Built

    monkeypatch.setattr(beam.Pipeline, "run", build_only)
    with pytest.raises(JobFailedError) as stopped:  # how the pipeline reports any stop of its run
        MODULES[pipeline].main([*flags, "--epsilon", "1", *dataflow])
    assert isinstance(stopped.value.__cause__, Built)
    runner, proto = graphs[0]
    assert type(runner).__name__ == "DataflowRunner"
    names = {t.unique_name for t in proto.components.transforms.values()}
    assert {"Count", "Release", "Write"} <= names and "DeadLetter" not in names  # none asked for: none written


def test_the_template_launcher_runs_a_pipeline_as_a_module(tmp_path):
    """What the Flex Template runs: a file, which must not put pipelines/ first on sys.path."""
    write(purchases(100), tmp_path / "data.parquet", "parquet")
    env = {**os.environ, "BEAM_EXPMECH_PIPELINE": "select"}
    launched = subprocess.run(
        [sys.executable, str(ROOT / "deploy" / "dataflow" / "launcher.py"), "--input", str(tmp_path / "data.parquet"),
         "--column", "item", "--candidate_range", "0:50", "--epsilon", "1", "--output", str(tmp_path / "r.json"),
         "--dry-run"],
        env=env, capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    assert "dry run: no data read" in launched.stdout
