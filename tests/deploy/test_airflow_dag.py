"""The Airflow DAG, run for real: ``dag.test()`` in Airflow's own virtual environment (``make test-airflow``).

Airflow runs the pipelines as subprocesses in this interpreter (BEAM_EXPMECH_PYTHON), the way
a deployment keeps Airflow and the pipelines' dependencies apart. The check of its variable
(``pipeline_options``, plain Python) runs in every ``make test``, without Airflow.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_expmech.ledger import Ledger, budget_of

AIRFLOW_PYTHON = os.environ.get("BEAM_EXPMECH_AIRFLOW_PYTHON")
DAG_FILE = Path(__file__).resolve().parents[2] / "deploy" / "airflow" / "beam_expmech_releases.py"
DOMAIN = {"age": 5, "region": 4, "item": 10}

needs_airflow = pytest.mark.skipif(
    AIRFLOW_PYTHON is None, reason="needs Airflow's virtual environment: run make test-airflow"
)

RUN_DAG = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("beam_expmech_releases", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
run = module.dag.test()
sys.exit(0 if run.state == "success" else 1)
"""


@pytest.fixture(scope="module")
def airflow_env(tmp_path_factory) -> dict:
    """A fresh Airflow home whose DAGs folder holds the DAG, its database migrated."""
    home = tmp_path_factory.mktemp("airflow")
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAG_FILE.parent),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "BEAM_EXPMECH_PYTHON": sys.executable,
    }
    airflow = str(Path(AIRFLOW_PYTHON).with_name("airflow"))
    migrated = subprocess.run([airflow, "db", "migrate"], env=env, capture_output=True, text=True, timeout=300)
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    return env


def shop_data(folder: Path) -> dict:
    """Purchases by 600 users (several rows each) and the config of a run on them."""
    rng = np.random.default_rng(0)
    rows = 3_000
    item = np.minimum(rng.zipf(1.6, rows) - 1, 9)
    table = pa.table({"user_id": rng.integers(0, 600, rows), "age": rng.integers(0, 5, rows),
                      "region": (item + rng.integers(0, 2, rows)) % 4, "item": item})  # fmt: skip
    pq.write_table(table, folder / "data.parquet")
    (folder / "domain.json").write_text(json.dumps(DOMAIN))
    unit = {"privacy_unit": "user_id", "max_rows_per_unit": 5}
    return {
        "input": str(folder / "data.parquet"),
        "output": str(folder / "releases"),
        "dead_letters": str(folder / "operators" / "dead_letters"),
        "ledger": str(folder / "ledger.json"),
        "dataset_id": "shop",
        "select": {"column": "item", "candidate_range": "0:10", "top_k": 2, "epsilon": 0.5, **unit},
        "synthesize": {"domain": str(folder / "domain.json"), "epsilon": 1.0, "delta": 1e-7, **unit},
    }


def run_dag(env: dict, config: dict) -> subprocess.CompletedProcess:
    env = {**env, "AIRFLOW_VAR_BEAM_EXPMECH": json.dumps(config)}
    return subprocess.run([AIRFLOW_PYTHON, "-c", RUN_DAG, str(DAG_FILE)], env=env, capture_output=True, text=True,
                          timeout=600)  # fmt: skip


@pytest.mark.airflow
@needs_airflow
def test_one_run_releases_a_selection_and_synthetic_data_charged_to_one_ledger(airflow_env, tmp_path):
    config = shop_data(tmp_path)
    Ledger(config["ledger"]).init("shop", epsilon=2.0, delta=1e-6)
    run = run_dag(airflow_env, config)
    assert run.returncode == 0, run.stdout[-5000:] + run.stderr[-5000:]

    (selection,) = (tmp_path / "releases").glob("*/select.json")
    chosen = json.loads(selection.read_text())["selected"]
    assert len(chosen) == 2 and set(chosen) <= {str(i) for i in range(10)}
    (synthetic,) = (tmp_path / "releases").glob("*/synthetic.parquet")
    table = pq.read_table(synthetic)
    assert table.column_names == list(DOMAIN) and table.num_rows > 0
    for column, size in DOMAIN.items():
        assert set(table[column].to_pylist()) <= set(range(size))
    assert {p.name for p in synthetic.parent.iterdir()} == {"select.json", "synthetic.parquet",
                                                            "synthetic.manifest.json"}  # fmt: skip
    dead_letters = {p.name for p in (tmp_path / "operators" / "dead_letters").glob("*/*")}
    assert dead_letters == {"select.dead_letter.csv", "synthesize.dead_letter.csv"}  # raw rows: not published

    dataset = Ledger(config["ledger"]).dataset("shop")
    records = dataset["releases"]
    assert [(r["pipeline"], r["status"]) for r in records] == [("select", "done"), ("synthesize", "done")]
    assert records[0]["epsilon"] == 0.5 and records[1]["output"] == str(synthetic)
    assert 0 < budget_of(dataset).remaining() < 2.0 - 0.5


@pytest.mark.airflow
@needs_airflow
def test_a_run_past_the_budget_fails_and_spends_nothing(airflow_env, tmp_path):
    config = shop_data(tmp_path)
    Ledger(config["ledger"]).init("shop", epsilon=0.4, delta=1e-6)  # the selection alone asks for 0.5
    run = run_dag(airflow_env, config)
    assert run.returncode == 1
    assert "refused, nothing spent" in run.stdout + run.stderr
    assert not (tmp_path / "releases").exists()  # and synthesis never started
    assert Ledger(config["ledger"]).dataset("shop")["releases"] == []


@pytest.mark.airflow
@needs_airflow
def test_a_release_left_out_of_the_variable_is_skipped_and_the_next_still_runs(airflow_env, tmp_path):
    config = shop_data(tmp_path)
    del config["select"]
    Ledger(config["ledger"]).init("shop", epsilon=2.0, delta=1e-6)
    run = run_dag(airflow_env, config)
    assert run.returncode == 0, run.stdout[-5000:] + run.stderr[-5000:]
    written = {path.name for path in (tmp_path / "releases").glob("*/*")}
    assert "synthetic.parquet" in written and not any(name.startswith("select") for name in written)
    assert [r["pipeline"] for r in Ledger(config["ledger"]).dataset("shop")["releases"]] == ["synthesize"]


def plan(config: dict) -> dict:
    """The DAG's ``pipeline_options`` for the run of 2026-12-01, or {"error": its message}."""
    try:
        return dag_file_without_airflow()["pipeline_options"](config, "2026-12-01")
    except ValueError as error:
        return {"error": str(error)}


def dag_file_without_airflow() -> dict:
    """The DAG file's plain-Python part, run here without Airflow: every top-level statement of the file as
    written, but its imports from Airflow and the ``with DAG(...)`` block that builds the DAG."""
    tree = ast.parse(DAG_FILE.read_text())
    kept = [
        node
        for node in tree.body
        if not (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("airflow"))
        and not isinstance(node, ast.With)
    ]
    namespace: dict = {"__name__": "beam_expmech_releases"}
    exec(compile(ast.Module(body=kept, type_ignores=[]), str(DAG_FILE), "exec"), namespace)
    return namespace


def test_the_variable_switches_to_dataflow_and_chooses_the_releases(tmp_path):
    config = shop_data(tmp_path)
    local = plan(config)
    assert local["runner"] == "DirectRunner" and local["dataflow"] == {}
    assert local["select"]["output"] == f"{config['output']}/2026-12-01/select.json"
    assert local["select"]["dead_letter"] == f"{config['dead_letters']}/2026-12-01/select.dead_letter.csv"
    assert local["synthesize"]["budget_ledger"] == config["ledger"]

    dataflow = {"project_id": "p", "location": "europe-west1"}
    options = {"temp_location": "gs://b/tmp", "setup_file": "/opt/beam-expmech/setup.py"}
    config |= {"runner": "DataflowRunner", "dataflow": dataflow, "beam_options": options}
    del config["synthesize"]
    remote = plan(config)
    assert remote["runner"] == "DataflowRunner" and remote["dataflow"] == dataflow
    assert remote["select"]["setup_file"] == options["setup_file"] and remote["synthesize"] is None

    assert "needs ledger" in plan({k: v for k, v in config.items() if k != "ledger"})["error"]
    unkept = plan({k: v for k, v in config.items() if k != "dead_letters"})  # optional: rejected rows counted only
    assert "dead_letter" not in unkept["select"]
    inside = {**config, "dead_letters": f"{config['output']}/dead"}
    assert "dead_letters must lie outside output" in plan(inside)["error"]
    assert "runner must be" in plan({**config, "runner": "SparkRunner"})["error"]
    assert "unknown keys: selct" in plan({**config, "selct": {}})["error"]


def test_the_variable_switches_to_a_dask_cluster(tmp_path):
    """DaskRunner: every release gets the scheduler's address as Beam's --dask_client_address (the operator
    passes pipeline_options as --key=value), and nothing of Dataflow's; a missing or malformed address is
    refused when the run starts, before any release is charged."""
    config = shop_data(tmp_path)
    config |= {"runner": "DaskRunner", "dask": {"address": "tcp://scheduler.example:8786"},
               "dataflow": {"project_id": "p"}, "beam_options": {"dask_connection_timeout": 10}}  # fmt: skip
    dask = plan(config)
    assert dask["runner"] == "DaskRunner" and dask["dataflow"] == {}
    for pipeline in ("select", "synthesize"):
        assert dask[pipeline]["dask_client_address"] == "tcp://scheduler.example:8786"
        assert dask[pipeline]["dask_connection_timeout"] == 10 and dask[pipeline]["budget_ledger"] == config["ledger"]
    tls = {**config, "dask": {"address": "tls://10.0.0.5:8786"}}
    assert plan(tls)["select"]["dask_client_address"] == "tls://10.0.0.5:8786"
    assert "dask_client_address" not in plan({**config, "runner": "DirectRunner"})["select"]

    needs = 'runner DaskRunner needs "dask": {"address": "tcp://HOST:PORT"}'
    assert needs in plan({k: v for k, v in config.items() if k != "dask"})["error"]
    assert needs in plan({**config, "dask": {}})["error"]
    assert needs in plan({**config, "dask": "tcp://scheduler.example:8786"})["error"]
    for address in ("scheduler.example:8786", "tcp://scheduler.example", "tcp://:8786", "http://h:8786",
                    "tcp://h:port", "tcp://h:8786/path"):  # fmt: skip
        assert "dask address must be tcp://HOST:PORT" in plan({**config, "dask": {"address": address}})["error"]
    assert "dask has unknown keys: adress" in plan({**config, "dask": {"adress": "x", "address": "tcp://h:1"}})["error"]
