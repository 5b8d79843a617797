"""Whole-process time and peak memory of pipelines.select against a single-process numpy count.

    python -m benchmarks.bench_select [--rows 1000000,10000000] [--runners direct,multi,dask]
                                      [--workdir DIR] [--no-pipelinedp]

For each size, a Parquet file of (user_id, item in 1,000 candidates Zipf-like, value) is
generated once, then each job runs as its own process (what a user waits for):
  (a) pipelines.select, row-level privacy
  (b) the same with --privacy-unit user_id --max-rows-per-unit 5
  (c) pyarrow + numpy, one process, non-private: read the column, bincount (the baseline)
  (d) PipelineDP's DP count per item with the same bounding (5 rows per user), on Beam's
      DirectRunner, when pipeline-dp is installed (up to 10^7 rows: there it takes minutes)
(a) and (b) run on each of --runners: ``direct`` (the DirectRunner, in-process), ``multi`` (its
multi_processing mode, 2 worker processes) and ``dask`` (Beam's Dask runner on a Dask LocalCluster
of 2 worker processes, 1 thread each, which this script starts before the job and shuts down after it;
its start-up is not timed, and its workers have imported Beam and this package before the job starts:
a cluster already running, as the README assumes).
The table gives seconds, rows/s, peak RSS and the ratio to (c) of the same size. Peak RSS is the
peak of the summed resident memory of every process of the job, sampled every 50 ms (and at least
the job process's own peak, from wait4): the job process and its children (multi's workers), and on
Dask the cluster's 2 worker processes and their 2 nannies too (the scheduler, in this process, is not
counted); its "measured" column says which.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

CANDIDATES = 1000
RUNNERS = {
    "direct": ["--runner", "DirectRunner"],
    "multi": ["--runner", "DirectRunner", "--direct_running_mode", "multi_processing", "--direct_num_workers", "2"],
    "dask": ["--runner", "DaskRunner"],
}
MEASURED = {"direct": "job", "multi": "job+its workers", "dask": "job+2 workers+nannies"}


def generate(path: str, rows: int) -> None:
    rng = np.random.default_rng(0)
    schema = pa.schema([("user_id", pa.int64()), ("item", pa.int64()), ("value", pa.float64())])
    with pq.ParquetWriter(path, schema) as out:
        for start in range(0, rows, 1 << 20):
            n = min(1 << 20, rows - start)
            item = (rng.zipf(1.3, n) - 1) % CANDIDATES
            users = rng.integers(0, max(1, rows // 20), n)
            out.write_table(pa.table({"user_id": users, "item": item, "value": rng.normal(size=n)}, schema=schema))


def timed(command: list[str], also: Sequence[int] = (), warm: str | None = None) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB) of a child process: the peak of the summed RSS of the child, its
    descendants and the processes ``also`` (a Dask cluster's), sampled, and at least the child's own peak.

    ``warm``: a file read through once before the clock starts, so that every job reads it from the page
    cache. This machine's kernel evicts pages idle for a while: without it, whichever job runs first pays
    the disk (a 1.5 GB file: 2.1 s cold for the numpy count, 0.7 s warm) and the ratios flatter the rest."""
    import psutil

    if warm is not None:
        read_through(warm)
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    others = [psutil.Process(pid) for pid in also]

    def processes() -> list:
        job = psutil.Process(child.pid)
        return [job, *job.children(recursive=True), *others]

    with PeakRss(processes) as rss:
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - start
    if status != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{child.stderr.read().decode()[-2000:]}")
    return seconds, max(rss.total / 2**20, usage.ru_maxrss / 1024)


class PeakRss:
    """The peak resident memory of ``processes()`` (called at each sample: a job's children come and go),
    sampled every 50 ms on a thread of its own while in the ``with`` block: of each (``each``, by index)
    and of their sum (``total``), in bytes."""

    def __init__(self, processes):
        self.processes, self.each, self.total = processes, {}, 0
        self._done = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        import psutil

        while not self._done.wait(0.05):
            try:
                processes = self.processes()
            except psutil.Error:
                continue
            total = 0
            for i, process in enumerate(processes):
                with contextlib.suppress(psutil.Error):
                    rss = process.memory_info().rss
                    self.each[i], total = max(self.each.get(i, 0), rss), total + rss
            self.total = max(self.total, total)

    def __enter__(self) -> PeakRss:
        self._sampler.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._sampler.join()


def read_through(path: str) -> None:
    """Read ``path`` once, which leaves it in the page cache (see ``timed``)."""
    with open(path, "rb") as handle:
        while handle.read(1 << 24):
            pass


@contextlib.contextmanager
def cluster_for(runner: str, warm: str = "pipelines.select") -> Iterator[tuple[list[str], list[int]]]:
    """(the job's runner flags, the pids of the processes it runs on besides its own) for one job; on Dask,
    a fresh LocalCluster of 2 worker processes, 1 thread each, that have imported ``warm``, shut down after the job."""
    if runner != "dask":
        yield RUNNERS[runner], []
        return
    import distributed
    import psutil

    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0", silence_logs=logging.ERROR
    ) as cluster:
        with distributed.Client(cluster) as client:
            client.wait_for_workers(2)
            client.run(importlib.import_module, warm)  # the job's module, as a cluster in use would have it
        pids = [p.pid for p in psutil.Process().children(recursive=True)]  # the nannies and their workers
        yield [*RUNNERS[runner], "--dask_client_address", cluster.scheduler_address], pids


def numpy_count(path: str) -> None:
    """(c): the machine's practical limit for this count, no privacy."""
    items = pq.read_table(path, columns=["item"]).column("item").to_numpy()
    print(int(np.argmax(np.bincount(items, minlength=CANDIDATES))))


def pipelinedp_count(path: str) -> None:
    """(d): PipelineDP's DP count per item, at most 5 rows per user, public partitions."""
    import apache_beam as beam
    import pipeline_dp

    accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=1.0, total_delta=0)
    engine = pipeline_dp.DPEngine(accountant, pipeline_dp.BeamBackend())
    params = pipeline_dp.AggregateParams(
        metrics=[pipeline_dp.Metrics.COUNT], noise_kind=pipeline_dp.NoiseKind.LAPLACE, max_contributions=5
    )
    extractors = pipeline_dp.DataExtractors(
        privacy_id_extractor=lambda row: row["user_id"], partition_extractor=lambda row: row["item"],
        value_extractor=lambda row: 0,
    )  # fmt: skip
    with beam.Pipeline() as pipeline:
        rows = pipeline | beam.io.ReadFromParquet(path, columns=["user_id", "item"])
        counts = engine.aggregate(rows, params, extractors, public_partitions=list(range(CANDIDATES)))
        accountant.compute_budgets()
        _ = counts | beam.combiners.Count.Globally()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1000000,10000000")
    parser.add_argument("--runners", default="direct,multi,dask", help="of direct, multi, dask (comma-separated)")
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "beam_expmech_bench"))
    parser.add_argument("--no-pipelinedp", action="store_true")
    parser.add_argument("--numpy-count", help=argparse.SUPPRESS)
    parser.add_argument("--pipelinedp-count", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.numpy_count:
        return numpy_count(args.numpy_count)
    if args.pipelinedp_count:
        return pipelinedp_count(args.pipelinedp_count)
    runners = args.runners.split(",")
    if unknown := set(runners) - set(RUNNERS):
        parser.error(f"--runners: unknown {', '.join(sorted(unknown))} (of {', '.join(RUNNERS)})")

    try:
        import pipeline_dp  # noqa: F401

        have_pipelinedp = not args.no_pipelinedp
    except ImportError:
        have_pipelinedp = False
    os.makedirs(args.workdir, exist_ok=True)
    python = sys.executable
    print(f"{'rows':>12} {'job':<38} {'runner':<7} {'seconds':>8} {'rows/s':>12} {'peak RSS MB':>12} "
          f"{'measured':<22} {'vs (c)':>7}")  # fmt: skip
    for rows in (int(r) for r in args.rows.split(",")):
        path = os.path.join(args.workdir, f"purchases_{rows}.parquet")
        if not os.path.exists(path):
            generate(path, rows)
        out = os.path.join(args.workdir, "release.json")
        select = [python, "-m", "pipelines.select", "--input", path, "--column", "item",
                  "--candidate-range", f"0:{CANDIDATES}", "--epsilon", "1", "--output", out]  # fmt: skip
        jobs = [("(c) pyarrow+numpy count, not private", None,
                 [python, "-m", "benchmarks.bench_select", "--numpy-count", path])]  # fmt: skip
        for runner in runners:
            jobs.append(("(a) pipelines.select, row-level", runner, select))
            jobs.append(("(b) pipelines.select, 5 rows per user", runner,
                         [*select, "--privacy-unit", "user_id", "--max-rows-per-unit", "5"]))  # fmt: skip
        if have_pipelinedp and rows <= 10_000_000:
            jobs.append(("(d) PipelineDP count, 5 rows per user", "direct",
                         [python, "-m", "benchmarks.bench_select", "--pipelinedp-count", path]))  # fmt: skip
        baseline = None
        for name, runner, command in jobs:
            if runner is None or name.startswith("(d)"):
                seconds, rss = timed(command, warm=path)
            else:
                with cluster_for(runner) as (flags, pids):
                    seconds, rss = timed([*command, *flags], also=pids, warm=path)
            baseline = baseline or seconds
            measured = MEASURED.get(runner or "direct") if not name.startswith("(d)") else "job+its children"
            print(f"{rows:>12,} {name:<38} {runner or '-':<7} {seconds:>8.2f} {rows / seconds:>12,.0f} {rss:>12.0f} "
                  f"{measured:<22} {seconds / baseline:>6.1f}x", flush=True)  # fmt: skip
    if not have_pipelinedp:
        print("(PipelineDP not installed: `make bench` installs it)")


if __name__ == "__main__":
    main()
