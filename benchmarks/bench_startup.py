"""What `python -m pipelines.select` pays before its first row, by part, on a 2-row local Parquet file.

    python -m benchmarks.bench_startup [--repeat 5]

Each figure is the median over --repeat fresh processes (seconds):
  interpreter              python -c pass
  import Beam, all of it   import apache_beam with its Google Cloud modules (GCS, BigQuery, Pub/Sub,
                           Dataflow's API): what a gs:// or Dataflow run imports, and every run did before
  import Beam, local run   import apache_beam as a command on local paths imports it (pipelines/startup.py)
  import ours              beam_expmech and pipelines, beyond Beam
  flags, schemas, step     select's main less the two below: its flags, the input's schema, the final
                           step's checks, the release read back
  build the graph          beam_expmech.releases.passes.counting_pipeline (as the declared selection calls it)
  run                      Beam's Pipeline.run to the written release (the DirectRunner)
  the rest                 the whole process less the parts of a local run above: logging's set-up
                           and the process's end (Python's teardown of every module)
  whole process            python -m pipelines.select, wall time
and which of dp_accounting and google.cloud.storage a local run imports (neither is needed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import pyarrow as pa
import pyarrow.parquet as pq


def select_argv(folder: str) -> list[str]:
    return ["--input", os.path.join(folder, "two.parquet"), "--column", "item", "--candidate-range", "0:10",
            "--epsilon", "1", "--output", os.path.join(folder, "top.json")]  # fmt: skip


def child(folder: str, all_of_beam: bool) -> None:
    """One run's parts, in this process, as JSON on stdout."""
    argv = select_argv(folder)
    if not all_of_beam:
        from pipelines import startup

        startup.skip_unused_google_cloud(argv)  # what pipelines/__init__.py does for a command
    start = time.perf_counter()
    import apache_beam as beam

    beam_done = time.perf_counter()
    from beam_expmech.releases import queries
    from pipelines import select

    ours_done = time.perf_counter()
    spent = {"build": 0.0, "run": 0.0}

    def timed(owner, name, part):
        original = getattr(owner, name)

        def wrapper(*args, **kwargs):
            began = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                spent[part] += time.perf_counter() - began

        setattr(owner, name, wrapper)

    timed(queries, "counting_pipeline", "build")  # the name Prepared.run builds its pass by
    timed(beam.Pipeline, "run", "run")
    with open(os.devnull, "w") as quiet:
        stdout, sys.stdout = sys.stdout, quiet
        try:
            assert select.main(argv) == 0
        finally:
            sys.stdout = stdout
    main_done = time.perf_counter()
    print(json.dumps({
        "import_beam": beam_done - start,
        "import_ours": ours_done - beam_done,
        "main_rest": main_done - ours_done - spent["build"] - spent["run"],
        **spent,
        "dp_accounting": "dp_accounting" in sys.modules,
        "google.cloud.storage": "google.cloud.storage" in sys.modules,
    }))  # fmt: skip


def wall(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def parts(folder: str, all_of_beam: bool) -> dict:
    command = [sys.executable, "-m", "benchmarks.bench_startup", "--child", folder]
    done = subprocess.run([*command, *(["--all-of-beam"] if all_of_beam else [])], check=True, capture_output=True,
                          text=True)  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--all-of-beam", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.all_of_beam)

    with tempfile.TemporaryDirectory() as folder:
        pq.write_table(pa.table({"user_id": [1, 2], "item": [3, 4]}), os.path.join(folder, "two.parquet"))
        local = [parts(folder, all_of_beam=False) for _ in range(args.repeat)]
        full = [parts(folder, all_of_beam=True) for _ in range(args.repeat)]
        interpreter = [wall([sys.executable, "-c", "pass"]) for _ in range(args.repeat)]
        whole = [wall([sys.executable, "-m", "pipelines.select", *select_argv(folder)]) for _ in range(args.repeat)]

    def median(runs: list[dict], key: str) -> float:
        return statistics.median(run[key] for run in runs)

    rows = [
        ("interpreter (python -c pass)", statistics.median(interpreter)),
        ("import Beam, all of it (gs://, Dataflow)", median(full, "import_beam")),
        ("import Beam, local run (GCP modules left out)", median(local, "import_beam")),
        ("import ours (beam_expmech, pipelines)", median(local, "import_ours")),
        ("flags, schemas, final step, read back", median(local, "main_rest")),
        ("build the graph", median(local, "build")),
        ("run (DirectRunner, to the written release)", median(local, "run")),
        ("whole process: python -m pipelines.select", statistics.median(whole)),
    ]
    parts_of_a_run = sum(seconds for name, seconds in rows[:-1] if "all of it" not in name)
    rows.insert(-1, ("the rest (logging set-up, the process's end)", rows[-1][1] - parts_of_a_run))
    print(f"{'part (2-row Parquet, median of ' + str(args.repeat) + ')':<50} {'seconds':>8}")
    for name, seconds in rows:
        print(f"{name:<50} {seconds:>8.2f}")
    for module in ("dp_accounting", "google.cloud.storage"):
        print(f"{module} imported by a local run: {'yes' if any(run[module] for run in local) else 'no'}")


if __name__ == "__main__":
    main()
