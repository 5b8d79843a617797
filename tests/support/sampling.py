"""Goodness of fit of a sampler against its exact pmf, and top-k's pmf by peeling (docs/DESIGN.md section 5)."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
from scipy import stats

FALSE_FAILURE_RATE = 1e-6


def assert_follows(samples: list, pmf: dict) -> float:
    """Chi-square test of ``samples`` against ``pmf`` (outcome -> probability), alpha = 1e-6; the p-value.

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
        return 1.0
    expected = np.array(expected) * (n / sum(expected))
    p_value = stats.chisquare(observed, expected).pvalue
    assert p_value > FALSE_FAILURE_RATE, f"sampler does not follow its pmf: p = {p_value:.3g}"
    return p_value


def peeling_pmf(scores, k, epsilon, sensitivity, monotonic=False):
    """P(ordered k-tuple) for k rounds of the exponential mechanism with epsilon / k each (the definition)."""
    c = 1 if monotonic else 2
    pmf = {}
    for seq in itertools.permutations(range(len(scores)), k):
        p, remaining = 1.0, set(range(len(scores)))
        for r in seq:
            weights = {j: math.exp(epsilon / k * scores[j] / (c * sensitivity)) for j in remaining}
            p *= weights[r] / sum(weights.values())
            remaining.remove(r)
        pmf[seq] = p
    return pmf
