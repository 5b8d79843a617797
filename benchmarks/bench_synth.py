"""Synthetic data: workload error and time of our generators beside the baselines, in one run.

    python -m benchmarks.bench_synth [--datasets nltcs,titanic,salary] [--epsilons 1.0,0.3] [--seeds 3]

On ../shared/data (salary: its first 6 columns), for each epsilon and seed: the average and
max L1 error over all 3-way marginals (normalised, as ../shared/tools/eval_workload.py) of
  mwem         beam_expmech.synth.mwem, 20 rounds, pure epsilon-DP
  independent  noisy 1-way marginals (discrete Laplace, epsilon / d each), pure epsilon-DP
  1,000 rows   1,000 real rows sampled (not private: for scale)
The marginals are counted with numpy here (the Beam pass is the same counts); seeds make the
table repeatable and the draws NOT private.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from beam_expmech.predicates import MarginalWorkload
from beam_expmech.synth.baselines import independent_marginals
from beam_expmech.synth.mwem import FactoredModel, mwem

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def load(name: str) -> tuple[pa.RecordBatch, dict[str, int]]:
    domain = json.loads((DATA / name / "domain.json").read_text())
    with open(DATA / name / f"{name}.csv") as handle:
        reader = csv.reader(handle)
        header = next(reader)
        rows = np.array([[int(v) for v in row] for row in reader])
    columns = list(domain)[:6] if name == "salary" else list(domain)
    return pa.record_batch({c: rows[:, header.index(c)] for c in columns}), {c: domain[c] for c in columns}


def counts(batch: pa.RecordBatch, domain: dict[str, int], degree: int) -> dict:
    workload = MarginalWorkload(list(itertools.combinations(domain, degree)), domain)
    return workload.split(workload.count(batch))


def errors(true: dict, marginal_of) -> tuple[float, float]:
    values = [float(np.abs(c / c.sum() - marginal_of(m)).sum()) for m, c in true.items()]
    return float(np.mean(values)), float(np.max(values))


def sampled_rows(batch: pa.RecordBatch, domain: dict[str, int], seed: int):
    """The marginals of 1,000 real rows drawn without replacement."""
    rows = batch.take(pa.array(np.random.default_rng(seed).choice(batch.num_rows, 1000, replace=False)))
    sample = counts(rows, domain, 3)
    return lambda m: sample[m] / sample[m].sum()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="nltcs,titanic,salary")
    parser.add_argument("--epsilons", default="1.0,0.3")
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    print(f"{'dataset':<8} {'epsilon':>7} {'method':<12} {'avg L1':>8} {'max L1':>8} {'seconds':>8}")
    for name in args.datasets.split(","):
        batch, domain = load(name)
        true = counts(batch, domain, 3)
        one_way = {m[0]: c for m, c in counts(batch, domain, 1).items()}
        for epsilon in (float(e) for e in args.epsilons.split(",")):
            rows = {"mwem": [], "independent": [], "1,000 rows": []}
            for seed in range(args.seeds):
                start = time.perf_counter()
                result = mwem(true, domain, epsilon=epsilon, rounds=20, rng=seed)
                rows["mwem"].append((*errors(true, result.model.marginal), time.perf_counter() - start))
                start = time.perf_counter()
                model: FactoredModel = independent_marginals(one_way, epsilon=epsilon, rng=seed)[0]
                rows["independent"].append((*errors(true, model.marginal), time.perf_counter() - start))
                rows["1,000 rows"].append((*errors(true, sampled_rows(batch, domain, seed)), 0.0))
            for method, runs in rows.items():
                avg, worst, seconds = np.mean(runs, axis=0)
                print(f"{name:<8} {epsilon:>7g} {method:<12} {avg:>8.4f} {worst:>8.4f} {seconds:>8.1f}")


if __name__ == "__main__":
    main()
