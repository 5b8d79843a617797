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
from datetime import datetime, timezone
spec = importlib.util.spec_from_file_location("beam_expmech_releases", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
run = module.dag.test(logical_date=datetime.fromisoformat(sys.argv[2]).replace(tzinfo=timezone.utc))
sys.exit(0 if run.state == "success" else 1)
"""

# BEAM_EXPMECH_PYTHON for the retry test: the pipelines' interpreter, but the first attempt of the release
# FLAKY_RELEASE loses its job after its charge (Beam's Pipeline.run raises), as a lost worker would.
FLAKY_PYTHON = """#!{python}
import os, runpy, sys
from pathlib import Path
marker = Path(os.environ["FLAKY_MARKER"])
if f"--release_id={{os.environ['FLAKY_RELEASE']}}" in sys.argv and not marker.exists():
    marker.touch()
    import apache_beam
    def lost(self, *args, **kwargs):
        raise OSError("worker lost (injected by the test)")
    apache_beam.Pipeline.run = lost
if sys.argv[1] != "-m":  # the operator asks Beam's version with -c
    os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
sys.argv = [sys.argv[2], *sys.argv[3:]]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""
DAYS = ("2026-12-01", "2026-12-02", "2026-12-03")


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
        "BEAM_EXPMECH_RETRY_DELAY": "1",
    }
    airflow = str(Path(AIRFLOW_PYTHON).with_name("airflow"))
    migrated = subprocess.run([airflow, "db", "migrate"], env=env, capture_output=True, text=True, timeout=300)
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    return env


def shop_data(folder: Path, days: tuple[str, ...] = DAYS) -> dict:
    """A day's purchases by 600 users (several rows each) in a partition a day, and the variable that releases
    each partition four ways (every pipeline), each partition its own budget."""
    for number, day in enumerate(days):
        rng = np.random.default_rng(number)
        rows = 3_000
        item = np.minimum(rng.zipf(1.6, rows) - 1, 9)
        returned = rng.integers(0, 2, rows)
        table = pa.table({"user_id": rng.integers(0, 600, rows), "age": rng.integers(0, 5, rows),
                          "region": (item + rng.integers(0, 2, rows)) % 4, "item": item,
                          "amount": rng.gamma(2.0, 20.0, rows), "returned": returned,
                          "premium": rng.integers(0, 2, rows),
                          "repeat": returned ^ (rng.random(rows) < 0.1)})  # fmt: skip
        (folder / "data" / day).mkdir(parents=True)
        pq.write_table(table, folder / "data" / day / "part-0.parquet")
    (folder / "domain.json").write_text(json.dumps(DOMAIN))
    unit = {"privacy_unit": "user_id", "max_rows_per_unit": 5}
    return {
        "input": str(folder / "data" / "{{ ds }}" / "*.parquet"),
        "output": str(folder / "releases"),
        "dead_letters": str(folder / "operators" / "dead_letters"),
        "ledger": str(folder / "ledger.json"),
        "dataset_id": "shop/{{ ds }}",
        "budget": {"epsilon": 2.0, "delta": 1e-6},
        "releases": {
            "top_items": {"pipeline": "select", "column": "item", "candidate_range": "0:10", "top_k": 2,
                          "epsilon": 0.3, **unit},
            "spend": {"pipeline": "quantiles", "column": "amount", "lower": 0, "upper": 200,
                      "quantiles": "0.5,0.9", "epsilon": 0.3, **unit},
            "repeat_buyers": {"pipeline": "learn", "features": "returned,premium", "label": "repeat",
                              "weights": "-1,0,1", "epsilon": 0.3, **unit},
            "synthetic": {"pipeline": "synthesize", "domain": str(folder / "domain.json"), "epsilon": 0.5,
                          "delta": 1e-7, **unit},
        },
    }  # fmt: skip


RELEASED = {"top_items.json", "spend.json", "repeat_buyers.json", "synthetic.parquet", "synthetic.manifest.json"}


def run_dag(env: dict, config: dict, day: str) -> subprocess.CompletedProcess:
    env = {**env, "AIRFLOW_VAR_BEAM_EXPMECH": json.dumps(config)}
    return subprocess.run([AIRFLOW_PYTHON, "-c", RUN_DAG, str(DAG_FILE), day], env=env, capture_output=True,
                          text=True, timeout=900)  # fmt: skip


def released(folder: Path, day: str) -> dict[str, int]:
    """Each file a day's releases wrote, by name, with the time it was last written (ns)."""
    return {path.name: path.stat().st_mtime_ns for path in (folder / "releases" / day).iterdir()}


@pytest.mark.airflow
@needs_airflow
def test_three_days_one_retried_then_one_re_triggered_each_release_charged_and_written_once(airflow_env,
                                                                                            tmp_path):  # fmt: skip
    config = shop_data(tmp_path)
    flaky = tmp_path / "flaky-python"
    flaky.write_text(FLAKY_PYTHON.format(python=sys.executable))
    flaky.chmod(0o755)
    env = {**airflow_env, "BEAM_EXPMECH_PYTHON": str(flaky), "FLAKY_RELEASE": "synthetic/2026-12-02",
           "FLAKY_MARKER": str(tmp_path / "failed-once")}  # fmt: skip
    ledger = Ledger(config["ledger"])
    written, spent = {}, {}
    for day in DAYS:
        run = run_dag(env, config, day)
        assert run.returncode == 0, run.stdout[-5000:] + run.stderr[-5000:]
        written[day] = released(tmp_path, day)
        assert set(written[day]) == RELEASED
        dataset = ledger.dataset(f"shop/{day}")  # its budget set by the run, once
        assert (dataset["epsilon"], dataset["delta"]) == (2.0, 1e-6)
        records = {r["release_id"]: r for r in dataset["releases"]}
        assert set(records) == {f"{name}/{day}" for name in config["releases"]}
        assert {r["status"] for r in records.values()} == {"done"}
        retried = {f"synthetic/{day}"} if day == "2026-12-02" else set()
        assert {key for key, r in records.items() if r["attempts"] > 1} == retried
        assert all(r["attempts"] == 2 for key, r in records.items() if key in retried)
        assert len(dataset["releases"]) == len(config["releases"])  # a record a release id: charged once
        spent[day] = budget_of(dataset).spent()
        assert json.loads((tmp_path / "releases" / day / "top_items.json").read_text())["top_k"] == 2
        for column, size in DOMAIN.items():
            assert set(pq.read_table(tmp_path / "releases" / day / "synthetic.parquet")[column].to_pylist()) <= set(
                range(size)
            )
    assert (tmp_path / "failed-once").exists()  # the failure did happen, and Airflow's retry ran it again
    assert spent["2026-12-02"] == pytest.approx(spent["2026-12-01"]) == pytest.approx(spent["2026-12-03"])
    assert ledger.datasets().keys() == {f"shop/{day}" for day in DAYS}

    before = ledger.datasets()
    run = run_dag(env, config, "2026-12-02")  # re-triggered: every release done already
    assert run.returncode == 0, run.stdout[-5000:] + run.stderr[-5000:]
    assert ledger.datasets() == before  # nothing charged, no attempt counted
    assert released(tmp_path, "2026-12-02") == written["2026-12-02"]  # nothing written again
    assert (run.stdout + run.stderr).count("is done already") == len(config["releases"])


@pytest.mark.airflow
@needs_airflow
def test_a_run_past_the_budget_is_refused_once_and_spends_nothing(airflow_env, tmp_path):
    config = shop_data(tmp_path, DAYS[:1])
    config["releases"] = {"top_items": config["releases"]["top_items"] | {"epsilon": 0.5}}
    config["budget"] = {"epsilon": 0.4, "delta": 1e-6}  # the selection alone asks for 0.5
    run = run_dag(airflow_env, config, DAYS[0])
    assert run.returncode == 1
    said = run.stdout + run.stderr
    assert "refused, nothing spent" in said and said.count("this run asks for epsilon=0.5") == 1  # not retried
    assert not (tmp_path / "releases").exists()
    assert Ledger(config["ledger"]).dataset("shop/2026-12-01")["releases"] == []


def plan(config: dict, ds: str = "2026-12-01") -> dict:
    """The DAG's ``plan_releases`` for the run of ``ds``, or {"error": its message}."""
    try:
        return dag_file_without_airflow()["plan_releases"](config, ds)
    except ValueError as error:
        return {"error": str(error)}


def dag_file_without_airflow() -> dict:
    """The DAG file's plain-Python part, run here without Airflow: every top-level statement of the file as
    written, but its imports from Airflow, the classes built on them and the ``with DAG(...)`` block."""
    tree = ast.parse(DAG_FILE.read_text())
    airflow = {alias.asname or alias.name for node in tree.body if isinstance(node, ast.ImportFrom)
               and (node.module or "").startswith("airflow") for alias in node.names}  # fmt: skip
    kept = [
        node
        for node in tree.body
        if not (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("airflow"))
        and not isinstance(node, ast.With)
        and not (isinstance(node, ast.ClassDef) and any(getattr(b, "id", None) in airflow for b in node.bases))
    ]
    namespace: dict = {"__name__": "beam_expmech_releases"}
    exec(compile(ast.Module(body=kept, type_ignores=[]), str(DAG_FILE), "exec"), namespace)
    return namespace


def by_name(planned: dict) -> dict:
    """The planned releases by the name in their release id."""
    return {r["pipeline_options"]["release_id"].split("/")[0]: r for r in planned["releases"]}


def test_each_declared_release_is_planned_for_the_runs_partition(tmp_path):
    config = shop_data(tmp_path, ())
    planned = plan(config, "2026-12-02")
    assert planned["budget"] == {"ledger": config["ledger"], "dataset_id": "shop/2026-12-02", "epsilon": 2.0,
                                 "delta": 1e-6}  # fmt: skip
    releases = by_name(planned)
    assert set(releases) == set(config["releases"])
    assert {name: r["py_file"] for name, r in releases.items()} == {
        "top_items": "pipelines.select", "spend": "pipelines.quantiles", "repeat_buyers": "pipelines.learn",
        "synthetic": "pipelines.synthesize"}  # fmt: skip
    top = releases["top_items"]
    assert top["runner"] == "DirectRunner" and top["dataflow_config"] == {}
    assert top["pipeline_options"] == {
        "column": "item", "candidate_range": "0:10", "top_k": 2, "epsilon": 0.3, "privacy_unit": "user_id",
        "max_rows_per_unit": 5, "input": f"{tmp_path}/data/2026-12-02/*.parquet",
        "output": f"{tmp_path}/releases/2026-12-02/top_items.json",
        "dead_letter": f"{tmp_path}/operators/dead_letters/2026-12-02/top_items.dead_letter.csv",
        "budget_ledger": config["ledger"], "dataset_id": "shop/2026-12-02",
        "release_id": "top_items/2026-12-02"}  # fmt: skip
    assert releases["synthetic"]["pipeline_options"]["output"].endswith("/2026-12-02/synthetic.parquet")

    # One budget a month: the dataset id from the logical date; a file of one's choosing; no dead letters.
    config |= {"dataset_id": "shop/{{ logical_date.strftime('%Y-%m') }}", "input": "/d/{{ ds_nodash }}.csv"}
    config["releases"]["synthetic"]["file"] = "rows-{{ macros.ds_add(ds, -1) }}.csv"
    del config["dead_letters"], config["budget"]
    monthly = plan(config, "2026-12-31")
    assert monthly["budget"] is None
    synthetic = by_name(monthly)["synthetic"]["pipeline_options"]
    assert synthetic["dataset_id"] == "shop/2026-12" and synthetic["input"] == "/d/20261231.csv"
    assert synthetic["output"] == f"{tmp_path}/releases/2026-12-31/rows-2026-12-30.csv"
    assert "dead_letter" not in synthetic


def test_a_variable_that_would_spend_a_fresh_budget_on_the_same_rows_is_refused(tmp_path):
    config = shop_data(tmp_path, ())
    same_rows = "reads the same input on 2026-12-01 and 2026-12-02 but charges two dataset ids"
    assert same_rows in plan({**config, "input": "/data/all.parquet"}, "2026-12-02")["error"]
    monthly_input = "/data/{{ logical_date.strftime('%Y-%m') }}/*.parquet"
    assert same_rows in plan({**config, "input": monthly_input}, "2026-12-02")["error"]
    assert "reads the same input on 2026-11-30 and 2026-12-01" in plan({**config, "input": "/data/{{ macros.ds_add("
                                                                        "ds, -1)[:7] }}"})["error"]  # fmt: skip
    fixed = {**config, "input": "/data/all.parquet", "dataset_id": "shop"}  # one budget: the ledger bounds it
    assert by_name(plan(fixed))["spend"]["pipeline_options"]["dataset_id"] == "shop"
    monthly_budget = {**config, "dataset_id": "shop/{{ logical_date.strftime('%Y-%m') }}"}  # daily input
    assert "error" not in plan(monthly_budget)


def test_the_variable_is_checked_before_any_release(tmp_path):
    config = shop_data(tmp_path, ())
    releases = config["releases"]
    refused = {
        "needs ledger": {k: v for k, v in config.items() if k != "ledger"},
        "needs releases": {**config, "releases": {}},
        'unknown keys: select (releases are declared under "releases")': {**config, "select": {}},
        "runner must be": {**config, "runner": "SparkRunner"},
        "dead_letters must lie outside output": {**config, "dead_letters": f"{config['output']}/dead"},
        "release 'top_items' sets output, which the DAG sets": {
            **config, "releases": {**releases, "top_items": {**releases["top_items"], "output": "/elsewhere"}}},
        "release 'top_items' sets release_id": {
            **config, "releases": {"top_items": {**releases["top_items"], "release-id": "x"}}},
        "release 'x' needs a \"pipeline\"": {**config, "releases": {"x": {"pipeline": "count"}}},
        "release name 'a/b'": {**config, "releases": {"a/b": releases["spend"]}},
        "its file is a file name": {**config, "releases": {"x": {**releases["spend"], "file": "up/there.json"}}},
        "releases 'a' and 'b' write 'x.parquet' or its manifest alike": {**config, "releases": {
            "a": {**releases["spend"], "file": "x.csv"}, "b": {**releases["synthetic"], "file": "x.parquet"}}},
        "release 'top_items' sets dead_letter, which the DAG sets": {  # the provider passes deadLetter so
            **config, "releases": {"top_items": {**releases["top_items"], "deadLetter": "/srv/public/rows.csv"}}},
        "release 'top_items' sets seed, a test-only flag": {
            **config, "releases": {"top_items": {**releases["top_items"], "seed": 1}}},
        "beam_options set dead_letter, which the DAG sets": {**config, "beam_options": {"dead_letter": "/x.csv"}},
        "beam_options set seed": {**config, "beam_options": {"seed": 3}},
        "budget is {": {**config, "budget": {"epsilon": 1, "rho": 0.1}},
        "is not a template of the run's date: 'var' is undefined": {**config, "input": "{{ var.value.x }}"},
        "not a template of the run's date: 'beam_expmech_releases._Day object' has no attribute 'now'": {
            **config, "dataset_id": "shop/{{ logical_date.now().strftime('%Y-%m') }}"},
        "not a template of the run's date: 'types.SimpleNamespace object' has no attribute 'datetime'": {
            **config, "dataset_id": "shop/{{ macros.datetime.now() }}"},
        "not a template of the run's date: No filter named 'random'": {**config,
                                                                       "dataset_id": "{{ ['a', 'b']|random }}"},
        "not a template of the run's date: 'lipsum' is undefined": {**config, "dataset_id": "{{ lipsum(1) }}"},
    }  # fmt: skip
    for inside in (f"file://{config['output']}/dead", f"/{config['output']}//dead"):  # the output, spelled another way
        assert "dead_letters must lie outside output" in plan({**config, "dead_letters": inside})["error"], inside
    for message, variable in refused.items():
        assert message in plan(variable).get("error", ""), message
    assert "must be a JSON object" in plan([])["error"]


def test_the_variable_switches_to_dataflow(tmp_path):
    config = shop_data(tmp_path, ())
    dataflow = {"project_id": "p", "location": "europe-west1"}
    options = {"temp_location": "gs://b/tmp", "sdk_container_image": "europe-docker.pkg.dev/p/r/beam-expmech:abc"}
    config |= {"runner": "DataflowRunner", "dataflow": dataflow, "beam_options": options}
    for release in by_name(plan(config)).values():
        assert release["runner"] == "DataflowRunner" and release["dataflow_config"] == dataflow
        assert release["pipeline_options"]["sdk_container_image"] == options["sdk_container_image"]


def test_the_variable_switches_to_a_dask_cluster(tmp_path):
    """DaskRunner: every release gets the scheduler's address as Beam's --dask_client_address (the operator
    passes pipeline_options as --key=value), and nothing of Dataflow's; a missing or malformed address is
    refused when the run starts, before any release is charged."""
    config = shop_data(tmp_path, ())
    config |= {"runner": "DaskRunner", "dask": {"address": "tcp://scheduler.example:8786"},
               "dataflow": {"project_id": "p"}, "beam_options": {"dask_connection_timeout": 10}}  # fmt: skip
    for release in by_name(plan(config)).values():
        assert release["runner"] == "DaskRunner" and release["dataflow_config"] == {}
        options = release["pipeline_options"]
        assert options["dask_client_address"] == "tcp://scheduler.example:8786"
        assert options["dask_connection_timeout"] == 10 and options["budget_ledger"] == config["ledger"]
    tls = {**config, "dask": {"address": "tls://10.0.0.5:8786"}}
    assert by_name(plan(tls))["spend"]["pipeline_options"]["dask_client_address"] == "tls://10.0.0.5:8786"
    assert "dask_client_address" not in by_name(plan({**config, "runner": "DirectRunner"}))["spend"]["pipeline_options"]

    needs = 'runner DaskRunner needs "dask": {"address": "tcp://HOST:PORT"}'
    assert needs in plan({k: v for k, v in config.items() if k != "dask"})["error"]
    assert needs in plan({**config, "dask": {}})["error"]
    assert needs in plan({**config, "dask": "tcp://scheduler.example:8786"})["error"]
    for address in ("scheduler.example:8786", "tcp://scheduler.example", "tcp://:8786", "http://h:8786",
                    "tcp://h:port", "tcp://h:8786/path"):  # fmt: skip
        assert "dask address must be tcp://HOST:PORT" in plan({**config, "dask": {"address": address}})["error"]
    assert "dask has unknown keys: adress" in plan({**config, "dask": {"adress": "x", "address": "tcp://h:1"}})["error"]


def test_the_budget_is_opened_by_the_ledger_command_the_pipelines_interpreter_runs(tmp_path):
    """open_budget's command, run as the DAG runs it: the budget set once; a second day's run of the same dataset
    passes; another budget for it is refused (exit 2)."""
    command = dag_file_without_airflow()["ledger_init_command"]
    budget = {"ledger": str(tmp_path / "ledger.json"), "dataset_id": "shop/2026-12", "epsilon": 2.0, "delta": 1e-6}
    first = subprocess.run([sys.executable, *command(budget)[1:]], capture_output=True, text=True)
    again = subprocess.run([sys.executable, *command(budget)[1:]], capture_output=True, text=True)
    other = subprocess.run([sys.executable, *command({**budget, "epsilon": 3})[1:]], capture_output=True, text=True)
    assert (first.returncode, again.returncode, other.returncode) == (0, 0, 2), first.stderr + other.stderr
    assert "has budget epsilon=2, delta=1e-06 already" in again.stdout and "has another budget" in other.stderr
    assert Ledger(budget["ledger"]).dataset("shop/2026-12")["epsilon"] == 2.0
