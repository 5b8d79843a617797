"""How a command's process starts (pipelines/startup.py): Beam's Google Cloud modules are left out of a
command on local paths and local runners, and kept for everything else; its threads share two malloc arenas."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

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


# Threads that each allocate and hold memory at once, then the number of malloc arenas (glibc's malloc_info:
# one <heap> an arena, the main one too) and MALLOC_ARENA_MAX as the processes it starts would see it.
# ``{setup}`` runs first, before any thread starts.
ARENAS = """
import ctypes, os, sys, tempfile, threading
{setup}
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.fopen.restype = ctypes.c_void_p
start, held = threading.Barrier(8), []
def work():
    start.wait()
    held.extend(libc.malloc(1 << 16) for _ in range(200))
threads = [threading.Thread(target=work) for _ in range(8)]
[t.start() for t in threads]
[t.join() for t in threads]
path = os.path.join(tempfile.mkdtemp(), "malloc.xml")
stream = libc.fopen(path.encode(), b"w")
libc.malloc_info(0, ctypes.c_void_p(stream))
libc.fclose(ctypes.c_void_p(stream))
print(open(path).read().count("<heap nr="), os.environ.get("MALLOC_ARENA_MAX"))
"""
# The allocator's settings of the environment the tests run in (a CI image may set them) are left out.
ALLOCATOR = ("MALLOC_ARENA_MAX", "GLIBC_TUNABLES", "LD_PRELOAD")


def _arenas(setup: str, **env: str) -> tuple[int, str]:
    clean = {k: v for k, v in os.environ.items() if k not in ALLOCATOR}
    run = subprocess.run([sys.executable, "-c", ARENAS.format(setup=setup)], capture_output=True, text=True,
                         timeout=60, env={**clean, **env})  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    arenas, children = run.stdout.split()
    return int(arenas), children


def _as_command(argv: str) -> str:
    return f"import sys; sys.orig_argv[:] = [sys.executable, {argv}]; import pipelines"


@pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc",
    reason="malloc arenas are glibc's: on musl, macOS or Windows a command leaves the allocator as it is",
)
def test_a_command_shares_few_malloc_arenas_among_its_threads():
    limit = startup.MALLOC_ARENAS
    assert _arenas("")[0] > limit  # unlimited: threads that allocate at once get arenas of their own
    assert _arenas("from pipelines import startup; assert startup.limit_malloc_arenas()") == (limit, str(limit))
    # A process launched as a command sets it when it imports the package, before Beam starts a thread, and
    # passes it on to the processes it starts (the DirectRunner's multi-process workers).
    for command in ("'-m', 'pipelines.select'", "'/venv/bin/beam-expmech', 'select'"):
        assert _arenas(_as_command(command)) == (limit, str(limit)), command
    arenas, children = _arenas("import pipelines")  # a program that imports the package: its own choice
    assert arenas > limit and children == "None"
    # An operator's own limit stays theirs.
    assert _arenas(_as_command("'-m', 'pipelines.select'"), MALLOC_ARENA_MAX="6") == (6, "6")
    assert _arenas(_as_command("'-m', 'pipelines.select'"), GLIBC_TUNABLES="glibc.malloc.arena_max=5")[0] == 5
