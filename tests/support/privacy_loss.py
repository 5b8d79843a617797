"""Exact privacy loss between the output distributions of two neighbouring inputs, and sampler checks.

A pmf is an array over the outcomes (or a dict outcome -> probability). For epsilon-DP the
log ratio of every outcome stays within epsilon; for epsilon-bounded-range its largest minus
its smallest value stays within epsilon; for rho-zCDP the Renyi divergence of every order
alpha > 1 stays within rho * alpha.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator

import numpy as np
from audit_log import LONG
from sampling import FALSE_FAILURE_RATE, assert_follows
from scipy.special import logsumexp
from scipy.stats import beta

ALPHAS = (1.5, 2.0, 4.0, 16.0)


def as_log(pmf) -> np.ndarray:
    values = np.array(list(pmf.values()) if isinstance(pmf, dict) else pmf, dtype=float)
    with np.errstate(divide="ignore"):
        return np.log(values)


class PrivacyLoss:
    """The worst privacy loss over many pairs of neighbouring pmfs."""

    def __init__(self) -> None:
        self.pairs = 0
        self.epsilon = 0.0  # max |ln p/q|
        self.range = 0.0  # max (ln p/q) - min (ln p/q)
        self.renyi_rate = 0.0  # max over alpha of D_alpha / alpha, both directions

    def add(self, p, q) -> None:
        """One pair; dict pmfs must have the same outcomes, array pmfs the same order."""
        if isinstance(p, dict):
            assert p.keys() == q.keys(), "the pmfs have different outcomes"
            q = [q[o] for o in p]
        log_p, log_q = as_log(p), as_log(q)
        same = log_p == log_q  # both -inf included: an outcome impossible under both
        if not np.array_equal(np.isneginf(log_p), np.isneginf(log_q)):
            self.epsilon = self.range = self.renyi_rate = np.inf  # an outcome possible under one only
            return
        with np.errstate(invalid="ignore"):  # -inf - -inf where both are impossible, masked by `same`
            ratio = np.where(same, 0.0, log_p - log_q)[~np.isneginf(log_p)]
        self.pairs += 1
        self.epsilon = max(self.epsilon, float(np.abs(ratio).max()))
        self.range = max(self.range, float(ratio.max() - ratio.min()))
        for a, b in ((log_p, log_q), (log_q, log_p)):
            for alpha in ALPHAS:
                self.renyi_rate = max(self.renyi_rate, renyi(a, b, alpha) / alpha)

    def report(self, audit, subject: str, *, epsilon: float, bounded_range: bool = False, rho: float | None = None):
        """Record pure DP, and as claimed, epsilon-bounded range and the Renyi bound of rho-zCDP."""
        audit.check(subject, "epsilon-DP: max |ln p/q| (exact pmf)", cases=self.pairs, worst=self.epsilon,
                    bound=epsilon)  # fmt: skip
        if bounded_range:
            audit.check(subject, "bounded range: max - min ln p/q", cases=self.pairs, worst=self.range,
                        bound=epsilon)  # fmt: skip
        if rho is not None:
            audit.check(subject, "zCDP: max_alpha D_alpha / alpha", cases=self.pairs * 2 * len(ALPHAS),
                        worst=self.renyi_rate, bound=rho)  # fmt: skip


def renyi(log_p: np.ndarray, log_q: np.ndarray, alpha: float) -> float:
    """D_alpha(P || Q) = ln sum p^alpha q^(1 - alpha) / (alpha - 1), over the common support."""
    support = ~np.isneginf(log_p)
    return float(logsumexp(alpha * log_p[support] + (1 - alpha) * log_q[support]) / (alpha - 1))


def hockey_stick(p: dict, q: dict, epsilon: float) -> float:
    """The least delta with P(S) <= e^epsilon Q(S) + delta for every set S of outcomes (both pmfs as dicts)."""
    return math.fsum(max(0.0, value - math.exp(epsilon) * q.get(outcome, 0.0)) for outcome, value in p.items())


def unit_contributions(keys: int, max_rows: int, max_keys: int) -> Iterator[np.ndarray]:
    """Every way one unit can add to per-key row counts: at most ``max_rows`` rows over at most ``max_keys`` keys."""
    for rows in range(1, max_rows + 1):
        for cells in itertools.combinations_with_replacement(range(keys), rows):
            if len(set(cells)) <= max_keys:
                yield np.bincount(cells, minlength=keys)


def score_neighbours(scores: np.ndarray, sensitivity: float, *, monotone: bool = False) -> Iterator[np.ndarray]:
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


def histogram_neighbours(histogram: Iterable[int], max_rows: int) -> Iterator[np.ndarray]:
    """Histograms one unit away: the unit's (at most ``max_rows``) rows added, or removed, anywhere."""
    histogram = np.asarray(histogram)
    for rows in range(1, max_rows + 1):  # the unit's rows as a multiset of cells: no scan of every move
        for cells in itertools.combinations_with_replacement(range(histogram.size), rows):
            moved = np.bincount(cells, minlength=histogram.size)
            yield histogram + moved
            if (histogram >= moved).all():
                yield histogram - moved


def record_sampler(audit, subject: str, draws: list, pmf: dict) -> None:
    """The real sampler's draws against the exact pmf (chi-square), recorded as -log10 p."""
    p_value = assert_follows(draws, pmf)
    audit.check(subject, "sampler vs pmf: -log10 p (chi-square)", cases=len(draws), worst=-math.log10(p_value),
                bound=-math.log10(FALSE_FAILURE_RATE))  # fmt: skip


# --- black-box checks on neighbouring datasets: seeded runs, hit counts, a confidence bound -------------
DRAWS = 30_000 if LONG else 3_000  # runs of a release step on each of two neighbouring datasets
CONFIDENCE = 0.999


def clopper_pearson(successes: int, trials: int) -> tuple[float, float]:
    tail = (1 - CONFIDENCE) / 2
    low = beta.ppf(tail, successes, trials - successes + 1) if successes else 0.0
    high = beta.ppf(1 - tail, successes + 1, trials - successes) if successes < trials else 1.0
    return low, high


def log_ratio_lower_bound(a: np.ndarray, b: np.ndarray, draws: int = DRAWS) -> tuple[float, float]:
    """(the observed max |ln p/q| over outcomes, its lower confidence bound), from hit counts."""
    observed, certain = 0.0, 0.0
    for x, y in ((a, b), (b, a)):
        for hits_x, hits_y in zip(x, y, strict=True):
            if hits_x and hits_y:
                observed = max(observed, abs(math.log(hits_x / hits_y)))
            low_x, _ = clopper_pearson(int(hits_x), draws)
            _, high_y = clopper_pearson(int(hits_y), draws)
            if low_x > 0:
                certain = max(certain, math.log(low_x / high_y))
    return observed, certain
