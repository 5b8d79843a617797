"""Top keys found in the data: pipelines.select without a candidate list, against the public-candidate path.

    python -m benchmarks.bench_keys [--rows 1000000,10000000] [--distinct-rows 10000000,100000000]
        [--quality-rows 100000] [--runs 20] [--workdir DIR] [--no-pipelinedp]

For each size a Parquet file of (user_id, query = "q<id>", query_id = the same id as an int64) is
generated once: keys Zipf(1.1) over rows / 10 distinct ids (10^6 keys for 10^7 rows), rows / 10
users, each user with 4 favourite keys (Zipf draws) and each of its rows on one of them (users
uniform). Speed: each job runs as its own process, timed whole (wall seconds, and peak RSS taken
through a small launcher process, so it is the job's own: see _LAUNCHER):
  (c) pyarrow + numpy, one process, not private: read query_id, np.bincount (the baseline)
  (a) pipelines.select, public candidates --candidate-range 0:KEYS over query_id, --privacy-unit
      user_id --max-rows-per-unit 5 --top-k 10 --epsilon 1 (DirectRunner)
  (b1) pipelines.select over query, keys found in the data, --mechanism limited-domain,
      --delta 1e-6 --max-keys-per-unit 3 (the other flags as (a))
  (b2) the same with --mechanism keys-then-exponential
  (b3) the same with --mechanism keys-then-laplace
The table gives seconds, rows/s, peak RSS, and the ratios to (c) and to (a) of the same size.

Every key distinct, at --distinct-rows: query = "k<i>" for row i, 10 rows a user (the column no
public list could hold, and the most keys a shuffle can carry): (c) pyarrow's group-by count of
the query column, not private, against (b3) with the same flags.

Quality, at --quality-rows only (PipelineDP's per-row Python is slow: 10^5 rows by default), from
one file of the same generator read once: --runs runs of each mechanism in one process, timed from
the table in memory. Ours run the pipeline's steps on one worker (BoundContributions' math:
priorities, keep_lowest_keys, then keep_lowest; KeyCounts' group-by; PrivateTopKeys.release),
epsilon 1, delta 1e-6, 5 rows and 3 keys per user. PipelineDP 0.3.1 (DPEngine, LocalBackend,
NaiveBudgetAccountant(1, 1e-6), COUNT, no public partitions: private partition selection) cannot
bound rows per user in all (max_contributions) with private partition selection, so it runs with
max_partitions_contributed=3 and max_contributions_per_partition=5 (up to 15 rows per user) and,
as a second row, 2 (up to 6 rows); its top 10 is its 10 largest noisy counts. The table gives the
mean and min number of the true top 10 (raw row counts, before any bounding) each finds, the mean
number of keys released (ours: len(selected), at most 10; PipelineDP: partitions released), and
seconds per run.
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
import pyarrow.compute as pc
import pyarrow.parquet as pq

from benchmarks.bench_select import read_through

EXPONENT = 1.1
FAVOURITES = 4  # keys per user; each of its rows picks one uniformly
EPSILON, DELTA, MAX_ROWS, MAX_KEYS, TOP_K = 1.0, 1e-6, 5, 3, 10
CHUNK = 1 << 20


def generate(path: str, rows: int, keys: int) -> None:
    """user_id, query ("q<id>") and query_id: ids Zipf(EXPONENT) over 0..keys-1, rows // 10 users."""
    rng = np.random.default_rng(0)
    cdf = np.cumsum(np.arange(1, keys + 1, dtype=np.float64) ** -EXPONENT)
    cdf /= cdf[-1]
    users = max(1, rows // 10)
    favourites = np.minimum(np.searchsorted(cdf, rng.random((users, FAVOURITES))), keys - 1)
    labels = pc.binary_join_element_wise("q", pc.cast(pa.array(np.arange(keys)), pa.string()), "")
    schema = pa.schema([("user_id", pa.int64()), ("query", pa.string()), ("query_id", pa.int64())])
    with pq.ParquetWriter(path, schema) as out:
        for start in range(0, rows, CHUNK):
            n = min(CHUNK, rows - start)
            user = rng.integers(0, users, n)
            ids = favourites[user, rng.integers(0, FAVOURITES, n)]
            table = pa.table({"user_id": user, "query": labels.take(pa.array(ids)), "query_id": ids}, schema=schema)
            out.write_table(table)


def generate_distinct(path: str, rows: int) -> None:
    """user_id = i // 10 and query = "k<i>" for row i: every key distinct."""
    schema = pa.schema([("user_id", pa.int64()), ("query", pa.string())])
    with pq.ParquetWriter(path, schema) as out:
        for start in range(0, rows, CHUNK):
            ids = np.arange(start, min(rows, start + CHUNK), dtype=np.int64)
            queries = pc.binary_join_element_wise("k", pc.cast(pa.array(ids), pa.string()), "")
            out.write_table(pa.table({"user_id": ids // 10, "query": queries}, schema=schema))


def distinct_file(workdir: str, rows: int) -> str:
    path = os.path.join(workdir, f"distinct_{rows}.parquet")
    if not os.path.exists(path):
        generate_distinct(path, rows)
    return path


def group_by_count(path: str) -> None:
    """(c) for distinct keys: every key's rows by pyarrow's group-by, no privacy."""
    counts = pq.read_table(path, columns=["query"]).group_by("query").aggregate([([], "count_all")])
    print(counts.num_rows)


def data_file(workdir: str, rows: int) -> tuple[str, int]:
    keys = max(1, rows // 10)
    path = os.path.join(workdir, f"queries_{rows}.parquet")
    if not os.path.exists(path):
        generate(path, rows, keys)
    return path, keys


# Run by a small interpreter between this process and the job: Linux starts a child's peak RSS at
# the RSS of the process that spawned it, so spawning from this one (which holds the data) would
# floor every job's figure at ours.
_LAUNCHER = """import os, subprocess, sys, time
start = time.perf_counter()
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
_, status, usage = os.wait4(child.pid, 0)
print(time.perf_counter() - start, usage.ru_maxrss / 1024, status)"""


def timed(command: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB) of a child process, measured by a launcher (see _LAUNCHER)."""
    done = subprocess.run([sys.executable, "-c", _LAUNCHER, *command], capture_output=True, text=True, check=True)
    seconds, rss, status = done.stdout.split()
    if int(status) != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    return float(seconds), float(rss)


def numpy_count(path: str) -> None:
    """(c): the machine's practical limit for this count, no privacy."""
    ids = pq.read_table(path, columns=["query_id"]).column("query_id").to_numpy()
    print(np.argsort(np.bincount(ids))[-TOP_K:][::-1].tolist())


def true_top(table: pa.Table) -> set[str]:
    """The TOP_K keys with the most rows, before any bounding."""
    counts = table.group_by("query").aggregate([([], "count_all")])
    return set(counts.sort_by([("count_all", "descending")]).column("query").slice(0, TOP_K).to_pylist())


def ours(table: pa.Table, mechanism: str) -> list[str]:
    """One release of pipelines.select's keys path, on one worker: the same steps as its pipeline."""
    from beam_expmech.transforms import bounding, keys

    batch = table.combine_chunks().to_batches()[0]
    batch = bounding.with_priorities(batch)
    table = pa.Table.from_batches([batch])
    kept = bounding.keep_lowest_keys(table, "user_id", "query", MAX_KEYS, MAX_ROWS, bounding.key_salt())
    kept = bounding.keep_lowest(kept, "user_id", MAX_ROWS)
    kept = kept.drop_columns([bounding.PRIORITY])
    counted = keys.batch_key_counts(kept.combine_chunks().to_batches()[0], "query", "user_id", shards=1)
    shards = [(shard, pa.Table.from_batches([batch])) for shard, batch in counted]
    step = keys.PrivateTopKeys(epsilon=EPSILON, delta=DELTA, k=TOP_K, max_rows=MAX_ROWS, max_keys=MAX_KEYS,
                               mechanism=mechanism)  # fmt: skip
    return step.release(shards)


def pipelinedp(rows: list[tuple[int, str]], per_partition: int) -> tuple[list[str], int]:
    """PipelineDP's private partition selection + COUNT: (its 10 largest noisy counts, partitions released)."""
    import pipeline_dp

    accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=EPSILON, total_delta=DELTA)
    engine = pipeline_dp.DPEngine(accountant, pipeline_dp.LocalBackend())
    params = pipeline_dp.AggregateParams(
        metrics=[pipeline_dp.Metrics.COUNT], max_partitions_contributed=MAX_KEYS,
        max_contributions_per_partition=per_partition,
    )  # fmt: skip
    extractors = pipeline_dp.DataExtractors(
        privacy_id_extractor=lambda row: row[0], partition_extractor=lambda row: row[1], value_extractor=lambda row: 0
    )
    counts = engine.aggregate(rows, params, extractors)  # no public partitions: private partition selection
    accountant.compute_budgets()
    released = sorted(((metrics.count, key) for key, metrics in counts), reverse=True)
    return [key for _, key in released[:TOP_K]], len(released)


def quality(path: str, rows: int, runs: int, with_pipelinedp: bool) -> None:
    table = pq.read_table(path, columns=["user_id", "query"])
    truth = true_top(table)
    contenders = [
        (f"ours, {mechanism}", lambda mechanism=mechanism: (lambda s: (s, len(s)))(ours(table, mechanism)))
        for mechanism in ("limited-domain", "keys-then-exponential", "keys-then-laplace")
    ]
    if with_pipelinedp:
        pairs = list(zip(table.column("user_id").to_pylist(), table.column("query").to_pylist(), strict=True))
        contenders += [
            (f"PipelineDP, 3 partitions x {m} rows", lambda m=m: pipelinedp(pairs, m)) for m in (MAX_ROWS, 2)
        ]
    print(f"\nquality at {rows:,} rows, {runs} runs each (epsilon {EPSILON:g}, delta {DELTA:g}, top {TOP_K})")
    print(f"{'mechanism':<40} {'true top 10 found':>18} {'min':>4} {'keys released':>14} {'s/run':>8}")
    for name, run in contenders:
        found, released, seconds = [], [], []
        for _ in range(runs):
            start = time.perf_counter()
            top, count = run()
            seconds.append(time.perf_counter() - start)
            found.append(len(truth & set(top)))
            released.append(count)
        print(
            f"{name:<40} {np.mean(found):>18.2f} {min(found):>4} {np.mean(released):>14,.1f} {np.mean(seconds):>8.3f}"
        )


KEYS_FOUND = ["--column", "query", "--delta", f"{DELTA:g}", "--max-keys-per-unit", str(MAX_KEYS)]


def select_command(path: str, out: str) -> list[str]:
    """pipelines.select on PATH with a unit of MAX_ROWS rows and the top TOP_K at EPSILON."""
    return [sys.executable, "-m", "pipelines.select", "--input", path, "--privacy-unit", "user_id",
            "--max-rows-per-unit", str(MAX_ROWS), "--top-k", str(TOP_K), "--epsilon", f"{EPSILON:g}",
            "--output", out]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1000000,10000000")
    parser.add_argument("--distinct-rows", default="10000000,100000000")
    parser.add_argument("--quality-rows", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "beam_expmech_bench"))
    parser.add_argument("--no-pipelinedp", action="store_true")
    parser.add_argument("--numpy-count", help=argparse.SUPPRESS)
    parser.add_argument("--group-by-count", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.numpy_count:
        return numpy_count(args.numpy_count)
    if args.group_by_count:
        return group_by_count(args.group_by_count)

    try:
        import pipeline_dp  # noqa: F401

        installed = True
    except ImportError:
        installed = False
    have_pipelinedp = installed and not args.no_pipelinedp
    os.makedirs(args.workdir, exist_ok=True)
    python = sys.executable
    sizes = [int(r) for r in args.rows.split(",") if r]
    if sizes:
        print(f"{'rows':>12} {'job':<46} {'seconds':>8} {'rows/s':>12} {'peak RSS MB':>12} {'vs (c)':>7} {'vs (a)':>7}")
    for rows in sizes:
        path, keys = data_file(args.workdir, rows)
        out = os.path.join(args.workdir, "release.json")
        common = select_command(path, out)
        found = [*common, *KEYS_FOUND]
        jobs = [
            ("(c) pyarrow+numpy count, not private", [python, "-m", "benchmarks.bench_keys", "--numpy-count", path]),
            (
                "(a) select, public candidates 0:keys",
                [*common, "--column", "query_id", "--candidate-range", f"0:{keys}"],
            ),
            ("(b1) select, keys found, limited-domain", [*found, "--mechanism", "limited-domain"]),
            ("(b2) select, keys found, keys-then-exponential", [*found, "--mechanism", "keys-then-exponential"]),
            ("(b3) select, keys found, keys-then-laplace", [*found, "--mechanism", "keys-then-laplace"]),
        ]
        times = {}
        for name, command in jobs:
            read_through(path)  # every job reads the file from the page cache (see bench_select.timed)
            seconds, rss = timed(command)
            times[name[:3]] = seconds
            vs_c = seconds / times["(c)"]
            vs_a = f"{seconds / times['(a)']:>6.2f}x" if "(a)" in times else f"{'':>7}"
            print(f"{rows:>12,} {name:<46} {seconds:>8.2f} {rows / seconds:>12,.0f} {rss:>12.0f} {vs_c:>6.1f}x {vs_a}")
    distinct = [int(r) for r in args.distinct_rows.split(",") if r]
    if distinct:
        print("\nEvery key distinct, 10 rows a user")
        print(f"{'rows':>12} {'job':<46} {'seconds':>8} {'peak RSS MB':>12} {'vs (c)':>7}")
    for rows in distinct:
        path = distinct_file(args.workdir, rows)
        baseline = [python, "-m", "benchmarks.bench_keys", "--group-by-count", path]
        release = [*select_command(path, os.path.join(args.workdir, "release.json")), *KEYS_FOUND]
        first = None
        for name, command in (("(c) pyarrow group-by count, not private", baseline),
                              ("(b3) select, keys found, keys-then-laplace", release)):  # fmt: skip
            read_through(path)  # every job reads the file from the page cache (see bench_select.timed)
            seconds, rss = timed(command)
            first = first or seconds
            print(f"{rows:>12,} {name:<46} {seconds:>8.2f} {rss:>12.0f} {seconds / first:>6.1f}x")
    if args.quality_rows:
        path, _ = data_file(args.workdir, args.quality_rows)
        quality(path, args.quality_rows, args.runs, have_pipelinedp)
    if not installed:
        print("(PipelineDP not installed: `make bench` installs it)")


if __name__ == "__main__":
    main()
