"""MWEM on a factored model: budget accounting, exact fitting without noise, memory cap, utility on NLTCS."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from public_tables import load, marginals

from beam_expmech.accounting import PrivacyBudget
from beam_expmech.mechanisms.randomness import random_source
from beam_expmech.synth.baselines import independent_marginals
from beam_expmech.synth.mwem import check_parameters, mwem


def workload_error(true, model) -> float:
    return float(np.mean([np.abs(counts / counts.sum() - model.marginal(m)).sum() for m, counts in true.items()]))


def test_every_release_is_charged_and_sums_to_epsilon():
    batch, domain = load("nltcs", 6)
    result = mwem(marginals(batch, domain, 3), domain, epsilon=0.7, rounds=5, rng=81)
    assert len(result.releases) == len(domain) + 2 * 5 and len(result.measured) == 5
    budget = PrivacyBudget(epsilon=0.7)
    for release in result.releases:
        budget.charge(release)
    assert budget.spent() == pytest.approx(0.7)


def test_without_noise_the_measured_marginals_are_fitted():
    batch, domain = load("titanic", 5)  # domains of 3, 3, 2, 91 and 9 codes
    true = marginals(batch, domain, 2)
    result = mwem(true, domain, epsilon=1e9, rounds=4, rng=82)
    for m in result.measured:
        assert np.abs(true[m] / true[m].sum() - result.model.marginal(m)).sum() < 1e-6


def test_components_never_exceed_the_memory_cap_and_the_run_holds_less_than_it_states():
    batch, domain = load("titanic", 6)
    workload = marginals(batch, domain, 2)
    stated = check_parameters(domain, list(workload), rounds=8, max_cells=1000)
    tracemalloc.start()
    try:
        result = mwem(workload, domain, epsilon=1.0, rounds=8, max_cells=1000, rng=83)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert all(table.size <= 1000 for _, table in result.model.components)
    assert peak <= stated


def test_a_marginal_over_the_cap_is_refused_before_any_count_is_read():
    domain = {"a": 101, "b": 100, "c": 100}
    with pytest.raises(ValueError, match="MWEM: a workload marginal has 1,010,000 cells, over the limit of 1,000,000"):
        check_parameters(domain, [("a", "b", "c")])
    with pytest.raises(ValueError, match="rounds"):
        check_parameters(domain, [("a", "b")], rounds=0)


def test_beats_independent_marginals_on_nltcs():
    batch, domain = load("nltcs", 10)
    true = marginals(batch, domain, 3)
    result = mwem(true, domain, epsilon=1.0, rounds=15, rng=84)
    one_way = {m[0]: counts for m, counts in marginals(batch, domain, 1).items()}
    baseline, _ = independent_marginals(one_way, epsilon=1.0, rng=85)
    assert workload_error(true, result.model) < 0.5 * workload_error(true, baseline)


def test_sampled_rows_follow_the_model():
    batch, domain = load("nltcs", 4)
    result = mwem(marginals(batch, domain, 2), domain, epsilon=5.0, rounds=4, rng=86)
    rows = result.model.sample(20_000, random_source(87))
    assert set(rows) == set(domain) and all(len(v) == 20_000 for v in rows.values())
    first = next(iter(domain))
    frequency = np.bincount(rows[first], minlength=2) / 20_000
    np.testing.assert_allclose(frequency, result.model.marginal((first,)), atol=0.02)
    assert 15_000 < result.rows < 30_000  # the noisy size of NLTCS (21,574 rows)
