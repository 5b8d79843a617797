"""Audit of the synthesis mechanisms: the BLR sampler, the discrete Laplace and Gaussian noise that
MWEM and AIM add, and the selection step inside MWEM and AIM on real neighbouring data."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pytest
from privacy_loss import ALPHAS, PrivacyLoss, histogram_neighbours, record_sampler, renyi
from public_tables import load, marginals

from beam_expmech.mechanisms import selection_probabilities
from beam_expmech.mechanisms.discrete_gaussian import discrete_gaussian, rho
from beam_expmech.mechanisms.discrete_laplace import discrete_laplace
from beam_expmech.mechanisms.randomness import random_source
from beam_expmech.synth import aim as aim_module
from beam_expmech.synth import mwem as mwem_module
from beam_expmech.synth.blr import blr_probabilities, blr_synthesize
from beam_expmech.synth.graphical_model import GraphicalModel, Measurement

# --- BLR --------------------------------------------------------------------------------------


def histogram_key(histogram) -> tuple:
    return tuple(c for c, count in enumerate(histogram) for _ in range(count))


@pytest.mark.parametrize("max_rows", [1, 2])
def test_blr_pmf(audit, max_rows):
    loss = PrivacyLoss()
    for data in itertools.product(range(3), repeat=4):
        _, p = blr_probabilities(np.array(data), [2, 2], rows=2, epsilon=1.0, max_rows=max_rows)
        for other in histogram_neighbours(data, max_rows):
            loss.add(p, blr_probabilities(other, [2, 2], rows=2, epsilon=1.0, max_rows=max_rows)[1])
    loss.report(audit, "BLR (pure)", epsilon=1.0)
    assert loss.epsilon > 0.3


def test_blr_sampler(audit):
    data = np.array([4, 1, 0, 3])
    candidates, p = blr_probabilities(data, [2, 2], rows=3, epsilon=2.0)
    rng = np.random.default_rng(61)
    draws = [histogram_key(blr_synthesize(data, [2, 2], rows=3, epsilon=2.0, rng=rng)) for _ in range(6000)]
    record_sampler(audit, "BLR", draws, {histogram_key(h): prob for h, prob in zip(candidates, p, strict=True)})


# --- the noise ------------------------------------------------------------------------------------

SUPPORT = np.arange(-400, 401)


def laplace_log_pmf(scale: Fraction, shift: int) -> np.ndarray:
    log_w = -np.abs(SUPPORT - shift) / float(scale)
    return log_w - np.logaddexp.reduce(log_w)


def gaussian_log_pmf(sigma2: Fraction, shift: int) -> np.ndarray:
    log_w = -((SUPPORT - shift) ** 2) / (2 * float(sigma2))
    return log_w - np.logaddexp.reduce(log_w)


def splits(rows: int):
    """Every way one unit's ``rows`` rows can fall into the cells of a marginal (as cell shifts)."""
    for parts in range(1, rows + 1):
        for cut in itertools.combinations(range(1, rows), parts - 1):
            yield np.diff([0, *cut, rows])


@pytest.mark.parametrize("epsilon,max_rows", [(1.0, 1), (0.3, 3)])
def test_discrete_laplace_on_a_marginal(audit, epsilon, max_rows):
    """Noise of scale K / epsilon on every cell; one unit moves the cells by at most K in L1."""
    scale = Fraction(max_rows) / Fraction(epsilon)
    per_shift = {
        d: float(np.abs(laplace_log_pmf(scale, 0) - laplace_log_pmf(scale, d))[np.abs(SUPPORT) < 300].max())
        for d in range(1, max_rows + 1)
    }
    worst, cases = 0.0, 0
    for shifts in splits(max_rows):  # independent cells: the log ratios add up
        worst, cases = max(worst, sum(per_shift[int(d)] for d in shifts)), cases + 1
    audit.check("discrete Laplace (a marginal)", "epsilon-DP: max |ln p/q| (exact pmf)", cases=cases, worst=worst,
                bound=epsilon)  # fmt: skip


@pytest.mark.parametrize("sigma,max_rows", [(0.8, 1), (3.0, 2), (12.5, 4)])
def test_discrete_gaussian_on_a_marginal(audit, sigma, max_rows):
    """Noise sigma on every cell; rho(sigma, K) is charged. Renyi divergences add over the cells."""
    sigma2 = Fraction(sigma) ** 2
    per_shift = {
        (d, alpha): renyi(gaussian_log_pmf(sigma2, 0), gaussian_log_pmf(sigma2, d), alpha)
        for d in range(1, max_rows + 1)
        for alpha in ALPHAS
    }
    worst, cases = 0.0, 0
    for shifts in splits(max_rows):
        for alpha in ALPHAS:
            worst = max(worst, sum(per_shift[int(d), alpha] for d in shifts) / alpha)
            cases += 1
    audit.check("discrete Gaussian (a marginal)", "zCDP: max_alpha D_alpha / alpha", cases=cases, worst=worst,
                bound=rho(sigma=sigma, sensitivity=max_rows))  # fmt: skip


@pytest.mark.parametrize("scale", [Fraction(3, 2), Fraction(1) / Fraction(0.3), Fraction(1, 4)])
def test_discrete_laplace_sampler(audit, scale):
    source = random_source(72)
    draws = [discrete_laplace(scale, source) for _ in range(20_000)]
    pmf = np.exp(laplace_log_pmf(scale, 0))
    record_sampler(audit, "discrete Laplace", draws, dict(zip(SUPPORT.tolist(), pmf, strict=True)))


@pytest.mark.parametrize("sigma2", [Fraction(1, 5), Fraction(9, 4), Fraction(49)])
def test_discrete_gaussian_sampler(audit, sigma2):
    source = random_source(81)
    draws = [discrete_gaussian(sigma2, source) for _ in range(20_000)]
    pmf = np.exp(gaussian_log_pmf(sigma2, 0))
    record_sampler(audit, "discrete Gaussian", draws, dict(zip(SUPPORT.tolist(), pmf, strict=True)))


# --- the selection step inside AIM and MWEM, on NLTCS and a neighbour ---------------------------


def with_one_more_unit(batch: pa.RecordBatch, domain: dict, rows: int, rng) -> pa.RecordBatch:
    extra = pa.record_batch({c: rng.integers(0, domain[c], rows) for c in domain})
    return pa.Table.from_batches([batch, extra]).combine_chunks().to_batches()[0]


def record_selection(audit, subject, before, after, sensitivity, loss: PrivacyLoss, epsilon: float) -> float:
    """The largest score move against the sensitivity; the selection pmfs go to ``loss``."""
    moved = max(abs(a - b) for a, b in zip(before, after, strict=True))
    audit.check(subject, "score moves by <= sensitivity (real data)", cases=len(before), worst=moved,
                bound=sensitivity)  # fmt: skip
    loss.add(*(selection_probabilities(np.array(s, dtype=object), epsilon=epsilon, sensitivity=sensitivity)
               for s in (before, after)))  # fmt: skip
    return moved


def test_aim_selection_on_neighbouring_data(audit):
    """One unit of K rows added to NLTCS: AIM's scores move by at most their sensitivity, and the
    selection's pmf by at most e^epsilon (checked exactly)."""
    batch, domain = load("nltcs", 5)
    rng = np.random.default_rng(93)
    model = GraphicalModel(domain, [(c,) for c in domain], total=float(batch.num_rows))
    model.fit([Measurement((c,), v.astype(float), 10.0) for (c,), v in marginals(batch, domain, 1).items()])
    workload = marginals(batch, domain, 3)
    weights = aim_module._closure_weights(list(workload), {c: i for i, c in enumerate(domain)})
    candidates, loss, epsilon = list(weights), PrivacyLoss(), 0.5
    for max_rows in (1, 4):
        for _ in range(5):
            neighbour = marginals(with_one_more_unit(batch, domain, max_rows, rng), domain, 3)
            scored = []
            for counts in (workload, neighbour):
                truth = {r: aim_module.marginal_from(counts, r) for r in candidates}
                scored.append(aim_module.scores(candidates, weights, truth, model, sigma=5.0, max_rows=max_rows))
            (before, sensitivity), (after, _) = scored
            record_selection(audit, "AIM selection", before, after, sensitivity, loss, epsilon)
    loss.report(audit, "AIM selection", epsilon=epsilon, bounded_range=True, rho=epsilon**2 / 8)


def test_aim_selection_on_merged_codes_on_neighbouring_data(audit):
    """AIM's rounds after rare codes are merged (the default, ``aim.compress``): on the merged codes of
    Titanic and a neighbour with one unit more, its scores move by at most their sensitivity, and the
    selection's pmf by at most e^epsilon (checked exactly). The map comes from released 1-ways, smoothed over
    neighbouring codes when the columns are ordered (all of them here, in the second run)."""
    batch, domain = load("titanic", 5)
    rng = np.random.default_rng(97)
    workload = marginals(batch, domain, 3)
    weights = aim_module._closure_weights(list(workload), {c: i for i, c in enumerate(domain)})
    candidates, loss, epsilon = list(weights), PrivacyLoss(), 0.5
    for max_rows, ordered in ((1, frozenset()), (4, frozenset(domain))):
        run = aim_module._AimRun(domain, max_rows, random_source(98), dict(weights),
                                 {r: aim_module.marginal_from(workload, r) for r in candidates})  # fmt: skip
        run.measure_one_ways(0.002)
        run.compress(aim_module.RARE, ordered, aim_module.SMOOTHING)
        run.fit_first_model(iterations=100, tolerance=1.0)
        assert run.compression is not None and run.domain != domain  # codes were merged
        for _ in range(5):
            neighbour = marginals(with_one_more_unit(batch, domain, max_rows, rng), domain, 3)
            truth = {r: run.compression.counts(aim_module.marginal_from(neighbour, r), r) for r in candidates}
            before = aim_module.scores(candidates, weights, run.truth, run.model, sigma=5.0, max_rows=max_rows)
            after = aim_module.scores(candidates, weights, truth, run.model, sigma=5.0, max_rows=max_rows)
            record_selection(audit, "AIM selection, merged codes", before[0], after[0], before[1], loss, epsilon)
    loss.report(audit, "AIM selection, merged codes", epsilon=epsilon, bounded_range=True, rho=epsilon**2 / 8)


def test_aim_merged_codes_and_their_spread_are_the_same_on_neighbouring_data(audit):
    """Which codes merge, and how a merged code is spread back over its codes (smoothed, every column ordered,
    as the pipeline orders its numeric grid columns), are post-processing of the released 1-ways: given the
    same released 1-ways, Titanic and a neighbour with one unit more get exactly the same map and shares."""
    batch, domain = load("titanic", 5)
    rng = np.random.default_rng(99)
    workload = marginals(batch, domain, 3)
    candidates = list(aim_module._closure_weights(list(workload), {c: i for i, c in enumerate(domain)}))
    cases, worst = 0, 0.0
    for max_rows, ordered in ((1, frozenset()), (4, frozenset(domain))):
        neighbour = marginals(with_one_more_unit(batch, domain, max_rows, rng), domain, 3)
        runs = [aim_module._AimRun(domain, max_rows, random_source(100), {r: 1 for r in candidates},
                                   {r: aim_module.marginal_from(counts, r) for r in candidates})
                for counts in (workload, neighbour)]  # fmt: skip
        runs[0].measure_one_ways(0.002)
        runs[1].measurements = list(runs[0].measurements)  # the same release
        for run in runs:
            run.compress(aim_module.RARE, ordered, aim_module.SMOOTHING)
        first, second = (run.compression for run in runs)
        assert first is not None and first.merges()
        for c in domain:
            cases += 1
            worst = max(worst, float(np.abs(first.codes[c] - second.codes[c]).max()),
                        float(np.abs(first.within[c] - second.within[c]).max()))  # fmt: skip
    audit.check("AIM merged codes", "map and spread equal on neighbours (same release)", cases=cases, worst=worst,
                bound=0.0)  # fmt: skip


def test_mwem_selection_on_neighbouring_data(audit):
    batch, domain = load("nltcs", 5)
    rng = np.random.default_rng(94)
    workload = marginals(batch, domain, 2)
    model = mwem_module.mwem(workload, domain, epsilon=2.0, rounds=3, rng=95).model  # a model MWEM reached
    candidates, loss, epsilon = list(workload), PrivacyLoss(), 0.5
    for max_rows in (1, 3):
        for _ in range(5):
            neighbour = marginals(with_one_more_unit(batch, domain, max_rows, rng), domain, 2)
            scored = [
                mwem_module.selection_scores(
                    candidates, counts, model, n=int(next(iter(counts.values())).sum()), max_rows=max_rows
                )
                for counts in (workload, neighbour)
            ]
            (before, sensitivity), (after, _) = scored
            record_selection(audit, "MWEM selection", before, after, sensitivity, loss, epsilon)
    loss.report(audit, "MWEM selection", epsilon=epsilon, bounded_range=True, rho=epsilon**2 / 8)
    assert math.isfinite(loss.epsilon)


def spread_epsilon(scores, sensitivity) -> float:
    """An epsilon at which the scores' exponents span about 3 (neither uniform nor a point mass)."""
    return 6.0 * sensitivity / float(max(scores) - min(scores))


def test_aim_selection_sampler(audit):
    """AIM's own selection step (scores, sensitivity, the mechanism it calls) against the exact pmf of the
    exponential mechanism for a score that is not monotone."""
    batch, domain = load("nltcs", 4)
    model = GraphicalModel(domain, [(c,) for c in domain], total=float(batch.num_rows))
    model.fit([Measurement((c,), v.astype(float), 10.0) for (c,), v in marginals(batch, domain, 1).items()])
    workload = marginals(batch, domain, 2)
    weights = aim_module._closure_weights(list(workload), {c: i for i, c in enumerate(domain)})
    candidates = list(weights)
    truth = {r: aim_module.marginal_from(workload, r) for r in candidates}
    values, sensitivity = aim_module.scores(candidates, weights, truth, model, sigma=5.0, max_rows=2)
    epsilon = spread_epsilon(values, sensitivity)
    pmf = selection_probabilities(np.array(values, dtype=object), epsilon=epsilon, sensitivity=sensitivity)
    rng = np.random.default_rng(96)
    draws = [
        candidates.index(aim_module._select(candidates, weights, truth, model, sigma=5.0, epsilon=epsilon,
                                            max_rows=2, rng=rng))
        for _ in range(2000)
    ]  # fmt: skip
    record_sampler(audit, "AIM selection", draws, dict(enumerate(pmf)))


def test_mwem_selection_sampler(audit):
    """MWEM's own selection step against the exact pmf of the exponential mechanism (not monotone)."""
    batch, domain = load("nltcs", 4)
    workload = marginals(batch, domain, 2)
    model = mwem_module.mwem(workload, domain, epsilon=2.0, rounds=2, rng=97).model
    candidates, n = list(workload), batch.num_rows
    values, sensitivity = mwem_module.selection_scores(candidates, workload, model, n=n, max_rows=2)
    epsilon = spread_epsilon(values, sensitivity)
    pmf = selection_probabilities(values, epsilon=epsilon, sensitivity=sensitivity)
    rng = np.random.default_rng(98)
    draws = [
        candidates.index(mwem_module._select(candidates, workload, model, n=n, max_rows=2, epsilon=epsilon, rng=rng))
        for _ in range(2000)
    ]
    record_sampler(audit, "MWEM selection", draws, dict(enumerate(pmf)))
