"""User-level bounding at scale: every pipeline's counting pass with a privacy unit, against a numpy count.

    python -m benchmarks.bench_bounding [--rows 10000000,100000000] [--rows-per-user 5,20] [--repeats 3]
                                        [--dask] [--workdir DIR]

For each size and shape, a Parquet file is generated once: rows / rows-per-user users (user_id, int64,
uniform, so a user's row count is about Poisson), an item in 1,000 candidates (int32, Zipf-like), a
numeric value, and three coded columns with structure (b depends on a, c on b) for synthesize. Issue 36's
hard shape is 5 rows a user, where bounding to 5 keeps most rows; at 20 rows a user it drops three in four.
Each job runs as its own process, with --privacy-unit user_id --max-rows-per-unit 5:
  (c) pyarrow + numpy, non-private: read the item column, bincount (the baseline of issue 15)
  (n) the same bounding in numpy, one process, not private: read user and item, one sort of a word a row
      (user, OS random priority, item), each user's first 5, bincount (``numpy_bounding``): a single-sort
      reference for select's work without a pipeline's shuffle (quantiles and synthesize read other columns)
  select      pipelines.select over the 1,000 items
  quantiles   pipelines.quantiles of the value (3 quantiles)
  synthesize  pipelines.synthesize of (a, b, c) by AIM: the counting pass, then a small model
  ... on Dask (with --dask) select, quantiles and synthesize above on Beam's Dask runner, each on a fresh
              LocalCluster of 2 worker processes (1 thread each, warmed: they have imported the job's pipeline),
              --dask_npartitions 4; its peak RSS is the largest worker's (the job's own process and each
              worker's: the lines after the table)
The jobs of a size run in turn, ``--repeats`` times over (so that each meets the machine in every state):
the table gives the median seconds and peak RSS of each job's runs, the ratio of its median to (c)'s, and
the range of its seconds; then, from the first size to the last, how much time and memory grew (issue
15's floors: within 10x of (c), under 3 GB, growth at most 11x from 10^7 to 10^8 rows).

Why medians: on this machine, most of (c)'s time is the kernel clearing fresh pages for its 1.9 GB
(perf: 65% in clear_page_erms), and how long that takes depends on what ran before: 0.7 s right after
another count, 1.6 to 4 s after the pipelines. One run of (c) is not a baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.bench_select import CANDIDATES, PeakRss, cluster_for, read_through, timed

DOMAIN = {"a": 4, "b": 6, "c": 3}


def generate(path: str, rows: int, rows_per_user: int) -> None:
    rng = np.random.default_rng(0)
    schema = pa.schema(
        [("user_id", pa.int64()), ("item", pa.int32()), ("value", pa.float64())] + [(c, pa.int64()) for c in DOMAIN]
    )
    with pq.ParquetWriter(path, schema) as out:
        for start in range(0, rows, 1 << 20):
            n = min(1 << 20, rows - start)
            a = rng.integers(0, DOMAIN["a"], n)
            b = (a + rng.integers(0, 3, n)) % DOMAIN["b"]
            c = (b // 2 + rng.integers(0, 2, n)) % DOMAIN["c"]
            columns = {
                "user_id": rng.integers(0, max(1, rows // rows_per_user), n),
                "item": (rng.zipf(1.3, n) - 1) % CANDIDATES,
                "value": rng.normal(size=n),
                "a": a,
                "b": b,
                "c": c,
            }
            out.write_table(pa.table(columns, schema=schema))


def numpy_bounding(path: str, max_rows: int = 5) -> None:
    """(n): the same bounding in one process, numpy alone: not private, not a pipeline, a single-sort
    reference for select's work. Each row's word packs its user (less the least), a random priority from
    the OS and its item; one sort of the words groups each user's rows by priority, a user keeps its first
    ``max_rows``, and the kept items are counted. Ties of the truncated priorities go by item (a reference,
    not a mechanism); it needs the bench's own table (users spanning under 2^34, items in the candidates)."""
    table = pq.read_table(path, columns=["user_id", "item"])
    users, items = (table.column(name).to_numpy() for name in ("user_id", "item"))
    del table
    user_bits = max(1, (int(users.max()) - int(users.min())).bit_length())
    item_bits = (CANDIDATES - 1).bit_length()
    priority_bits = min(32, 64 - user_bits - item_bits)
    if priority_bits < 20 or items.min() < 0 or items.max() >= CANDIDATES:
        raise ValueError("numpy_bounding packs the bench's table: users spanning under 2^34, items in range")
    priorities = np.frombuffer(os.urandom(4 * users.size), np.uint32) >> np.uint32(32 - priority_bits)
    words = (users - users.min()).astype(np.uint64) << np.uint64(priority_bits + item_bits)
    words |= priorities.astype(np.uint64) << np.uint64(item_bits)
    words |= items.astype(np.uint64)
    del users, items, priorities
    words.sort()
    user = words >> np.uint64(priority_bits + item_bits)
    kept = np.ones(words.size, bool)  # among its user's first max_rows: the row max_rows before is another user's
    np.not_equal(user[max_rows:], user[:-max_rows], out=kept[max_rows:])
    counts = np.bincount((words[kept] & np.uint64((1 << item_bits) - 1)).astype(np.int64), minlength=CANDIDATES)
    print(int(np.argmax(counts)))


Measured = dict[str, list[tuple[float, float]]]  # a job and shape's (median seconds, median peak RSS MB), a size each


def timed_on_dask(command: list[str], warm: str) -> tuple[float, float, str]:
    """(wall seconds, the largest worker's peak RSS in MB, every process's peak) of ``command`` on a fresh
    2-worker LocalCluster (``cluster_for``), each process sampled every 50 ms."""
    import psutil

    with cluster_for("dask", warm=command[command.index("-m") + 1]) as (flags, pids):
        read_through(warm)
        # the two workers: the largest of the cluster's processes (each has imported Beam and the pipeline)
        workers = sorted(map(psutil.Process, pids), key=lambda p: p.memory_info().rss)[-2:]
        start = time.perf_counter()
        child = subprocess.Popen(
            [*command, *flags, "--dask_npartitions", "4"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        processes = [psutil.Process(child.pid), *workers]
        with PeakRss(lambda: processes) as rss:
            _, errors = child.communicate()
            seconds = time.perf_counter() - start
        if child.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed on Dask:\n{errors.decode()[-2000:]}")
    peaks = [rss.each.get(i, 0) / 2**20 for i in range(len(processes))]  # the job's, then each worker's
    each = ", ".join([f"job {peaks[0]:.0f}", *(f"worker {i} {peak:.0f}" for i, peak in enumerate(peaks[1:]))])
    return seconds, max(peaks[1:]), each


def measure(rows: int, per_user: int, workdir: str, repeats: int, measured: Measured, dask: bool = False) -> None:
    """Runs each job of one size and shape ``repeats`` times in turn, prints a line a job, adds it to ``measured``."""
    python = sys.executable
    domain = os.path.join(workdir, "bounding_domain.json")
    unit = ["--privacy-unit", "user_id", "--max-rows-per-unit", "5", "--epsilon", "1"]
    path = os.path.join(workdir, f"bounding_{rows}_{per_user}.parquet")
    if not os.path.exists(path):
        generate(path, rows, per_user)
    out = os.path.join(workdir, "bounding_release.json")
    jobs = {
        "(c) pyarrow+numpy count, not private": [python, "-m", "benchmarks.bench_select", "--numpy-count", path],
        "(n) numpy bounding, one process": [python, "-m", "benchmarks.bench_bounding", "--numpy-bounding", path],
        "select": [python, "-m", "pipelines.select", "--input", path, "--column", "item",
                   "--candidate-range", f"0:{CANDIDATES}", "--output", out, *unit],
        "quantiles": [python, "-m", "pipelines.quantiles", "--input", path, "--column", "value",
                      "--lower", "-5", "--upper", "5", "--quantiles", "0.25,0.5,0.75", "--output", out, *unit],
        "synthesize (AIM)": [python, "-m", "pipelines.synthesize", "--input", path, "--domain", domain,
                             "--delta", "1e-6", "--rows", "1000",
                             "--output", os.path.join(workdir, "bounding_synthetic.csv"), *unit],
    }  # fmt: skip
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in jobs}
    for _ in range(repeats):
        for name, command in jobs.items():
            runs[name].append(timed(command, warm=path))  # every job reads the file from the page cache
    processes = []
    for _ in range(repeats if dask else 0):
        for name in ("select", "quantiles", "synthesize (AIM)"):
            # In a process of its own: a Dask cluster's threads outlive it in the process that ran it, and slowed
            # every job after it by 20 to 30% (select at 10^8 rows, 5 a user: 37 s against 26).
            measured_by = [python, "-m", "benchmarks.bench_bounding", "--dask-job", json.dumps([jobs[name], path])]
            seconds, rss, each = json.loads(subprocess.run(measured_by, capture_output=True, check=True).stdout)
            runs.setdefault(f"{name} on Dask, 2 workers", []).append((seconds, rss))
            processes.append(f"{name}: {each}")
    baseline = float(np.median([t for t, _ in runs[next(iter(jobs))]]))
    for name, times in runs.items():
        seconds, rss = (float(v) for v in np.median(times, axis=0))
        measured.setdefault(f"{name}, {per_user} rows a user", []).append((seconds, rss))
        spread = f"{min(t for t, _ in times):.2f} - {max(t for t, _ in times):.2f}"
        ratio = seconds / baseline
        print(f"{rows:>12,} {per_user:>6} {name:<36} {seconds:>8.2f} {rss:>12.0f} {ratio:>7.1f}x  {spread}", flush=True)
    for each in processes:
        print(f"{'':>19} on Dask, peak RSS MB, {each}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="10000000,100000000")
    parser.add_argument("--rows-per-user", default="5,20", help="the shapes: rows a user on average")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dask", action="store_true", help="the three jobs on Beam's Dask runner too (2 workers)")
    parser.add_argument("--dask-job", help=argparse.SUPPRESS)  # [command, file]: timed_on_dask, in this process
    parser.add_argument("--numpy-bounding", help=argparse.SUPPRESS)  # a file: (n), in this process
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "beam_expmech_bench"))
    args = parser.parse_args()
    if args.numpy_bounding:
        return numpy_bounding(args.numpy_bounding)
    if args.dask_job:
        command, path = json.loads(args.dask_job)
        print(json.dumps(timed_on_dask(command, warm=path)))
        return
    os.makedirs(args.workdir, exist_ok=True)
    with open(os.path.join(args.workdir, "bounding_domain.json"), "w") as handle:
        json.dump(DOMAIN, handle)
    print(f"{'rows':>12} {'a user':>6} {'job':<36} {'seconds':>8} {'peak RSS MB':>12} {'vs (c)':>8}  {'runs (s)':<20}")
    measured: Measured = {}
    shapes = [int(r) for r in args.rows_per_user.split(",")]
    for rows in (int(r) for r in args.rows.split(",")):
        for per_user in shapes:
            measure(rows, per_user, args.workdir, args.repeats, measured, args.dask)
    if all(len(m) > 1 for m in measured.values()):
        print(f"\ngrowth from the first size to the last{'':<14} {'time':>8} {'memory':>12}")
        for name, sizes in measured.items():
            (t0, m0), (t1, m1) = sizes[0], sizes[-1]
            print(f"{name:<52} {t1 / t0:>7.1f}x {m1 / m0:>11.1f}x")


if __name__ == "__main__":
    main()
