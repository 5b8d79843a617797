"""Synthetic data: workload error and time of our generators beside reference ones, in one run.

    python -m benchmarks.bench_synth [--datasets nltcs,titanic,payroll] [--epsilons 1.0,0.3] [--seeds 3]
        [--no-reference] [--reference-aim-rounds nltcs=48]

On the public tables of tests/data (nltcs, titanic; their source in tests/data/README.md) and a
generated payroll table (135,727 rows, 6 dependent columns of 3 to 33 codes: ``payroll()``), for
each epsilon and seed: the average and max L1 error over all 3-way marginals (each normalised to a
probability vector, as pipelines.evaluate_synthetic) and the seconds of
  aim          beam_expmech.synth.aim, rho-zCDP at the rho of (epsilon, delta = 1e-9)
  mwem         beam_expmech.synth.mwem, 20 rounds, pure epsilon-DP
  ref MST      OpenDP 0.16 ``opendp.extras.mbi.MST`` (Private-PGM estimation), same rho
  ref AIM      OpenDP 0.16 ``opendp.extras.mbi.AIM``, same rho; its rounds parameter T
               (default 16 d) may be lowered per dataset, and the table says so
  independent  noisy 1-way marginals (discrete Laplace, epsilon / d each), pure epsilon-DP
  1,000 rows   1,000 real rows sampled (not private: for scale)
The generators' errors are those of their models' marginals (what sampled rows converge to).
The marginals are counted with numpy here (the Beam pass is the same counts); seeds make our
draws repeatable and NOT private. The references need ``pip install 'opendp[mbi]'``.
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

from beam_expmech.accounting import epsilon_to_zcdp
from beam_expmech.predicates import MarginalWorkload
from beam_expmech.synth.aim import aim
from beam_expmech.synth.baselines import independent_marginals
from beam_expmech.synth.mwem import mwem

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
DELTA = 1e-9


def payroll(rows: int = 135_727, seed: int = 0) -> tuple[pa.RecordBatch, dict[str, int]]:
    """A generated stand-in for a city payroll: the pay system decides the pay rate, the rate the
    salary's level and the overtime, the salary the regular earnings; other earnings are mostly zero.
    Dependent columns, so that which marginals a generator measures matters."""
    rng = np.random.default_rng(seed)
    system = rng.choice(3, rows, p=[0.6, 0.3, 0.1])
    hourly = rng.random(rows) < np.array([0.2, 0.7, 0.4])[system]
    rate = np.where(hourly, 1, np.where(rng.random(rows) < 0.1, 2, 0))
    level = np.clip(rng.normal(np.array([16.0, 9.0, 12.0])[rate], 4.0), 0, 32).astype(int)
    regular = np.clip(level - rng.geometric(0.5, rows) + 1, 0, 32)
    overtime = np.where(hourly, np.clip(rng.poisson(level / 4), 0, 32), np.minimum(rng.poisson(0.3, rows), 32))
    other = np.where(rng.random(rows) < 0.15, rng.integers(1, 33, rows), 0)
    columns = {
        "annual-salary": (level, 33),
        "pay-rate": (rate, 3),
        "system": (system, 3),
        "regular-earnings": (regular, 33),
        "overtime-earning": (overtime, 33),
        "other-earnings": (other, 33),
    }
    return pa.record_batch({c: v for c, (v, _) in columns.items()}), {c: size for c, (_, size) in columns.items()}


def load(name: str) -> tuple[pa.RecordBatch, dict[str, int]]:
    if name == "payroll":
        return payroll()
    domain = json.loads((DATA / name / "domain.json").read_text())
    with open(DATA / name / f"{name}.csv") as handle:
        reader = csv.reader(handle)
        header = next(reader)
        rows = np.array([[int(v) for v in row] for row in reader])
    return pa.record_batch({c: rows[:, header.index(c)] for c in domain}), domain


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


def reference(batch: pa.RecordBatch, domain: dict[str, int], rho: float, method: str, rounds: int | None):
    """OpenDP's MST or AIM at ``rho``-zCDP, one row per person: a function giving its model's marginals."""
    import opendp.extras.mbi._mst as opendp_mst
    import opendp.prelude as dp
    import polars as pl

    dp.enable_features("contrib")
    # OpenDP 0.16's MST splits its selection budget d - 1 ways and then overspends it by an
    # ulp ("insufficient budget for query"); shaving three ulps off each share avoids that.
    if not getattr(opendp_mst, "_shaved", False):
        prior = opendp_mst.prior
        opendp_mst.prior = lambda x: prior(prior(prior(x)))
        opendp_mst._shaved = True
    frame = pl.LazyFrame({c: batch.column(c).to_numpy() for c in domain})
    context = dp.Context.compositor(
        data=frame, privacy_unit=dp.unit_of(contributions=1), privacy_loss=dp.loss_of(rho=rho), split_evenly_over=1
    )
    algorithm = dp.mbi.MST() if method == "mst" else dp.mbi.AIM(rounds=rounds)
    keys = {c: list(range(size)) for c, size in domain.items()}
    table = context.query().contingency_table(keys=keys, algorithm=algorithm).release()

    def marginal(columns):
        values = np.asarray(table.project(list(columns)), dtype=float)
        values = values[tuple(slice(0, -1) for _ in columns)]  # OpenDP adds a null key last to every column
        return values / values.sum()

    return marginal


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="nltcs,titanic,payroll")
    parser.add_argument("--epsilons", default="1.0,0.3")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--no-reference", action="store_true", help="skip OpenDP's MST and AIM")
    parser.add_argument("--reference-aim-rounds", default="", help="e.g. nltcs=48: OpenDP AIM's T for a dataset")
    args = parser.parse_args()
    ref_rounds = {k: int(v) for k, v in (item.split("=") for item in args.reference_aim_rounds.split(",") if item)}
    print(f"{'dataset':<8} {'epsilon':>7} {'method':<16} {'avg L1':>8} {'max L1':>8} {'seconds':>8}", flush=True)
    for name in args.datasets.split(","):
        batch, domain = load(name)
        true = counts(batch, domain, 3)
        one_way = {m[0]: c for m, c in counts(batch, domain, 1).items()}
        for epsilon in (float(e) for e in args.epsilons.split(",")):
            rho = epsilon_to_zcdp(epsilon, delta=DELTA)
            rows: dict[str, list] = {}
            for seed in range(args.seeds):
                for method, fit in generators(
                    batch, domain, true, one_way, epsilon, rho, seed, args, ref_rounds.get(name)
                ):
                    start = time.perf_counter()
                    marginal_of = fit()
                    rows.setdefault(method, []).append((*errors(true, marginal_of), time.perf_counter() - start))
            for method, runs in rows.items():
                avg, worst, seconds = np.mean(runs, axis=0)
                print(f"{name:<8} {epsilon:>7g} {method:<16} {avg:>8.4f} {worst:>8.4f} {seconds:>8.1f}", flush=True)


def generators(batch, domain, true, one_way, epsilon, rho, seed, args, ref_aim_rounds):
    """(method, fit) pairs: each fit runs one generator and returns its marginals' function."""
    yield "aim", lambda: _model_marginals(aim(true, domain, rho=rho, rng=seed).model)
    yield "mwem", lambda: mwem(true, domain, epsilon=epsilon, rounds=20, rng=seed).model.marginal
    if not args.no_reference:
        yield "ref MST", lambda: reference(batch, domain, rho, "mst", None)
        label = "ref AIM" if ref_aim_rounds is None else f"ref AIM T={ref_aim_rounds}"
        yield label, lambda: reference(batch, domain, rho, "aim", ref_aim_rounds)
    yield "independent", lambda: independent_marginals(one_way, epsilon=epsilon, rng=seed)[0].marginal
    yield "1,000 rows", lambda: sampled_rows(batch, domain, seed)


def _model_marginals(model):
    return lambda m: model.project(m) / model.total


if __name__ == "__main__":
    main()
