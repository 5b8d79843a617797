"""Audit of the quantile mechanisms: one quantile (exponential mechanism with the bin width as
base measure) and JointExp, by exact pmf over neighbouring histograms, then their samplers; then
the final step of the release ``pipelines.quantiles`` declares from its command line (``Quantiles.final_step(unit,
budget, seed)``, both methods, several quantiles, K > 1 rows per unit, JointExp's regrouped grid): its draws
against the ideal mechanism's pmf, written from the definition, and on neighbouring datasets counted by the
release's own data pass (``Prepared.job``), where a Clopper-Pearson bound on the ratio must stay below epsilon
(and a step that ignores the bound of K rows must break it).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from privacy_loss import DRAWS, PrivacyLoss, histogram_neighbours, log_ratio_lower_bound, record_sampler
from references import definition_pmf, reference_pmf
from release_passes import run_pass

from beam_expmech.accounting import Release
from beam_expmech.mechanisms.joint_quantiles import joint_probabilities, joint_problem, sample_bins
from beam_expmech.mechanisms.quantile import private_quantile, quantile_probabilities
from beam_expmech.mechanisms.randomness import random_source
from beam_expmech.releases.declaration import EACH_ROW
from beam_expmech.transforms import GatherCounts
from pipelines import quantiles


@pytest.mark.parametrize("q,max_rows", [(0.5, 1), (0.2, 1), (0.9, 2)])
def test_quantile_pmf(audit, q, max_rows):
    epsilon, edges = 1.0, np.array([0.0, 0.5, 2.0, 2.25, 4.0])  # unequal widths: the base measure matters
    loss = PrivacyLoss()
    for histogram in itertools.product(range(3), repeat=4):
        p = quantile_probabilities(np.array(histogram), edges, q, epsilon=epsilon, max_rows=max_rows)
        for other in histogram_neighbours(histogram, max_rows):
            loss.add(p, quantile_probabilities(other, edges, q, epsilon=epsilon, max_rows=max_rows))
    claimed = Release.exponential_mechanism(epsilon, "quantile")
    loss.report(audit, "quantile (base measure)", epsilon=claimed.epsilon, bounded_range=True, rho=claimed.rho)
    assert loss.epsilon > 0.3 * epsilon


def test_quantile_sampler(audit):
    histogram, edges = np.array([2, 6, 1, 0, 3]), np.array([0.0, 1.0, 1.5, 3.0, 3.0, 5.0])
    pmf = quantile_probabilities(histogram, edges, 0.5, epsilon=1.0)
    rng = np.random.default_rng(31)
    points = [private_quantile(histogram, edges, 0.5, epsilon=1.0, rng=rng) for _ in range(12_000)]
    bins = np.searchsorted(edges, points, side="right") - 1
    record_sampler(audit, "quantile (base measure)", bins.tolist(), dict(enumerate(pmf)))


@pytest.mark.parametrize("max_rows", [1, 2])
def test_joint_exp_pmf(audit, max_rows):
    epsilon, edges, qs = 1.0, np.linspace(0, 3, 4), [0.3, 0.6]
    loss = PrivacyLoss()
    for histogram in itertools.product(range(3), repeat=3):
        p = joint_probabilities(np.array(histogram), edges, qs, epsilon=epsilon, max_rows=max_rows)
        for other in histogram_neighbours(histogram, max_rows):
            loss.add(p, joint_probabilities(other, edges, qs, epsilon=epsilon, max_rows=max_rows))
    claimed = Release.exponential_mechanism(epsilon, "JointExp")  # what pipelines.quantiles charges
    loss.report(audit, "JointExp (2 quantiles)", epsilon=claimed.epsilon, bounded_range=True, rho=claimed.rho)
    assert loss.epsilon > 0.3 * epsilon


@pytest.mark.parametrize(
    "histogram,qs",
    [
        ([3, 1, 4, 0, 2], [0.25, 0.5, 0.75]),
        ([0, 30, 0], [0.25, 0.5, 0.75]),  # runs in one bin
        ([10**10, 3, 0, 10**10 - 5, 0], [0.25, 0.5, 0.75]),  # single rows decide among 2 * 10^10
    ],
)
def test_joint_exp_sampler(audit, histogram, qs):
    edges = np.linspace(0, len(histogram), len(histogram) + 1)
    problem = joint_problem(np.array(histogram), edges, qs, epsilon=2.0, max_rows=1)
    source = random_source(51)
    draws = [tuple(sample_bins(problem, len(qs), source)) for _ in range(6000)]
    record_sampler(audit, "JointExp", draws, joint_probabilities(np.array(histogram), edges, qs, epsilon=2.0))


# --- the final step of the release pipelines.quantiles declares from its command line --------------


def declared(tmp_path, name: str, flags: list[str]):
    """(args, the release) of a real ``pipelines.quantiles`` command line over NAME.parquet, as ``main`` declares
    it (a row of it is written if the file is not there: the release checks its input when declared)."""
    path = tmp_path / f"{name}.parquet"
    if not path.exists():
        pq.write_table(pa.table({"user": [0], "x": [0.0]}), path)
    args, _ = quantiles.parse_args(["--input", str(path), "--column", "x", *flags,
                                    "--output", str(tmp_path / f"{name}.json")])  # fmt: skip
    return args, quantiles.declared(args)


def command_line(tmp_path, flags: list[str]):
    """(args, the release, the grid its data pass counts on) of a real ``pipelines.quantiles`` command line."""
    args, release = declared(tmp_path, "x", flags)
    return args, release, release.prepared.job.family


def released_bins(release, histogram, seeds, edges, *, unit=None) -> list[tuple]:
    """The bins (of ``edges``) of the values the release's final step releases, in quantile order, one run per seed
    (``unit``: in place of the declared one, a planted bug)."""
    final = release.query.final_step(unit or release.unit, release.budget)  # built (and rehearsed) once; reseeded
    draws = []
    for seed in seeds:
        final.seed = seed
        values = final.release(histogram)
        values = [values[f"{q:g}"] for q in sorted(release.query.quantiles)]
        draws.append(tuple(int(b) for b in np.searchsorted(edges, values, side="right") - 1))
    return draws


def ideal_pmf(args, family, histogram) -> tuple[dict, np.ndarray]:
    """(P(bins of the sorted release), the grid it is on) for the ideal mechanism, from the definitions.

    independent: each quantile by the exponential mechanism with epsilon / m on the full grid, then
    sorted; joint: JointExp with epsilon on the grid regrouped into at most 1,024 bins of equal width.
    """
    qs, k = sorted(quantiles.parse_quantiles(args.quantiles)), args.max_rows_per_unit or 1
    if args.method == "joint":
        group = max(1, histogram.size // quantiles.JOINT_BINS)  # at most 1,024 bins, or a multiple of it
        coarse, edges = histogram.reshape(-1, group).sum(axis=1), family.edges[::group]
        return definition_pmf(coarse.tolist(), edges, qs, args.epsilon, k), edges
    each = [reference_pmf(histogram.tolist(), family.edges, q, args.epsilon / len(qs), k) for q in qs]
    pmf = {}
    for bins in itertools.product(range(histogram.size), repeat=len(qs)):
        key = tuple(sorted(bins))
        pmf[key] = pmf.get(key, 0.0) + math.prod(p[b] for p, b in zip(each, bins, strict=True))
    return pmf, family.edges


@pytest.mark.parametrize(
    "method,grid,histogram",
    [
        ("independent", ["--bins", "6", "--quantiles", "0.9,0.25,0.5"], [4, 0, 7, 2, 5, 3]),
        ("joint", ["--bins", "6", "--quantiles", "0.9,0.25,0.5"], [4, 0, 7, 2, 5, 3]),
        # Regrouped: 2,048 bins into 1,024; a single row moves between fine bins of one coarse bin.
        ("joint", ["--bins", "2048", "--quantiles", "0.3"], {1001: 3, 1002: 2, 1005: 4, 1010: 1, 1013: 2}),
    ],
)
def test_release_step_follows_the_ideal_pmf(audit, tmp_path, method, grid, histogram):
    args, release, family = command_line(tmp_path, ["--lower", "0", "--upper", "12", *grid, "--epsilon", "1.5",
                                                    "--method", method, "--privacy-unit", "user",
                                                    "--max-rows-per-unit", "2"])  # fmt: skip
    if isinstance(histogram, dict):
        counts = np.zeros(args.bins, dtype=np.int64)
        counts[list(histogram)] = list(histogram.values())
        histogram = counts
    histogram = np.asarray(histogram, dtype=np.int64)
    pmf, edges = ideal_pmf(args, family, histogram)
    draws = released_bins(release, histogram, range(3000), edges)
    record_sampler(audit, f"pipelines.quantiles --method {method}", draws, pmf)


def graph_histogram(tmp_path, name: str, users: list[int], values: list[float], flags: list[str]) -> np.ndarray:
    """The summed histogram that the release's own data pass (read, validate, bound, count) computes for this
    data, declared by the command line."""
    pq.write_table(pa.table({"user": users, "x": values}), tmp_path / f"{name}.parquet")
    _, release = declared(tmp_path, name, flags)
    captured = tmp_path / f"{name}.npy"
    run_pass(release, GatherCounts(), lambda counts: np.save(captured, counts))
    return np.load(captured)


def test_the_graph_places_values_on_edges_in_the_bins_their_edges_name(tmp_path):
    """Review 12: only a unit test saw review 11's edge placement. Here the command line's own graph counts rows
    on every edge of a grid whose edges the product (v - lower) * bins / width rounds a bin low, and the floats
    either side: its histogram must be the one the released edges define, [edges[i], edges[i + 1])."""
    lower, upper, bins = 0.1, 0.7, 30
    grid = ["--lower", str(lower), "--upper", str(upper), "--bins", str(bins), "--quantiles", "0.5", "--epsilon", "1"]
    edges = command_line(tmp_path, grid)[2].edges
    values = np.concatenate([edges, np.nextafter(edges, -np.inf), np.nextafter(edges, np.inf)])
    expected = np.bincount(np.clip(np.searchsorted(edges, values, side="right") - 1, 0, bins - 1), minlength=bins)
    naive = np.clip(((values - lower) * (bins / (upper - lower))).astype(np.int64), 0, bins - 1)
    assert not np.array_equal(np.bincount(naive, minlength=bins), expected)  # a grid that tells them apart
    counted = graph_histogram(tmp_path, "edges", list(range(values.size)), values.tolist(), grid)
    assert counted.tolist() == expected.tolist()


NEIGHBOURS = ["--lower", "0", "--upper", "4", "--bins", "4", "--quantiles", "0.75,0.5", "--epsilon", "1",
              "--privacy-unit", "user", "--max-rows-per-unit", "4"]  # fmt: skip


@pytest.fixture(scope="module")
def neighbouring_histograms(tmp_path_factory):
    """D: twelve users, one row each, six in bin 0 and six in bin 1; D': one more user, four rows in bin 3."""
    tmp_path = tmp_path_factory.mktemp("neighbours")
    users, values = list(range(12)), [0.5] * 6 + [1.5] * 6
    d = graph_histogram(tmp_path, "d", users, values, NEIGHBOURS)
    d_prime = graph_histogram(tmp_path, "d_prime", [*users, 12, 12, 12, 12], [*values, 3.5, 3.5, 3.5, 3.5], NEIGHBOURS)
    assert d.tolist() == [6, 6, 0, 0] and d_prime.tolist() == [6, 6, 0, 4]
    return d, d_prime


def outcome_counts(draws: list[tuple], outcomes: list[tuple]) -> np.ndarray:
    return np.array([draws.count(o) for o in outcomes])


@pytest.mark.parametrize("method", ["independent", "joint"])
def test_release_step_on_neighbouring_datasets(audit, tmp_path, neighbouring_histograms, method):
    args, release, family = command_line(tmp_path, [*NEIGHBOURS, "--method", method])
    outcomes = list(itertools.combinations_with_replacement(range(args.bins), 2))

    def frequencies(unit=None):
        return [outcome_counts(released_bins(release, h, range(DRAWS), family.edges, unit=unit), outcomes)
                for h in neighbouring_histograms]  # fmt: skip

    observed, certain = log_ratio_lower_bound(*frequencies())
    subject = f"pipelines.quantiles --method {method} (black box)"
    audit.check(subject, f"observed max |ln P/P'| ({DRAWS:,} runs each)", cases=2 * DRAWS, worst=observed,
                bound=args.epsilon)  # fmt: skip
    audit.check(subject, "its 99.9% Clopper-Pearson lower bound", cases=2 * DRAWS, worst=certain, bound=args.epsilon)
    # A final step that ignored the bound of 4 rows per user would lose 2.2 (independent), 1.8 (joint) here.
    assert log_ratio_lower_bound(*frequencies(EACH_ROW))[1] > args.epsilon
