"""Audit of the declared halfspace (``Halfspace``, as ``pipelines.learn`` declares it from its flags and
``PrivateRelease`` runs it): the pattern counts its own data pass computes, scored and released by its final step.

For an integer grid and for fractional weights (read as written: 0.1 is 1/10), on tiny datasets
counted by the release's own pass (``Prepared.job``: read, validate, bound, count):
1. exact: the pmf of the final step's mechanism over the release's fit counts, for the dataset's
   pattern histogram and every histogram one privacy unit away, stays within the epsilon it charges;
2. the final step (``Halfspace.final_step(unit, budget, seed)``: the transform its graph applies), drawn many
   times seeded, against the ideal mechanism: exp(epsilon * q / K), q the records a candidate fits counted row
   by row in rationals (chi-square);
3. black box: the same draws on two neighbouring datasets, with Clopper-Pearson bounds on the log
   ratio of every output (as ``test_audit_pipeline`` does for select).

The fractional candidates file holds a boundary case: 0.2 + 0.1 + 0.7 = 1, which float64 sums to
1 or just below depending on the order a matrix product adds it. Deciding fits in floats over the
patterns present made one added record move that candidate's score from 0 to 21 (heavy pattern
of 20 records): checks 1 and 3 fail on it.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from audit_log import LONG
from privacy_loss import DRAWS, PrivacyLoss, histogram_neighbours, log_ratio_lower_bound, record_sampler
from release_passes import run_pass
from scipy.special import logsumexp

from beam_expmech import halfspaces
from beam_expmech.mechanisms import selection_probabilities
from beam_expmech.transforms import GatherCounts
from pipelines import learn

SAMPLER_DRAWS = 40_000 if LONG else 6_000
INTEGER = ["--weights", "-1,0,1", "--privacy-unit", "user", "--max-rows-per-unit", "2", "--epsilon", "1"]
FRACTIONAL = ["--weights", "0.1,0.2,0.3,0.7", "--epsilon", "1"]
BOUNDARY_FILE = ["0.1,0.2,0.1,0.7", "0,0,0,0"]  # the first fits (0, 1, 1, 1; 1) exactly: 2/10 + 1/10 + 7/10 = 1
HEAVY = [(0, 1, 1, 1, 1)] * 20
# Rows (x_1 .. x_d, y), one user each. The integer grid's labels follow no halfspace: scores spread out.
INTEGER_ROWS = [
    (*x, int((x[0] + 2 * x[1] + 3 * x[2] + i) % 3 == 0)) for i, x in enumerate(itertools.product((0, 1), repeat=3))
]
INTEGER_ROWS *= 3
FRACTIONAL_ROWS = (
    [(1, 1, 1, 1)] * 6 + [(1, 1, 0, 1)] * 3 + [(0, 1, 1, 1)] * 2 + [(1, 0, 0, 1), (0, 0, 1, 0), (0, 0, 0, 0)]
)
# Over the denominator 10^16 the fits are decided in int64: float64 would round 9999999999999999 to 10^16.
FINE = ["--weights", "0,0.9999999999999999,0.0000000000000001,1", "--epsilon", "1"]
FINE_ROWS = [(1, 0, 1)] * 5 + [(1, 1, 1)] * 2 + [(0, 1, 1), (0, 0, 0)]
CASES = {
    "integer-grid": (INTEGER, INTEGER_ROWS),
    "fractional-grid": (FRACTIONAL, FRACTIONAL_ROWS),
    "int64-weights": (FINE, FINE_ROWS),
    "fractional-file": (["--candidates", "FILE", "--epsilon", "1"], HEAVY),
}


def parse(tmp_path, flags: list[str], num_features: int, data: str = "x.parquet"):
    features = ",".join(f"f{j}" for j in range(num_features))
    if "FILE" in flags:
        (tmp_path / "candidates.txt").write_text("\n".join(BOUNDARY_FILE) + "\n")
        flags = [str(tmp_path / "candidates.txt") if f == "FILE" else f for f in flags]
    return learn.parse_args(["--input", str(tmp_path / data), "--features", features, "--label", "y", *flags,
                             "--output", str(tmp_path / "h.json")])  # fmt: skip


def pipeline_counts(tmp_path, name: str, rows: list[tuple], flags: list[str], users: list[int] | None = None):
    """(args, the release the flags declare, its candidates, the pattern counts its own data pass computes for
    ``rows``); one user a row by default."""
    num_features = len(rows[0]) - 1
    table = {f"f{j}": [int(r[j]) for r in rows] for j in range(num_features)}
    table["y"] = [int(r[-1]) for r in rows]
    table["user"] = list(range(len(rows))) if users is None else users
    pq.write_table(pa.table(table), tmp_path / f"{name}.parquet")
    args, _ = parse(tmp_path, flags, num_features, f"{name}.parquet")
    release = learn.declared(args)
    captured = tmp_path / f"{name}.npy"
    run_pass(release, GatherCounts(), lambda counts: np.save(captured, counts))
    return args, release, release.query.candidate_matrix(), np.load(captured)


def ideal_pmf(weights: list[tuple[Fraction, ...]], rows: list[tuple], epsilon: float, sensitivity: int) -> dict:
    """The exponential mechanism by its definition, monotone: P(pi) proportional to exp(epsilon * q(pi) / K)."""
    fits = [sum(sum(w * x for w, x in zip(pi, row[:-1], strict=True)) >= row[-1] for row in rows) for pi in weights]
    log_weights = epsilon * np.array(fits, dtype=float) / sensitivity
    p = np.exp(log_weights - logsumexp(log_weights))
    return {tuple(float(w) for w in pi): float(q) for pi, q in zip(weights, p, strict=True)}


def exact_candidates(flags: list[str], num_features: int) -> list[tuple[Fraction, ...]]:
    """The candidates the flags describe, in rationals, read independently of the pipeline."""
    if "--weights" in flags:
        values = sorted({Fraction(w) for w in flags[flags.index("--weights") + 1].split(",")})
        return list(itertools.product(values, repeat=num_features))
    return [tuple(Fraction(w) for w in line.split(",")) for line in BOUNDARY_FILE]


def draws(release, counts: np.ndarray, runs: int, *, sensitivity: int | None = None) -> list[tuple]:
    """The released weights of ``runs`` seeded runs of the release's final step on ``counts``."""
    unit, released = release.unit, []
    if sensitivity is not None:  # the bug the audit must catch: the step built as if K were ``sensitivity``
        unit = dataclasses.replace(unit, max_rows=sensitivity)
    for seed in range(runs):
        step = release.query.final_step(unit, release.budget, seed)
        released.append(tuple(step.release(counts)))
    return released


@pytest.mark.parametrize("case", CASES)
def test_learn_pmf_on_neighbouring_histograms(audit, tmp_path, case):
    flags, rows = CASES[case]
    args, release, candidates, counts = pipeline_counts(tmp_path, "d", rows, flags)
    sensitivity = release.query.final_step(release.unit, release.budget).sensitivity  # as the final step declares it

    def pmf(histogram):
        scores = halfspaces.fit_counts(np.asarray(histogram), candidates)
        return selection_probabilities(scores, epsilon=args.epsilon, sensitivity=sensitivity, monotonic=True)

    loss, p = PrivacyLoss(), pmf(counts)
    for other in histogram_neighbours(counts, args.max_rows_per_unit or 1):  # a unit's rows, as the flags bound them
        loss.add(p, pmf(other))
    claimed = release.cost  # what the release charges
    loss.report(audit, f"pipelines.learn ({case})", epsilon=claimed.epsilon, bounded_range=True, rho=claimed.rho)


@pytest.mark.parametrize("case", ["integer-grid", "fractional-grid", "int64-weights"])
def test_learn_final_step_against_the_ideal_mechanism(audit, tmp_path, case):
    flags, rows = CASES[case]
    args, release, _, counts = pipeline_counts(tmp_path, "d", rows, flags)
    # Rows are public here: the ideal mechanism is computed from them, not from the release's counts.
    pmf = ideal_pmf(exact_candidates(flags, len(rows[0]) - 1), rows, args.epsilon, args.max_rows_per_unit or 1)
    record_sampler(audit, f"pipelines.learn ({case})", draws(release, counts, SAMPLER_DRAWS), pmf)


def frequencies(released: list[tuple], outcomes: list[tuple]) -> np.ndarray:
    seen = Counter(released)
    return np.array([seen[o] for o in outcomes])


@pytest.mark.parametrize(
    "case,flags,d,d_prime",
    [
        # Ten one-row users; D' adds a user with three rows that only some candidates fit.
        pytest.param("integer grid, 3 rows per user", ["--weights", "-1,0,1", "--privacy-unit", "user",
                     "--max-rows-per-unit", "3", "--epsilon", "1"],
                     [(1, 0, 1)] * 5 + [(0, 1, 0)] * 5, [(1, 0, 1)] * 5 + [(0, 1, 0)] * 5 + [(0, 1, 1)] * 3,
                     id="integer-grid"),
        # A heavy pattern alone, then one record of another pattern.
        pytest.param("fractional candidates file", ["--candidates", "FILE", "--epsilon", "1"], HEAVY,
                     [*HEAVY, (0, 0, 0, 0, 0)], id="fractional-file"),
    ],
)  # fmt: skip
def test_learn_on_neighbouring_datasets(audit, tmp_path, case, flags, d, d_prime):
    users = [*range(len(d)), *[len(d)] * (len(d_prime) - len(d))]  # one user per row of D; D' adds one user
    runs = {}
    for name, rows in (("d", d), ("d_prime", d_prime)):
        args, release, candidates, counts = pipeline_counts(tmp_path, name, rows, flags, users[: len(rows)])
        runs[name] = (release, counts)
    outcomes = [tuple(candidates.weights(i)) for i in range(len(candidates))]

    def log_ratio(sensitivity=None):
        hits = [frequencies(draws(*runs[name], DRAWS, sensitivity=sensitivity), outcomes) for name in runs]
        return log_ratio_lower_bound(*hits)

    observed, certain = log_ratio()
    subject = f"pipelines.learn ({case}, black box)"
    audit.check(subject, f"observed max |ln P/P'| ({DRAWS:,} runs each)", cases=2 * DRAWS, worst=observed,
                bound=args.epsilon)  # fmt: skip
    audit.check(subject, "its 99.9% Clopper-Pearson lower bound", cases=2 * DRAWS, worst=certain, bound=args.epsilon)
    if args.max_rows_per_unit:  # a final step that ignored the bound of K rows per user would show it
        wrong = log_ratio(sensitivity=1)[1]
        assert wrong > args.epsilon, wrong
