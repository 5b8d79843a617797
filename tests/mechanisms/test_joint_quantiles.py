"""JointExp: the pmf from its definition, accuracy, arguments (privacy over neighbouring
histograms and the exact sampler against the pmf: tests/audit)."""

from __future__ import annotations

import numpy as np
import pytest
from references import definition_pmf

from beam_expmech.mechanisms.joint_quantiles import joint_probabilities, joint_problem, joint_quantiles, propose
from beam_expmech.mechanisms.randomness import random_source


def test_pmf_matches_the_definition():
    histogram, edges = [3, 1, 4, 0, 2], [0.0, 1.0, 1.5, 3.0, 3.25, 5.0]
    for qs, epsilon, k in [([0.5], 1.0, 1), ([0.25, 0.75], 2.0, 1), ([0.1, 0.5, 0.9], 1.5, 2)]:
        got = joint_probabilities(histogram, edges, qs, epsilon=epsilon, max_rows=k)
        want = definition_pmf(histogram, edges, qs, epsilon, k)
        assert set(got) == set(want)
        for bins in want:
            assert got[bins] == pytest.approx(want[bins], rel=1e-10)


def test_estimates_are_sorted_inside_the_range_and_accurate():
    rng = np.random.default_rng(52)
    values = rng.lognormal(4, 0.8, 200_000)
    edges = np.linspace(0, 1024, 1025)
    histogram = np.histogram(np.clip(values, 0, 1023.9), bins=edges)[0]
    qs = [i / 10 for i in range(1, 10)]
    estimates = joint_quantiles(histogram, edges, qs, epsilon=1.0, rng=53)
    assert estimates == sorted(estimates) and estimates[0] >= 0 and estimates[-1] <= 1024
    np.testing.assert_allclose(estimates, np.quantile(values, qs), atol=2.5)


def deciles_problem(rows: int, *, heavy: bool = False):
    """Nine deciles on 1,024 bins of a log-normal shape (or all rows in one bin) holding ``rows`` rows."""
    edges = np.linspace(0, 1000, 1025)
    if heavy:
        histogram = np.zeros(1024, dtype=np.int64)
        histogram[300] = rows
    else:
        shape = np.histogram(np.random.default_rng(54).lognormal(4, 0.8, 100_000).clip(0, 999), bins=edges)[0]
        histogram = shape * (rows // 100_000)
    return joint_problem(histogram, edges, [i / 10 for i in range(1, 10)], epsilon=1.0, max_rows=1)


@pytest.mark.parametrize("rows,heavy", [(10**6, False), (10**10, False), (2**59, False), (10**10, True)])
def test_acceptance_does_not_degrade_with_the_number_of_rows(rows, heavy):
    # The acceptance probability is at least exp(-margin * 20 / 19): at 10^10 rows the bound
    # used to be exp(-18), and the running time would reveal n (module docstring).
    proposal = propose(deciles_problem(rows, heavy=heavy), 9, random_source(55))
    assert proposal.margin < 1e-6


def test_the_acceptance_bound_is_the_same_for_every_draw():
    # M must not depend on the proposed sequence, or the output would follow P(b) / M(b).
    problem = joint_problem(np.array([0, 30, 0]), np.arange(4.0), [0.25, 0.5, 0.75], epsilon=2.0, max_rows=1)
    proposals = [propose(problem, 3, random_source(seed)) for seed in range(20)]
    assert len({len(p.steps) for p in proposals}) > 1  # draws with different numbers of runs
    assert len({p.margin for p in proposals}) == 1


def test_bad_arguments():
    edges = np.linspace(0, 3, 4)
    with pytest.raises(ValueError, match="distinct and increasing"):
        joint_quantiles(np.array([1, 2, 3]), edges, [0.5, 0.2], epsilon=1)
    with pytest.raises(ValueError, match="at most 4096 bins"):
        joint_quantiles(np.ones(5000, int), np.linspace(0, 1, 5001), [0.5], epsilon=1)
    with pytest.raises(ValueError, match="epsilon"):
        joint_quantiles(np.array([1, 2, 3]), edges, [0.5], epsilon=0)


def test_a_draw_takes_about_one_proposal_whatever_the_data(monkeypatch):
    """The running time must not reveal the data: on a histogram whose best chain is far from 0 (300
    rows in one bin), the float DP still proposes near the exact law, and almost every proposal is taken."""
    from beam_expmech.mechanisms import joint_quantiles as module

    proposed, real = [], module.propose

    def counted(*args, **kwargs):
        proposed.append(1)
        assert len(proposed) <= 40, "acceptance fell: 40 proposals for 20 draws"
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "propose", counted)
    problem = joint_problem(np.array([300, 1, 4, 0, 2]), np.arange(6.0), [0.25, 0.5, 0.75], epsilon=1.0, max_rows=1)
    for seed in range(20):
        module.sample_bins(problem, 3, random_source(seed))
    assert len(proposed) >= 20
