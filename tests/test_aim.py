"""AIM: the budget it spends, the sensitivity of its selection score, utility on NLTCS, bad arguments."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pytest
from scipy.special import logsumexp
from shared_tables import load, marginals

from beam_expmech.accounting import PrivacyBudget, epsilon_to_zcdp
from beam_expmech.synth import aim as aim_module
from beam_expmech.synth.aim import aim
from beam_expmech.synth.baselines import independent_marginals
from beam_expmech.synth.graphical_model import GraphicalModel, Measurement


def workload_error(true, model: GraphicalModel) -> float:
    return float(np.mean([np.abs(c / c.sum() - model.project(m) / model.total).sum() for m, c in true.items()]))


@pytest.mark.parametrize("max_rows", [1, 3])
def test_spends_all_of_rho_and_never_more(max_rows):
    batch, domain = load("nltcs", 6)
    result = aim(marginals(batch, domain, 3), domain, rho=0.05, max_rows=max_rows, rng=91)
    spent = math.fsum(r.rho for r in result.releases)
    assert 0.999 * 0.05 <= spent <= 0.05
    assert all(r.epsilon is None or r.label.startswith("AIM select") for r in result.releases)
    assert result.measured[: len(domain)] == [(c,) for c in domain]  # the 1-way marginals first
    assert all(len(m) <= 3 for m in result.measured)
    budget = PrivacyBudget(epsilon=1.0, delta=1e-9)  # what the pipeline charges: rho of (1, 1e-9)
    rho = epsilon_to_zcdp(1.0, delta=1e-9)
    for release in aim(marginals(batch, domain, 2), domain, rho=rho, rng=92).releases:
        budget.charge(release)
    assert budget.spent() <= 1.0


def log_pmf(scores: list[int], *, epsilon: float, sensitivity: int) -> np.ndarray:
    """The exponential mechanism's log-probabilities, in log space (tiny probabilities stay finite)."""
    logits = np.array([epsilon * float(Fraction(s, 2 * sensitivity)) for s in scores])
    return logits - logsumexp(logits)


def test_selection_score_moves_by_at_most_its_sensitivity():
    """Add one unit of K rows to the data: no score moves by more than the stated sensitivity, so
    the selection's pmf changes by at most a factor exp(epsilon) (checked exactly)."""
    batch, domain = load("nltcs", 5)
    rng = np.random.default_rng(93)
    model = GraphicalModel(domain, [(c,) for c in domain], total=float(batch.num_rows))
    model.fit([Measurement((c,), v.astype(float), 10.0) for (c,), v in marginals(batch, domain, 1).items()])
    workload = marginals(batch, domain, 3)
    weights = aim_module._closure_weights(list(workload), {c: i for i, c in enumerate(domain)})
    candidates = list(weights)
    for max_rows in (1, 4):
        for _ in range(5):
            extra = pa.record_batch({c: rng.integers(0, domain[c], max_rows) for c in domain})
            neighbour = marginals(pa.Table.from_batches([batch, extra]).combine_chunks().to_batches()[0], domain, 3)
            scored = []
            for counts in (workload, neighbour):
                truth = {r: aim_module._marginal_from(counts, r) for r in candidates}
                scored.append(aim_module.scores(candidates, weights, truth, model, sigma=5.0, max_rows=max_rows))
            (before, sensitivity), (after, _) = scored
            assert max(abs(a - b) for a, b in zip(before, after, strict=True)) <= sensitivity
            p, q = (log_pmf(s, epsilon=0.5, sensitivity=sensitivity) for s in (before, after))
            assert np.max(np.abs(p - q)) <= 0.5 + 1e-9


def test_beats_independent_marginals_and_stays_close_to_the_data():
    batch, domain = load("nltcs", 10)
    true = marginals(batch, domain, 3)
    rho = epsilon_to_zcdp(1.0, delta=1e-9)
    result = aim(true, domain, rho=rho, rng=94)
    one_way = {m[0]: counts for m, counts in marginals(batch, domain, 1).items()}
    baseline, _ = independent_marginals(one_way, epsilon=1.0, rng=95)
    baseline_error = float(np.mean([np.abs(c / c.sum() - baseline.marginal(m)).sum() for m, c in true.items()]))
    assert workload_error(true, result.model) < 0.1 * baseline_error
    assert abs(result.rows - batch.num_rows) < 0.02 * batch.num_rows


def test_the_model_never_outgrows_its_cap():
    batch, domain = load("titanic", 6)  # Age has 91 codes
    result = aim(marginals(batch, domain, 3), domain, rho=1.0, max_cells=2000, rng=96)
    assert sum(np.prod(p.shape) for p in result.model.potentials) <= 2000


@pytest.mark.parametrize(
    "change,message",
    [({"rho": 0}, "rho"), ({"rho": float("nan")}, "rho"), ({"max_rows": 0}, "max_rows"), ({"rounds": -1}, "rounds")],
)
def test_bad_arguments(change, message):
    batch, domain = load("nltcs", 3)
    with pytest.raises(ValueError, match=message):
        aim(marginals(batch, domain, 2), domain, **{"rho": 0.1, **change})
    with pytest.raises(ValueError, match="no marginal"):
        aim({}, domain, rho=0.1)
    with pytest.raises(ValueError, match="does not match"):
        aim({("bathing",): np.zeros(3, int)}, domain, rho=0.1)
