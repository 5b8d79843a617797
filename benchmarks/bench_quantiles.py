"""Private median: pipeline time against numpy's np.quantile, and error against epsilon.

    python -m benchmarks.bench_quantiles [--rows 10000000] [--error-rows 1000000] [--workdir DIR]

1. Time: pipelines.quantiles (median, 2^16 bins) on a Parquet file of `rows` log-normal values,
   as its own process, against one process that reads the column with pyarrow and calls
   np.quantile (not private). Whole-process wall time and peak RSS, and the ratio.
2. Error: on `error-rows` values, 20 private medians at each epsilon (0.1, 1, 10), from the same
   histogram the pipeline builds; error as a share of the public range [lower, upper].
3. Nine deciles together on 2,000 and `error-rows` values: independent (epsilon / 9 each, 2^16
   bins) against JointExp (epsilon in all, 1,024 regrouped bins), mean absolute error, 10 runs.
4. JointExp's time for nine deciles from a 1,024-bin histogram of 10^6 and 10^10 rows (the
   shape of `error-rows` log-normal values, scaled): it must not grow with the rows (< 2 s).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from beam_expmech.mechanisms.joint_quantiles import joint_quantiles
from beam_expmech.mechanisms.quantile import private_quantile
from beam_expmech.predicates import HistogramCounts
from benchmarks.bench_select import timed

LOWER, UPPER, BINS, RUNS = 0.0, 1000.0, 1 << 16, 20


def values(rows: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).lognormal(mean=4.0, sigma=0.8, size=rows)


def numpy_median(path: str) -> None:
    column = pq.read_table(path, columns=["x"]).column("x").to_numpy()
    print(np.quantile(column, 0.5))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--error-rows", type=int, default=1_000_000)
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "beam_expmech_bench"))
    parser.add_argument("--numpy-median", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.numpy_median:
        return numpy_median(args.numpy_median)

    os.makedirs(args.workdir, exist_ok=True)
    path = os.path.join(args.workdir, f"lognormal_{args.rows}.parquet")
    if not os.path.exists(path):
        pq.write_table(pa.table({"x": values(args.rows)}), path, row_group_size=1 << 20)
    python = sys.executable
    numpy_seconds, numpy_rss = timed([python, "-m", "benchmarks.bench_quantiles", "--numpy-median", path], warm=path)
    pipeline = [python, "-m", "pipelines.quantiles", "--input", path, "--column", "x", "--lower", str(LOWER),
                "--upper", str(UPPER), "--quantiles", "0.5", "--epsilon", "1", "--bins", str(BINS),
                "--output", os.path.join(args.workdir, "median.json")]  # fmt: skip
    seconds, rss = timed(pipeline, warm=path)
    print(f"{'rows':>12} {'job':<36} {'seconds':>8} {'peak RSS MB':>12} {'vs numpy':>9}")
    for name, wall, peak in [
        ("numpy np.quantile, not private", numpy_seconds, numpy_rss),
        ("pipelines.quantiles, median", seconds, rss),
    ]:
        print(f"{args.rows:>12,} {name:<36} {wall:>8.2f} {peak:>12.0f} {wall / numpy_seconds:>8.1f}x")

    data = values(args.error_rows, seed=1)
    family = HistogramCounts("x", LOWER, UPPER, BINS)
    histogram = np.bincount(family.candidate_of(pa.record_batch({"x": data})), minlength=BINS)
    truth = np.quantile(data, 0.5)
    rng = np.random.default_rng(2)  # seeded for a repeatable table: these draws are not private
    print(f"\nerror of the private median on {args.error_rows:,} rows, {RUNS} runs each (share of the range)")
    print(f"{'epsilon':>8} {'median error':>13} {'max error':>10} {'runs within 1%':>15}")
    for epsilon in (0.1, 1.0, 10.0):
        errors = np.array(
            [abs(private_quantile(histogram, family.edges, 0.5, epsilon=epsilon, rng=rng) - truth) for _ in range(RUNS)]
        ) / (UPPER - LOWER)
        within = int((errors <= 0.01).sum())
        print(f"{epsilon:>8g} {np.median(errors):>12.5%} {errors.max():>9.5%} {within:>12}/{RUNS}")

    deciles = [i / 10 for i in range(1, 10)]
    print("\nnine deciles together, mean absolute error as a share of the range, 10 runs each")
    print(f"{'rows':>10} {'epsilon':>8} {'independent':>12} {'JointExp':>10}")
    cuts = np.linspace(0, BINS, 1025).astype(int)
    for rows in (2_000, args.error_rows):
        sample = data[:rows]
        counts = np.bincount(family.candidate_of(pa.record_batch({"x": sample})), minlength=BINS)
        coarse, coarse_edges = np.add.reduceat(counts, cuts[:-1]), family.edges[cuts]
        truths = np.quantile(sample, deciles)
        for epsilon in (0.1, 1.0, 10.0):
            independent, joint = [], []
            for _ in range(10):
                each = [private_quantile(counts, family.edges, q, epsilon=epsilon / 9, rng=rng) for q in deciles]
                independent.append(np.abs(np.sort(each) - truths).mean())
                together = joint_quantiles(coarse, coarse_edges, deciles, epsilon=epsilon, rng=rng)
                joint.append(np.abs(np.array(together) - truths).mean())
            width = UPPER - LOWER
            print(f"{rows:>10,} {epsilon:>8g} {np.mean(independent) / width:>11.4%} {np.mean(joint) / width:>9.4%}")

    print("\nJointExp alone: nine deciles from a 1,024-bin histogram, epsilon 1, seconds per draw (5 draws)")
    print(f"{'rows':>16} {'median':>8} {'max':>8}")
    shape = np.add.reduceat(histogram, cuts[:-1])  # the `error-rows` values on the 1,024 regrouped bins
    for rows in (10**6, 10**10):
        scaled = shape * (rows // args.error_rows)
        seconds = []
        for _ in range(5):
            start = time.perf_counter()
            joint_quantiles(scaled, family.edges[cuts], deciles, epsilon=1.0, rng=rng)
            seconds.append(time.perf_counter() - start)
        print(f"{int(scaled.sum()):>16,} {np.median(seconds):>8.2f} {max(seconds):>8.2f}")


if __name__ == "__main__":
    main()
