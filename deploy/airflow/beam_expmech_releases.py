"""Scheduled private releases over daily partitions, each charged once to a budget ledger.

Copy this file into the DAGs folder. What it releases, from which partition, at what cost and on
which runner is one Airflow Variable, ``beam_expmech`` (JSON), read when a run starts:

    {
      "input": "gs://bucket/purchases/dt={{ ds }}/*.parquet",   the run's partition (file, glob or gs://)
      "output": "gs://bucket/releases",                each release writes OUTPUT/<ds>/<file>
      "dead_letters": "gs://ops-bucket/dead_letters",  optional: keep rejected rows, DEAD_LETTERS/<ds>/<name>...:
                                                       raw data, for operators only, never under "output"
      "ledger": "gs://bucket/ledger.json",             the budget ledger every release is charged to
      "dataset_id": "purchases/{{ ds }}",              the budget a run spends: one a partition here; one a
                                                       month: "purchases/{{ logical_date.strftime('%Y-%m') }}"
      "budget": {"epsilon": 2.0, "delta": 1e-6},       optional: set for each new dataset id the first time
                                                       it is seen (without it, set it with ledger init)
      "releases": {                                    NAME: the pipeline and its flags (underscores)
        "top_items": {"pipeline": "select", "column": "item", "candidate_range": "0:50", "top_k": 3,
                      "epsilon": 0.5},
        "spend": {"pipeline": "quantiles", "column": "amount", "lower": 0, "upper": 500,
                  "quantiles": "0.5,0.9", "epsilon": 0.3},
        "synthetic": {"pipeline": "synthesize", "domain": "gs://bucket/domain.json", "epsilon": 1.0,
                      "file": "synthetic.csv"}
      },
      "runner": "DirectRunner",                        or "DataflowRunner", "DaskRunner" (optional)
      "dataflow": {"project_id": "...", "location": "us-central1"},          (DataflowRunner)
      "dask": {"address": "tcp://scheduler:8786"},     a Dask scheduler you run (DaskRunner)
      "beam_options": {"temp_location": "gs://bucket/tmp"}
    }

A release's "pipeline" is select, quantiles, learn or synthesize; its other keys are that
pipeline's flags, but for "file" (the output's name in OUTPUT/<ds>/: NAME.json by default,
NAME.parquet for synthesize) and the flags the DAG sets itself (input, output, dead_letter,
budget_ledger, dataset_id, release_id). Every string may use the run's dates, Airflow's way:
``{{ ds }}``, ``{{ ds_nodash }}``, ``{{ logical_date.strftime(...) }}``, ``{{ macros.ds_add(ds, -1) }}``.

Idempotent: each release is charged and written once per partition, whatever runs it (a retry, a
re-triggered day, a backfill): its release id is NAME/<ds>, and the ledger remembers it. A run of a
done release exits at once (nothing read, nothing spent); a retry after a failed attempt runs under
that attempt's charge. A refusal (exit 2: bad flags; exit 3: the budget would be overspent) spends
nothing and is not retried.

Privacy: the guarantee is per dataset id: a person whose rows are in several partitions, each its own
dataset id, spends each partition's budget. A run is refused before any release when a day within the
past 400 renders the same input as the run's day under another dataset id (its fresh budget would be
spent again on the same rows): a fixed input needs a fixed dataset id. The dead letters hold raw input
rows: kept only where "dead_letters" says, outside "output", readable by operators only.

The pipelines run in the interpreter named by the environment variable ``BEAM_EXPMECH_PYTHON`` (default
``python3``), which must have beam-expmech installed. ``BEAM_EXPMECH_RETRY_DELAY`` (seconds, default 300)
spaces a failed release's retries (two).
"""

from __future__ import annotations

import functools
import os
import posixpath
import re
import subprocess
from datetime import UTC, date, datetime, timedelta
from types import SimpleNamespace

from airflow.providers.apache.beam.operators.beam import BeamRunPythonPipelineOperator
from airflow.sdk import DAG, Variable, get_current_context, task
from airflow.sdk.exceptions import AirflowException, AirflowFailException

PIPELINES = {"select": ".json", "quantiles": ".json", "learn": ".json", "synthesize": ".parquet"}  # default file
REQUIRED = ("input", "output", "ledger", "dataset_id", "releases")
OPTIONAL = ("budget", "dead_letters", "runner", "dataflow", "dask", "beam_options")
SET_BY_THE_DAG = ("input", "output", "dead_letter", "budget_ledger", "dataset_id", "release_id")
REFUSED_FLAGS = ("seed",)
RUNNERS = ("DirectRunner", "DataflowRunner", "DaskRunner")
PYTHON = os.environ.get("BEAM_EXPMECH_PYTHON", "python3")
LOOKBACK_DAYS = 400  # how far back a run looks for a day that reads its input under another dataset id
REFUSED = (2, 3)  # the pipelines' exit codes for a refusal before the charge: the same again on a retry


def render(value, day: date):
    """``value`` (the variable, or any part of it) with every string rendered as a Jinja template of ``day``:
    ds, ds_nodash, logical_date (its year, month, day, strftime), macros.ds_add, macros.ds_format. Anything else
    (a Variable, a connection, params, the clock, random) is refused: a release's input and budget follow its
    date alone, the same on every run of that date."""
    if isinstance(value, dict):
        return {key: render(item, day) for key, item in value.items()}
    if isinstance(value, list):
        return [render(item, day) for item in value]
    if not isinstance(value, str) or "{" not in value:
        return value
    import jinja2  # Airflow's own template engine

    try:
        return _template(value).render(_date_context(day))
    except jinja2.TemplateError as error:
        raise ValueError(f"the beam_expmech variable's {value!r} is not a template of the run's date: "
                         f"{error.message}") from None  # fmt: skip


@functools.cache
def _template(text: str):
    import jinja2.sandbox

    environment = jinja2.sandbox.SandboxedEnvironment(undefined=jinja2.StrictUndefined)
    environment.filters.pop("random")  # the same day renders the same way, every time it runs
    environment.globals.clear()  # range, lipsum (random), dict, cycler, joiner, namespace: none is a date
    return environment.from_string(text)


class _Day:
    """The run's logical date as a template sees it: its parts and strftime, and no clock (``datetime``'s now()
    and today() would give a partition's budget by the day a run happens to run)."""

    def __init__(self, day: date):
        self.year, self.month, self.day = day.year, day.month, day.day
        self._moment = datetime(day.year, day.month, day.day, tzinfo=UTC)

    def strftime(self, fmt: str) -> str:
        return self._moment.strftime(fmt)

    def isoformat(self) -> str:
        return self._moment.isoformat()

    def __str__(self) -> str:
        return self.isoformat()


def _date_context(day: date) -> dict:
    def ds_add(ds: str, days: int) -> str:
        return (date.fromisoformat(ds) + timedelta(days=days)).isoformat()

    def ds_format(ds: str, input_format: str, output_format: str) -> str:
        return datetime.strptime(ds, input_format).strftime(output_format)

    macros = SimpleNamespace(ds_add=ds_add, ds_format=ds_format)
    return {"ds": day.isoformat(), "ds_nodash": day.strftime("%Y%m%d"), "logical_date": _Day(day), "macros": macros}


def plan_releases(config: dict, ds: str) -> dict:
    """The run of day ``ds``: {"budget": the dataset's budget to set if new (or None), "releases": each declared
    release's Beam operator arguments}. Raises ValueError, before any release, on a variable it cannot run."""
    _check_keys(config)
    day = date.fromisoformat(ds)
    _check_partitions(config, day)
    rendered = render(config, day)
    dataset_id, runner = rendered["dataset_id"], rendered.get("runner", "DirectRunner")
    if runner not in RUNNERS:
        raise ValueError(f"runner must be {', '.join(RUNNERS[:-1])} or {RUNNERS[-1]}, got {runner!r}")
    dead_letters = rendered.get("dead_letters")  # optional: without it, rejected rows are counted, not kept
    if dead_letters and _inside(dead_letters, rendered["output"]):
        raise ValueError("the beam_expmech variable's dead_letters must lie outside output: they hold raw rows")
    on_dask = {"dask_client_address": dask_address(rendered.get("dask"))} if runner == "DaskRunner" else {}
    releases, stems = [], {}
    for name, declared in rendered["releases"].items():
        flags = dict(declared)
        pipeline, file = flags.pop("pipeline"), flags.pop("file", name + PIPELINES[declared["pipeline"]])
        if not isinstance(file, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,100}", file) or file.startswith("."):
            raise ValueError(f"release {name!r}: its file is a file name (letters, digits, _ - .), got {file!r}")
        placed = {
            "input": rendered["input"],
            "output": posixpath.join(rendered["output"], ds, file),
            **({"dead_letter": posixpath.join(dead_letters, ds, f"{name}.dead_letter.csv")} if dead_letters else {}),
            "budget_ledger": rendered["ledger"],
            "dataset_id": dataset_id,
            "release_id": f"{name}/{ds}",
        }
        stem = posixpath.splitext(file)[0]  # a table's manifest: STEM.manifest.json
        if stem in stems:
            raise ValueError(f"releases {stems[stem]!r} and {name!r} write {file!r} or its manifest alike: give each "
                             "its own file name")  # fmt: skip
        stems[stem] = name
        releases.append({
            "py_file": f"pipelines.{pipeline}",
            "runner": runner,
            "pipeline_options": {**rendered.get("beam_options", {}), **on_dask, **flags, **placed},
            "dataflow_config": rendered.get("dataflow", {}) if runner == "DataflowRunner" else {},
        })  # fmt: skip
    budget = rendered.get("budget")
    opening = None if budget is None else {"ledger": rendered["ledger"], "dataset_id": dataset_id, **budget}
    return {"budget": opening, "releases": releases}


def _check_keys(config: dict) -> None:
    if not isinstance(config, dict):
        raise ValueError("the beam_expmech variable must be a JSON object")
    missing = [key for key in REQUIRED if not config.get(key)]
    if missing:
        raise ValueError(f"the beam_expmech variable needs {', '.join(missing)}")
    if unknown := set(config) - {*REQUIRED, *OPTIONAL}:
        hint = ' (releases are declared under "releases")' if unknown & set(PIPELINES) else ""
        raise ValueError(f"the beam_expmech variable has unknown keys: {', '.join(sorted(unknown))}{hint}")
    budget = config.get("budget")
    if budget is not None and (not isinstance(budget, dict) or set(budget) - {"epsilon", "delta"}
                               or "epsilon" not in budget):  # fmt: skip
        raise ValueError('the beam_expmech variable\'s budget is {"epsilon": E, "delta": D} (delta optional)')
    if not isinstance(config["releases"], dict):
        raise ValueError('the beam_expmech variable\'s releases are {"NAME": {"pipeline": ..., flags}, ...}')
    for name, declared in config["releases"].items():
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name):
            raise ValueError(f"release name {name!r}: letters, digits, _ and - only (it names files and release ids)")
        if not isinstance(declared, dict) or declared.get("pipeline") not in PIPELINES:
            raise ValueError(f'release {name!r} needs a "pipeline": one of {", ".join(PIPELINES)}')
        if taken := [flag for flag in map(_flag, declared) if flag in (*SET_BY_THE_DAG, *REFUSED_FLAGS)]:
            raise ValueError(f"release {name!r} sets {taken[0]}, {_why(taken[0])}: leave it out")
    if taken := [flag for flag in map(_flag, config.get("beam_options", {})) if flag in (*SET_BY_THE_DAG,
                                                                                          *REFUSED_FLAGS)]:  # fmt: skip
        raise ValueError(f"the beam_expmech variable's beam_options set {taken[0]}, {_why(taken[0])}: leave it out")


def _flag(key: str) -> str:
    """A key as the pipeline gets it: the Beam provider snake-cases a key (deadLetter: --dead_letter), and the
    pipelines take --some-flag as --some_flag."""
    return re.sub(r"(?!^)([A-Z]+)", r"_\1", str(key)).lower().replace("-", "_")


def _why(flag: str) -> str:
    if flag in REFUSED_FLAGS:
        return "a test-only flag (the same noise every run: not private)"
    return "which the DAG sets for each run"


def _check_partitions(config: dict, day: date) -> None:
    """Refuse a variable under which two days read the same input but spend two budgets: any day of the
    LOOKBACK_DAYS before ``day`` whose input renders as ``day``'s and whose dataset id does not."""
    template = {"input": config["input"], "dataset_id": config["dataset_id"]}
    today = render(template, day)
    for back in range(1, LOOKBACK_DAYS + 1):
        earlier = render(template, day - timedelta(days=back))
        if earlier["input"] == today["input"] and earlier["dataset_id"] != today["dataset_id"]:
            raise ValueError(
                f"the beam_expmech variable reads the same input on {day - timedelta(days=back)} and {day} but "
                f"charges two dataset ids ({earlier['dataset_id']!r}, {today['dataset_id']!r}): each would "
                "spend a fresh budget on the same rows; template the input by the date too, or fix the dataset id"
            )


def _inside(path: str, folder: str) -> bool:
    """Whether ``path`` lies in ``folder`` (or is it), each as the pipelines read it: file:// dropped, repeated
    slashes one, gs:// kept."""
    path, folder = _location(path), _location(folder)
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _location(path: str) -> str:
    path = str(path).removeprefix("file://")
    scheme = "gs://" if path.startswith("gs://") else ""
    return scheme + posixpath.normpath(re.sub("/+", "/", path.removeprefix(scheme)))


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


def ledger_init_command(budget: dict) -> list[str]:
    """The command that sets a dataset's budget unless it has this one already (a new partition or period)."""
    return [PYTHON, "-m", "pipelines.ledger", "init", "--exist-ok", "--budget-ledger", budget["ledger"],
            "--dataset-id", budget["dataset_id"], "--epsilon", str(budget["epsilon"]),
            "--delta", str(budget.get("delta", 0.0))]  # fmt: skip


class ReleaseOperator(BeamRunPythonPipelineOperator):
    """Beam's operator, but a refusal before the charge (exit 2 or 3: nothing spent) fails without retries:
    it would be refused again. A job that failed after its charge (exit 1) is retried under that charge."""

    def execute(self, context):
        try:
            return super().execute(context)
        except AirflowException as error:
            if any(str(error).endswith(f"return code {code}") for code in REFUSED):
                raise AirflowFailException(f"refused, nothing spent: {error}") from error
            raise


with DAG(
    dag_id="beam_expmech_releases",
    description="Private releases of each day's partition on Apache Beam, each charged once to a budget ledger",
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    catchup=False,  # backfills: airflow backfill create --dag-id beam_expmech_releases --from-date ... --to-date ...
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(seconds=int(os.environ.get("BEAM_EXPMECH_RETRY_DELAY", 300)))},
    tags=["beam-expmech", "differential-privacy"],
) as dag:

    @task
    def prepare() -> list[dict]:
        """Check the beam_expmech variable once for this run's partition, set the partition's budget in the ledger
        if the variable declares one and the dataset id is new, and plan every release (the Beam operator's
        arguments, one dict a release)."""
        context = get_current_context()
        if context.get("logical_date") is None:
            raise AirflowFailException("this DAG releases the partition of a run's logical date: trigger it with one")
        planned = plan_releases(Variable.get("beam_expmech", deserialize_json=True), context["ds"])
        if planned["budget"] is not None:
            done = subprocess.run(ledger_init_command(planned["budget"]), capture_output=True, text=True)
            if done.returncode != 0:
                raise AirflowFailException(done.stderr.strip() or f"ledger init failed ({done.returncode})")
            print(done.stdout.strip())
        return planned["releases"]

    releases = ReleaseOperator.partial(
        task_id="release",
        py_options=["-m"],  # a module: run as a script, pipelines/select.py would shadow the stdlib's select
        py_interpreter=PYTHON,
        py_requirements=None,  # the interpreter has beam-expmech already
        max_active_tis_per_dagrun=1,  # one job at a time on a worker's DirectRunner
        deferrable=False,  # a deferred job's failure comes back without its exit code: a refusal would be retried
        map_index_template="{{ task.pipeline_options['release_id'] }}",
    ).expand_kwargs(prepare())
