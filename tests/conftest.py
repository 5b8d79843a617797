"""Shared test helpers: goodness of fit of a sampler against its exact pmf (DESIGN.md section 5)."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
from scipy import stats

FALSE_FAILURE_RATE = 1e-6


def assert_follows(samples: list, pmf: dict) -> None:
    """Chi-square test of ``samples`` against ``pmf`` (outcome -> probability), alpha = 1e-6.

    Outcomes the pmf gives probability 0 must never occur; outcomes expected fewer than 5 times
    are pooled so the chi-square approximation holds.
    """
    counts = Counter(samples)
    impossible = [o for o in counts if pmf.get(o, 0.0) == 0.0]
    assert not impossible, f"drew outcomes of probability 0: {impossible}"
    n = len(samples)
    outcomes = sorted(pmf, key=lambda o: pmf[o])
    observed, expected, pool_o, pool_e = [], [], 0, 0.0
    for o in outcomes:
        if pmf[o] * n < 5:
            pool_o += counts.get(o, 0)
            pool_e += pmf[o] * n
        else:
            observed.append(counts.get(o, 0))
            expected.append(pmf[o] * n)
    if pool_e > 0:
        observed.append(pool_o)
        expected.append(pool_e)
    if len(observed) < 2:
        return
    expected = np.array(expected) * (n / sum(expected))
    p_value = stats.chisquare(observed, expected).pvalue
    assert p_value > FALSE_FAILURE_RATE, f"sampler does not follow its pmf: p = {p_value:.3g}"


def neighbours(scores: np.ndarray, sensitivity: float, *, monotone: bool = False):
    """Score vectors one privacy unit away: each score moves by one of -s, -s/2, 0, s/2, s.

    With ``monotone`` all scores move the same way (all up, or all down).
    """
    steps = (0.0, 0.5 * sensitivity, sensitivity)
    if not monotone:
        steps = (-sensitivity, -0.5 * sensitivity, *steps)
    for delta in itertools.product(steps, repeat=len(scores)):
        yield scores + np.array(delta)
        if monotone:
            yield scores - np.array(delta)


@pytest.fixture
def small_score_grid():
    """Every score vector over {0, 1, 3} for 3 candidates, as floats."""
    return [np.array(s, dtype=float) for s in itertools.product((0, 1, 3), repeat=3)]
