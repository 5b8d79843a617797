"""Every pipeline on Beam's Dask runner, on a real two-process Dask cluster: the same release as the
DirectRunner's under a test seed, the ledger, and a scheduler that cannot be reached."""

from __future__ import annotations

import importlib
import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.options.pipeline_options import StandardOptions
from beam_data import purchases, write
from public_tables import DATA, csv_path

from beam_expmech.ledger import Ledger
from beam_expmech.releases import runners
from pipelines import console, learn, quantiles, select, synthesize
from pipelines import ledger as ledger_cli

distributed = pytest.importorskip("distributed")  # the test extra installs it


@pytest.fixture(scope="module")
def cluster() -> distributed.LocalCluster:
    """A local Dask cluster of two worker processes, one thread each, for the whole module.

    Its workers unpickle the job's steps, so they must import this checkout's packages, not another's: they
    are spawned with this process's sys.path (multiprocessing's spawn passes it on), so they do, be it a
    fresh clone installed with pip install -e or a git worktree beside it.
    """
    # ":0": the scheduler's HTTP server (always on) on a free port, not 8787, which a cluster of another
    # pytest-xdist worker may hold.
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as local:
        yield local


@pytest.fixture
def scheduler(cluster) -> str:
    """The address of the module's cluster's scheduler."""
    return cluster.scheduler_address


def on_dask(address: str) -> list[str]:
    return ["--runner", "DaskRunner", "--dask_client_address", address]  # the short name: ours, not Beam's


def run(main, flags: list[str]) -> None:
    assert main(flags) == 0


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def test_the_short_name_is_the_dask_runner():
    for flags in (["--runner", "DaskRunner"], ["--runner=DaskRunner"]):
        assert runners.pipeline_options(flags).view_as(StandardOptions).runner == runners.DASK_RUNNER
    assert runners.pipeline_options(["--runner", "DirectRunner"]).view_as(StandardOptions).runner == ("DirectRunner")


def select_with_a_privacy_unit_and_a_ledger(scheduler, tmp_path, caplog):
    write(purchases(5_000, users=300), tmp_path / "data.parquet", "parquet")
    ledger = str(tmp_path / "ledger.json")
    assert ledger_cli.main(["init", "--budget-ledger", ledger, "--dataset-id", "shop", "--epsilon", "2"]) == 0
    flags = ["--input", str(tmp_path / "data.parquet"), "--column", "item", "--candidate-range", "0:50",
             "--privacy-unit", "user_id", "--max-rows-per-unit", "2", "--epsilon", "0.5", "--top-k", "3",
             "--seed", "7", "--budget-ledger", ledger, "--dataset-id", "shop"]  # fmt: skip
    for runner in ("direct", "dask"):  # the releases in a folder of their own, the dead letters outside it
        on = on_dask(scheduler) if runner == "dask" else []
        with caplog.at_level(logging.DEBUG, logger="beam_expmech.releases"):
            run(select.main, [*flags, "--output", str(tmp_path / "out" / f"{runner}.json"),
                              "--dead-letter", str(tmp_path / f"{runner}.dead_letter.csv"), *on])  # fmt: skip
    assert read_json(tmp_path / "out" / "dask.json") == read_json(tmp_path / "out" / "direct.json")
    # No counters on Dask: said at DEBUG (what is not counted is no business of a log that others may read), and
    # the run is done, as its release is written.
    assert any("counters are unavailable" in r.message and r.levelno == logging.DEBUG for r in caplog.records)
    assert [r["status"] for r in Ledger(ledger).dataset("shop")["releases"]] == ["done", "done"]
    assert (tmp_path / "dask.dead_letter.csv").read_text() == (tmp_path / "direct.dead_letter.csv").read_text()


def quantiles_and_their_dead_letter(scheduler, tmp_path, _caplog):
    rng = np.random.default_rng(3)
    values = rng.normal(50, 10, 5_000)
    values[:3] = [np.nan, np.inf, -np.inf]  # rows for the dead letter, which Dask must write too
    pq.write_table(pa.table({"x": values, "user": rng.integers(0, 500, values.size)}), tmp_path / "d.parquet")
    flags = ["--input", str(tmp_path / "d.parquet"), "--column", "x", "--lower", "0", "--upper", "100",
             "--quantiles", "0.1,0.5,0.9", "--epsilon", "1", "--privacy-unit", "user", "--max-rows-per-unit", "2",
             "--bins", "1024", "--seed", "11"]  # fmt: skip
    for runner in ("direct", "dask"):
        run(quantiles.main, [*flags, "--output", str(tmp_path / "out" / f"{runner}.json"),
                             "--dead-letter", str(tmp_path / f"{runner}.dead_letter.csv"),
                             *(on_dask(scheduler) if runner == "dask" else [])])  # fmt: skip
    assert read_json(tmp_path / "out" / "dask.json") == read_json(tmp_path / "out" / "direct.json")
    dead = sorted((tmp_path / "dask.dead_letter.csv").read_text().splitlines())
    assert dead == sorted((tmp_path / "direct.dead_letter.csv").read_text().splitlines()) and len(dead) == 1 + 3


def learn_on_nltcs(scheduler, tmp_path, _caplog):
    nltcs = csv_path("nltcs")
    features = ",".join(nltcs.read_text().splitlines()[0].split(",")[:3])
    label = nltcs.read_text().splitlines()[0].split(",")[3]
    flags = ["--input", str(nltcs), "--features", features, "--label", label, "--weights", "-1,0,1",
             "--epsilon", "1", "--seed", "5"]  # fmt: skip
    run(learn.main, [*flags, "--output", str(tmp_path / "direct.json")])
    run(learn.main, [*flags, "--output", str(tmp_path / "dask.json"), *on_dask(scheduler)])
    assert read_json(tmp_path / "dask.json") == read_json(tmp_path / "direct.json")


def synthesize_titanic(scheduler, tmp_path, _caplog):
    flags = ["--input", str(csv_path("titanic")), "--domain", str(DATA / "titanic" / "domain.json"),
             "--columns", "Survived,Pclass,Sex,Embarked", "--method", "mwem", "--rounds", "3", "--epsilon", "1",
             "--seed", "9"]  # fmt: skip
    run(synthesize.main, [*flags, "--output", str(tmp_path / "direct.csv")])
    run(synthesize.main, [*flags, "--output", str(tmp_path / "dask.csv"), *on_dask(scheduler)])
    assert (tmp_path / "dask.csv").read_bytes() == (tmp_path / "direct.csv").read_bytes()
    assert read_json(tmp_path / "dask.manifest.json") == read_json(tmp_path / "direct.manifest.json")


def synthesize_numeric_columns(scheduler, tmp_path, _caplog):
    """An integer column on private edges (a first pass whose release a worker writes and this process reads
    back), a float column on a public grid, NaN to the dead letter."""
    rng = np.random.default_rng(23)  # test-only
    age = rng.integers(10, 90, 1_000)
    income = rng.normal(50, 20, 1_000)
    income[5] = np.nan
    pq.write_table(pa.table({"age": age, "income": income, "c": (age > 50).astype(np.int64)}), tmp_path / "d.parquet")
    domain = {"age": {"lower": 0, "upper": 100, "bins": "private", "count": 4, "share": 0.2},
              "income": {"lower": 0, "upper": 100, "bins": 5}, "c": 2}  # fmt: skip
    (tmp_path / "domain.json").write_text(json.dumps(domain))
    flags = ["--input", str(tmp_path / "d.parquet"), "--domain", str(tmp_path / "domain.json"), "--method", "mwem",
             "--rounds", "2", "--epsilon", "2", "--seed", "9"]  # fmt: skip
    for runner in ("direct", "dask"):
        run(synthesize.main, [*flags, "--output", str(tmp_path / "out" / f"{runner}.parquet"),
                              "--dead-letter", str(tmp_path / f"{runner}.dead_letter.csv"),
                              *(on_dask(scheduler) if runner == "dask" else [])])  # fmt: skip
    out = tmp_path / "out"
    assert pq.read_table(out / "dask.parquet").equals(pq.read_table(out / "direct.parquet"))
    assert read_json(out / "dask.manifest.json") == read_json(out / "direct.manifest.json")
    assert "income: NaN or infinite" in (tmp_path / "dask.dead_letter.csv").read_text()


def test_every_pipeline_releases_on_dask_what_it_releases_on_the_direct_runner(scheduler, tmp_path, caplog):
    """One test, so that one cluster serves them all whatever the test processes (a cluster costs seconds)."""
    checks = (select_with_a_privacy_unit_and_a_ledger, quantiles_and_their_dead_letter, learn_on_nltcs,
              synthesize_titanic, synthesize_numeric_columns)  # fmt: skip
    for check in checks:
        (tmp_path / check.__name__).mkdir()
        check(scheduler, tmp_path / check.__name__, caplog)


def test_an_unreachable_scheduler_is_one_line_before_any_charge(tmp_path, capsys):
    write(purchases(500), tmp_path / "data.parquet", "parquet")
    ledger = str(tmp_path / "ledger.json")
    assert ledger_cli.main(["init", "--budget-ledger", ledger, "--dataset-id", "shop", "--epsilon", "2"]) == 0
    with socket.socket() as free:  # a port nothing listens on once closed
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    capsys.readouterr()
    code = console.run_cli(select.main, ["--input", str(tmp_path / "data.parquet"), "--column", "item",
                                         "--candidate-range", "0:50", "--epsilon", "1",
                                         "--output", str(tmp_path / "r.json"), "--budget-ledger", ledger,
                                         "--dataset-id", "shop", *on_dask(f"tcp://127.0.0.1:{port}")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1
    assert err.count("\n") == 1 and f"tcp://127.0.0.1:{port} cannot be reached" in err and "Traceback" not in err
    assert Ledger(ledger).dataset("shop")["releases"] == []  # nothing charged
    assert not (tmp_path / "r.json").exists()


def test_a_runner_beam_does_not_know_stops_before_any_charge(tmp_path, capsys):
    write(purchases(500), tmp_path / "data.parquet", "parquet")
    ledger = str(tmp_path / "ledger.json")
    assert ledger_cli.main(["init", "--budget-ledger", ledger, "--dataset-id", "shop", "--epsilon", "2"]) == 0
    capsys.readouterr()
    code = console.run_cli(select.main, ["--input", str(tmp_path / "data.parquet"), "--column", "item",
                                         "--candidate-range", "0:50", "--epsilon", "1",
                                         "--output", str(tmp_path / "r.json"), "--budget-ledger", ledger,
                                         "--dataset-id", "shop", "--runner", "DaskRuner"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Unexpected pipeline runner: DaskRuner" in err
    assert Ledger(ledger).dataset("shop")["releases"] == []


def test_a_worker_killed_mid_job_reruns_elsewhere_or_fails_in_one_line_and_is_charged_once(cluster, tmp_path, capsys):
    """A worker SIGKILLed once mid-job (dask_faults.KillOnce; its nanny starts another): Dask reruns the lost
    task on the other worker, and the job releases what an undisturbed run releases under the same seed,
    charged once, done; a scheduler that allows no failure (distributed.scheduler.allowed-failures: 0)
    fails the job instead, in one line, exit 1, charged once, failed. Never two charges for one run,
    never none."""
    from dask_faults import KillOnce

    write(purchases(5_000, users=300), tmp_path / "data.parquet", "parquet")
    ledger = str(tmp_path / "ledger.json")
    assert ledger_cli.main(["init", "--budget-ledger", ledger, "--dataset-id", "shop", "--epsilon", "2"]) == 0
    flags = ["--input", str(tmp_path / "data.parquet"), "--column", "item", "--candidate-range", "0:50",
             "--privacy-unit", "user_id", "--max-rows-per-unit", "2", "--epsilon", "0.5", "--top-k", "3",
             "--seed", "7"]  # fmt: skip
    run(select.main, [*flags, "--output", str(tmp_path / "undisturbed.json")])
    charged = [*flags, "--budget-ledger", ledger, "--dataset-id", "shop"]
    allowed = cluster.scheduler.allowed_failures
    with distributed.Client(cluster) as client:
        client.run(importlib.import_module, "pipelines.select")  # both warm: the rerun need not wait for imports
        try:
            for allowed_failures, status in ((3, "done"), (0, "failed")):
                cluster.scheduler.allowed_failures = allowed_failures  # what the config key sets when it starts
                marker = tmp_path / f"killed_{allowed_failures}"
                client.register_plugin(KillOnce(str(marker)), name="kill-once")
                out = tmp_path / f"dask_{allowed_failures}.json"
                capsys.readouterr()
                code = console.run_cli(
                    select.main, [*charged, "--output", str(out), *on_dask(cluster.scheduler_address)]
                )
                err = capsys.readouterr().err
                assert marker.exists()  # a worker was killed while it ran the job's task
                if status == "done":
                    assert code == 0 and read_json(out) == read_json(tmp_path / "undisturbed.json")
                else:
                    assert code == console.JOB_ERROR and not out.exists()
                    assert err.count("\n") == 1 and err.startswith("error: the job failed: KilledWorker")
                assert "Traceback" not in err
                releases = Ledger(ledger).dataset("shop")["releases"]
                assert [r["status"] for r in releases][-1] == status
                assert [r["output"] for r in releases].count(str(out)) == 1  # charged once, whatever Dask retried
        finally:  # the module's cluster, as the other tests know it
            cluster.scheduler.allowed_failures = allowed
            client.unregister_worker_plugin("kill-once", nanny=False)
    assert [r["status"] for r in Ledger(ledger).dataset("shop")["releases"]] == ["done", "failed"]


def test_a_cluster_left_with_no_worker_fails_the_job_after_the_timeout(tmp_path, capsys):
    """The last worker killed, and no nanny to start another: Dask alone would wait for ever; the job waits
    --dask_no_worker_timeout seconds with no worker, then fails in one line, exit 1, charged once, failed."""
    from dask_faults import KillOnce

    write(purchases(2_000, users=300), tmp_path / "data.parquet", "parquet")
    ledger = str(tmp_path / "ledger.json")
    assert ledger_cli.main(["init", "--budget-ledger", ledger, "--dataset-id", "shop", "--epsilon", "2"]) == 0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path for path in sys.path if path)}  # this checkout, support/
    with distributed.LocalCluster(n_workers=0, dashboard_address=":0") as scheduler_only:
        worker = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", "--no-nanny", "--nthreads", "1",
                                   scheduler_only.scheduler_address], env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            with distributed.Client(scheduler_only) as client:
                client.wait_for_workers(1, timeout=60)
                client.register_plugin(KillOnce(str(tmp_path / "killed")), name="kill-once")
                capsys.readouterr()
                code = console.run_cli(select.main, ["--input", str(tmp_path / "data.parquet"), "--column", "item",
                                                     "--candidate-range", "0:50", "--epsilon", "1",
                                                     "--output", str(tmp_path / "r.json"), "--budget-ledger", ledger,
                                                     "--dataset-id", "shop", *on_dask(scheduler_only.scheduler_address),
                                                     "--dask_no_worker_timeout", "2"])  # fmt: skip
        finally:
            worker.kill()
            worker.wait(timeout=30)
    err = capsys.readouterr().err
    assert (tmp_path / "killed").exists() and code == console.JOB_ERROR and not (tmp_path / "r.json").exists()
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(
        "error: the job failed: the Dask cluster has had no worker for 2 s (--dask_no_worker_timeout)"
    )
    assert [r["status"] for r in Ledger(ledger).dataset("shop")["releases"]] == ["failed"]


def _read_by(batch) -> tuple[int, int]:
    time.sleep(0.5)  # a read that takes a while, as a row group of a large file does: worth spreading
    return os.getpid(), batch.num_rows


def test_one_files_row_groups_are_read_by_every_worker_given_partitions(scheduler, tmp_path):
    # Beam's Dask runner keeps up to 128 elements of a Create in one partition: when a file's row groups were
    # found in the graph (from a Create of files), one file's job ran on one worker, the other idle.
    import apache_beam as beam
    from apache_beam.testing.util import assert_that, equal_to

    from beam_expmech.transforms import ReadRecordBatches

    path = tmp_path / "data.parquet"
    pq.write_table(pa.table({"item": np.arange(40_000) % 7}), path, row_group_size=5_000)
    options = runners.pipeline_options([*on_dask(scheduler), "--dask_npartitions", "4"])
    with beam.Pipeline(options=options) as pipeline:
        readers = (
            pipeline
            | ReadRecordBatches([str(path)], None, ["item"])
            | beam.Map(_read_by)
            | beam.combiners.ToList()
            | beam.Map(lambda read: (len({pid for pid, _ in read}), sum(rows for _, rows in read)))
        )
        assert_that(readers, equal_to([(2, 40_000)]))
