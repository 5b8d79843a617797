"""Scheduled private releases: a top-k selection, then a synthetic dataset, charged to one budget ledger.

Copy this file into the DAGs folder. What it releases and at what privacy cost is set in one
Airflow Variable, ``beam_expmech`` (JSON), read when a run starts:

    {
      "input": "gs://bucket/purchases/*.parquet",      the data (file, glob or gs://)
      "output": "gs://bucket/releases",                each run writes OUTPUT/<date>/...
      "dead_letters": "gs://ops-bucket/dead_letters",  optional: keep rejected rows, DEAD_LETTERS/<date>/...: raw
                                                       data, for operators only, never under "output" (without
                                                       it, rejected rows are counted, not kept)
      "ledger": "gs://bucket/ledger.json",             the budget ledger every run is charged to
      "dataset_id": "purchases",                       the data's id in the ledger
      "select": {"column": "item", "candidate_range": "0:50", "top_k": 3, "epsilon": 0.5},
      "synthesize": {"domain": "gs://bucket/domain.json", "epsilon": 1.0},
      "runner": "DirectRunner",                        or "DataflowRunner", "DaskRunner" (optional)
      "dataflow": {"project_id": "...", "location": "us-central1"},          (DataflowRunner)
      "dask": {"address": "tcp://scheduler:8786"},     a Dask scheduler you run (DaskRunner)
      "beam_options": {"temp_location": "gs://bucket/tmp", "setup_file": "/path/to/setup.py"}
    }

"select" and "synthesize" hold the flags of ``python -m pipelines.select`` and
``python -m pipelines.synthesize`` (underscores for dashes); leave one out to skip that
release. The pipelines run in the interpreter named by the environment variable
``BEAM_EXPMECH_PYTHON`` (default ``python3``), which must have beam-expmech installed. On
DaskRunner each job is ``--runner DaskRunner --dask_client_address ADDRESS``: the cluster's workers
need beam-expmech too, and must reach the input, the output, the dead letters and the ledger.

Privacy: every release reserves its budget in the ledger before it reads data, and a run
that would overspend stops with exit code 3 and spends nothing. Tasks are never retried: a
failed release keeps its charge (the data may have been read), so a retry would pay twice;
rerun by hand after reading the ledger (``beam-expmech ledger show``). The dead letters hold
raw input rows: kept only where "dead_letters" says, which must lie outside "output" (where the
releases are published) and be readable by operators only.
"""

from __future__ import annotations

import os
import posixpath
from datetime import datetime

from airflow.providers.apache.beam.operators.beam import BeamRunPythonPipelineOperator
from airflow.sdk import DAG, Variable, get_current_context, task

RELEASES = {"select": "select.json", "synthesize": "synthetic.parquet"}  # pipeline -> output file name
REQUIRED = ("input", "output", "ledger", "dataset_id")
RUNNERS = ("DirectRunner", "DataflowRunner", "DaskRunner")


def pipeline_options(config: dict, date: str) -> dict:
    """The Beam runner, Dataflow settings, and each pipeline's flags for the run of ``date``."""
    missing = [key for key in REQUIRED if not config.get(key)]
    if missing:
        raise ValueError(f"the beam_expmech variable needs {', '.join(missing)}")
    unknown = set(config) - {*REQUIRED, "dead_letters", "runner", "dataflow", "dask", "beam_options", *RELEASES}
    if unknown:
        raise ValueError(f"the beam_expmech variable has unknown keys: {', '.join(sorted(unknown))}")
    dead_letters = config.get("dead_letters")  # optional: without it, rejected rows are counted, not kept
    if dead_letters:
        published, dead = posixpath.normpath(config["output"]), posixpath.normpath(dead_letters)
        if dead == published or dead.startswith(published + "/"):
            raise ValueError("the beam_expmech variable's dead_letters must lie outside output: they hold raw rows")
    runner = config.get("runner", "DirectRunner")
    if runner not in RUNNERS:
        raise ValueError(f"runner must be {', '.join(RUNNERS[:-1])} or {RUNNERS[-1]}, got {runner!r}")
    plan = {"runner": runner, "dataflow": config.get("dataflow", {}) if runner == "DataflowRunner" else {}}
    on_dask = {"dask_client_address": dask_address(config.get("dask"))} if runner == "DaskRunner" else {}
    for pipeline, name in RELEASES.items():
        flags = config.get(pipeline)
        plan[pipeline] = None if flags is None else {
            **config.get("beam_options", {}),
            **on_dask,
            **flags,
            "input": config["input"],
            "output": posixpath.join(config["output"], date, name),
            **({"dead_letter": posixpath.join(dead_letters, date, f"{pipeline}.dead_letter.csv")} if dead_letters
               else {}),
            "budget_ledger": config["ledger"],
            "dataset_id": config["dataset_id"],
        }  # fmt: skip
    return plan


def dask_address(dask: dict | None) -> str:
    """The Dask scheduler's address from the variable's "dask" setting: {"address": "tcp://HOST:PORT"}."""
    if not isinstance(dask, dict) or not dask.get("address"):
        raise ValueError('runner DaskRunner needs "dask": {"address": "tcp://HOST:PORT"} (the scheduler)')
    if unknown := set(dask) - {"address"}:
        raise ValueError(f"the beam_expmech variable's dask has unknown keys: {', '.join(sorted(unknown))}")
    address = dask["address"]
    scheme, _, location = str(address).partition("://")
    host, _, port = location.rpartition(":")
    if scheme not in ("tcp", "tls") or not host or "/" in location or not port.isdigit():
        raise ValueError(f"the beam_expmech variable's dask address must be tcp://HOST:PORT, got {address!r}")
    return address


with DAG(
    dag_id="beam_expmech_releases",
    description="Private releases on Apache Beam, charged to one privacy-budget ledger",
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 0},  # a retry would charge the budget again
    tags=["beam-expmech", "differential-privacy"],
) as dag:

    @task
    def plan() -> dict:
        """Read and check the beam_expmech variable once, for every release of this run."""
        return pipeline_options(Variable.get("beam_expmech", deserialize_json=True), get_current_context()["ds"])

    # Runs unless the release before it failed: a release left out of the variable is skipped, not fatal.
    @task.short_circuit(ignore_downstream_trigger_rules=False, trigger_rule="none_failed")
    def wanted(options: dict | None) -> bool:
        """Whether the variable asks for this release."""
        return options is not None

    planned = plan()
    previous = planned
    for pipeline in RELEASES:
        release = BeamRunPythonPipelineOperator(
            task_id=pipeline,
            py_file=f"pipelines.{pipeline}",
            py_options=["-m"],  # a module: run as a script, pipelines/select.py would shadow the stdlib's select
            py_interpreter=os.environ.get("BEAM_EXPMECH_PYTHON", "python3"),
            py_requirements=None,  # the interpreter has beam-expmech already
            runner=planned["runner"],
            pipeline_options=planned[pipeline],
            dataflow_config=planned["dataflow"],
        )
        gate = wanted.override(task_id=f"{pipeline}_wanted")(planned[pipeline])
        previous >> gate >> release
        previous = release
