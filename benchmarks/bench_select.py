"""Whole-process time and peak memory of pipelines.select against a single-process numpy count.

    python -m benchmarks.bench_select [--rows 1000000,10000000] [--workdir DIR] [--no-pipelinedp]

For each size, a Parquet file of (user_id, item in 1,000 candidates Zipf-like, value) is
generated once, then each job runs as its own process (what a user waits for):
  (a) pipelines.select, row-level privacy, DirectRunner
  (b) the same with --privacy-unit user_id --max-rows-per-unit 5
  (c) pyarrow + numpy, one process, non-private: read the column, bincount (the baseline)
  (d) PipelineDP's DP count per item with the same bounding (5 rows per user), on Beam's
      DirectRunner, when pipeline-dp is installed (10^6 rows only: it takes minutes)
The table gives seconds, rows/s, peak RSS and the ratio to (c) of the same size.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

CANDIDATES = 1000


def generate(path: str, rows: int) -> None:
    rng = np.random.default_rng(0)
    schema = pa.schema([("user_id", pa.int64()), ("item", pa.int64()), ("value", pa.float64())])
    with pq.ParquetWriter(path, schema) as out:
        for start in range(0, rows, 1 << 20):
            n = min(1 << 20, rows - start)
            item = (rng.zipf(1.3, n) - 1) % CANDIDATES
            users = rng.integers(0, max(1, rows // 20), n)
            out.write_table(pa.table({"user_id": users, "item": item, "value": rng.normal(size=n)}, schema=schema))


def timed(command: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB) of a child process."""
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    if status != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{child.stderr.read().decode()[-2000:]}")
    return seconds, usage.ru_maxrss / 1024


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
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "beam_expmech_bench"))
    parser.add_argument("--no-pipelinedp", action="store_true")
    parser.add_argument("--numpy-count", help=argparse.SUPPRESS)
    parser.add_argument("--pipelinedp-count", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.numpy_count:
        return numpy_count(args.numpy_count)
    if args.pipelinedp_count:
        return pipelinedp_count(args.pipelinedp_count)

    try:
        import pipeline_dp  # noqa: F401

        have_pipelinedp = not args.no_pipelinedp
    except ImportError:
        have_pipelinedp = False
    os.makedirs(args.workdir, exist_ok=True)
    python = sys.executable
    print(f"{'rows':>12} {'job':<44} {'seconds':>8} {'rows/s':>12} {'peak RSS MB':>12} {'vs (c)':>8}")
    for rows in (int(r) for r in args.rows.split(",")):
        path = os.path.join(args.workdir, f"purchases_{rows}.parquet")
        if not os.path.exists(path):
            generate(path, rows)
        out = os.path.join(args.workdir, "release.json")
        select = [python, "-m", "pipelines.select", "--input", path, "--column", "item",
                  "--candidate-range", f"0:{CANDIDATES}", "--epsilon", "1", "--output", out]  # fmt: skip
        jobs = [
            ("(c) pyarrow+numpy count, not private", [python, "-m", "benchmarks.bench_select", "--numpy-count", path]),
            ("(a) pipelines.select, row-level", select),
            (
                "(b) pipelines.select, 5 rows per user",
                [*select, "--privacy-unit", "user_id", "--max-rows-per-unit", "5"],
            ),
        ]
        if have_pipelinedp and rows <= 1_000_000:
            jobs.append(("(d) PipelineDP count, 5 rows per user", [python, "-m", "benchmarks.bench_select",
                                                                   "--pipelinedp-count", path]))  # fmt: skip
        baseline = None
        for name, command in jobs:
            seconds, rss = timed(command)
            baseline = baseline or seconds
            ratio = seconds / baseline
            print(f"{rows:>12,} {name:<44} {seconds:>8.2f} {rows / seconds:>12,.0f} {rss:>12.0f} {ratio:>7.1f}x")
    if not have_pipelinedp:
        print("(PipelineDP not installed: `make bench` installs it)")


if __name__ == "__main__":
    main()
