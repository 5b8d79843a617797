"""Deployment without a cloud: Flex Template metadata matches the command lines, the wheel holds the
package, and every pipeline builds and serialises its graph for the DataflowRunner."""

from __future__ import annotations

import argparse
import json
import os
import re
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


@pytest.mark.parametrize("pipeline", sorted(MODULES))
def test_template_regexes_take_what_the_command_line_takes_and_refuse_the_rest(pipeline):
    """Each parameter's regex (what Dataflow checks before a job starts) against the flag's own parser: a value
    of the right shape passes both, a wrong one fails the regex."""
    parser = MODULES[pipeline].build_parser()
    good = {"float": ["1", "0.5", "-2.5e-3", ".5"], "int": ["3", "-1"], "gs": ["gs://my-bucket/data/*.parquet"],
            "candidate_range": ["0:1000", "-5:5"], "quantiles": ["0.25,0.5,0.75", "0.5", "0.1, 0.5"],
            "delimiter": [";", "|", "\\t", "tab"]}  # fmt: skip
    bad = {"float": ["one", "1,5", ""], "int": ["2.5", "x"], "gs": ["/local/file.csv", "data.csv", "gs://"],
           "candidate_range": ["0-1000", "a:b"], "quantiles": ["0.5,", "half"], "delimiter": [";;", ""]}  # fmt: skip
    shaped = 0
    for parameter in template_metadata.metadata(pipeline)["parameters"]:
        if "regexes" not in parameter:
            continue
        (pattern,) = parameter["regexes"]
        action = parser._option_string_actions[f"--{parameter['name']}"]
        kind = (
            "choices" if action.choices else getattr(action.type, "__name__", None)
            if action.type in (int, float) else "gs" if pattern.startswith("^gs://") else parameter["name"]
        )  # fmt: skip
        if kind == "choices":
            assert all(re.fullmatch(pattern, str(c)) for c in action.choices) and not re.fullmatch(pattern, "x")
            continue
        for value in good[kind]:
            assert re.fullmatch(pattern, value), (parameter["name"], value)
            if kind in ("float", "int"):
                action.type(value)  # the command line takes it too
            if kind == "quantiles":
                assert MODULES[pipeline].parse_quantiles(value)
        for value in bad[kind]:
            assert not re.fullmatch(pattern, value), (parameter["name"], value)
        shaped += 1
    numeric = [a for a in parser._actions if a.type in (int, float) and a.help != argparse.SUPPRESS]
    assert shaped >= len(numeric) + 2  # every number, and at least the input and output paths


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


def test_the_images_install_step_installs_the_package_beside_the_images_beam(tmp_path):
    """deploy/dataflow/install.sh, as the Dockerfile runs it in Beam's SDK image, here in a fresh interpreter
    whose Beam (and every other dependency) is this environment's, as the image's Beam is the image's: nothing is
    fetched (no index), Beam stays the version it was, and the installed package, not the source, imports."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("setup.py", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for package in ("beam_expmech", "pipelines"):
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    image = tmp_path / "image"
    subprocess.run([sys.base_prefix + "/bin/python3", "-m", "venv", str(image)], check=True)
    site = next(image.glob("lib/python3.*/site-packages"))
    beam_site = Path(beam.__file__).resolve().parents[1]
    (site / "image_beam.pth").write_text(f"{beam_site}\n")  # the image's preinstalled Beam
    env = {**os.environ, "PYTHON": str(image / "bin" / "python"), "PIP_NO_INDEX": "1",
           "PIP_NO_BUILD_ISOLATION": "false"}  # fmt: skip
    done = subprocess.run(["bash", str(ROOT / "deploy" / "dataflow" / "install.sh"), str(source)], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"beam-expmech installed beside Apache Beam {beam.__version__}"
    where = subprocess.run([str(image / "bin" / "python"), "-c", "import beam_expmech; print(beam_expmech.__file__)"],
                           cwd=tmp_path, capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert where.startswith(str(site))  # installed into the image, not read from the source


def test_the_launcher_names_its_image_as_the_workers_container_unless_the_job_names_one():
    from deploy.dataflow.launcher import with_sdk_container_image

    image = "europe-west1-docker.pkg.dev/p/beam-expmech/select:abc123"
    assert with_sdk_container_image(["--epsilon=1"], image) == ["--epsilon=1", f"--sdk_container_image={image}"]
    assert with_sdk_container_image(["--sdk_container_image=other"], image) == ["--sdk_container_image=other"]
    assert with_sdk_container_image(["--epsilon=1"], None) == ["--epsilon=1"]


@pytest.mark.parametrize("optional", [{}, {"SERVICE_ACCOUNT": "jobs@p.iam.gserviceaccount.com", "NETWORK": "net",
                                           "SUBNETWORK": "regions/europe-west1/subnetworks/sub",
                                           "MACHINE_TYPE": "n2-standard-4", "MAX_WORKERS": "5"}])  # fmt: skip
def test_run_sh_passes_the_operators_settings_to_gcloud(tmp_path, optional):
    """run.sh with a gcloud on PATH that records its arguments: each setting given becomes its gcloud flag, and
    none given, none is passed."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "gcloud").write_text(f'#!/usr/bin/env bash\nprintf "%s\\n" "$@" > {tmp_path / "args"}\n')
    (bin_dir / "gcloud").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PROJECT": "p", "REGION": "europe-west1",
           "BUCKET": "b", **optional}  # fmt: skip
    subprocess.run(["bash", str(ROOT / "deploy" / "dataflow" / "run.sh"), "select", "epsilon=1", "features=a,b"],
                   env=env, check=True)  # fmt: skip
    args = (tmp_path / "args").read_text().splitlines()
    flags = {"SERVICE_ACCOUNT": "--service-account-email", "NETWORK": "--network", "SUBNETWORK": "--subnetwork",
             "MACHINE_TYPE": "--worker-machine-type"}  # fmt: skip
    for setting, flag in flags.items():
        assert (args[args.index(flag) + 1] == optional[setting]) if setting in optional else flag not in args
    assert args[args.index("--max-workers") + 1] == optional.get("MAX_WORKERS", "20")
    assert args[args.index("--parameters") + 1] == "^~^epsilon=1~features=a,b"
    subprocess.run(
        ["bash", str(ROOT / "deploy" / "dataflow" / "run.sh"), "select", "input=gs://b/~user/d.csv", "column=a|b"],
        env=env,
        check=True,
    )  # a value with "~", another with "|": the next separator
    args = (tmp_path / "args").read_text().splitlines()
    assert args[args.index("--parameters") + 1] == "^@^input=gs://b/~user/d.csv@column=a|b"
