"""Private quantiles from a histogram: the exponential mechanism with a base measure (Smith 2011).

The data are summarised by counts h_0 .. h_{B-1} of a public grid of bins over [lower, upper]
(values outside are clamped into the end bins). A point inside bin i has between c_i and
c_{i+1} = c_i + h_i values below it, so for the q-quantile bin i scores minus the distance from
the target rank q * n to that range:

    u_i = -max(0, c_i - q n, q n - c_{i+1}),    c_i = h_0 + ... + h_{i-1}, n = sum(h),

(0 for the bins that contain the q-quantile). The mechanism picks bin i with probability
proportional to width_i * exp(eps * u_i / (2 D)) and returns a uniform point inside it: a
density over [lower, upper] piecewise proportional to exp(eps * u / (2 D)), Smith's (2011)
mechanism on a grid. A bin of width zero (log measure -inf) is never chosen; everything is
computed in log space.

Sensitivity: adding or removing one privacy unit with at most K rows moves each c_i by some a
in [0, K] and n by K, so c_i - q n and q n - c_{i+1} each move by at most K * max(q, 1 - q),
and so does their maximum with 0. The scores move in different directions (not monotone).
Privacy: epsilon-DP (and epsilon**2/8-zCDP) per quantile; m quantiles with epsilon / m each
compose to epsilon.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from beam_expmech import parameters
from beam_expmech.mechanisms.exponential import accuracy_bound, exponential_mechanism, selection_probabilities
from beam_expmech.mechanisms.randomness import RandomLike, random_source


def quantile_scores(histogram: object, q: float, *, max_rows: int = 1) -> tuple[np.ndarray, float]:
    """(scores, sensitivity): the utility of every bin for the q-quantile, in exact integers.

    With q = a / b exactly (b a power of two, as for every float), the scores are
    b * u_i = -max(0, b c_i - a n, a n - b c_{i+1}) (Python ints, no rounding) and their sensitivity is
    max_rows * max(a, b - a), returned as the nearest float at or above it (never below:
    a sensitivity rounded down would understate the privacy loss).
    """
    histogram = check_histogram(histogram)
    a, b = Fraction(parameters.probability(q, "q")).as_integer_ratio()
    max_rows = parameters.count(max_rows, "max_rows")
    ranks = np.concatenate([[0], np.cumsum(histogram, dtype=np.int64)]).astype(object)  # c_0 .. c_B
    target = a * int(ranks[-1])
    scores = -np.maximum(np.maximum(ranks[:-1] * b - target, target - ranks[1:] * b), 0)
    return scores, _float_at_least(max_rows * max(a, b - a))


def check_histogram(histogram: object) -> np.ndarray:
    """The histogram as a 1-d array of integer counts >= 0, or a ValueError."""
    histogram = np.asarray(histogram)
    if histogram.ndim != 1 or histogram.size == 0 or histogram.dtype.kind not in "iu" or (histogram < 0).any():
        raise ValueError("histogram must be a non-empty 1-d array of integer counts >= 0")
    return histogram


def _float_at_least(value: int) -> float:
    rounded = float(value)
    return rounded if rounded >= value else float(np.nextafter(rounded, np.inf))


def _log_widths(edges: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(np.diff(edges))


def _check_edges(edges: object, bins: int) -> np.ndarray:
    edges = np.asarray(edges, dtype=np.float64)
    if edges.shape != (bins + 1,) or not np.isfinite(edges).all() or (np.diff(edges) < 0).any():
        raise ValueError(f"edges must be {bins + 1} finite, non-decreasing numbers (one more than the bins)")
    if edges[-1] <= edges[0]:
        raise ValueError("edges must span an interval of positive length")
    return edges


def private_quantile(
    histogram: object,
    edges: object,
    q: float,
    *,
    epsilon: float,
    max_rows: int = 1,
    rng: RandomLike = None,
) -> float:
    """An epsilon-DP estimate of the q-quantile of the values the histogram counts.

    ``edges`` are the B + 1 bin edges; ``max_rows`` is the most rows one privacy unit has in
    the histogram. The chosen bin is exact (exponential mechanism); the point inside it is
    uniform (post-processing).
    """
    scores, sensitivity = quantile_scores(histogram, q, max_rows=max_rows)
    edges = _check_edges(edges, scores.size)
    source = random_source(rng)
    chosen = exponential_mechanism(
        scores, epsilon=epsilon, sensitivity=sensitivity, log_measure=_log_widths(edges), rng=source
    )
    return uniform_in(edges[chosen], edges[chosen + 1], source)


def quantile_probabilities(
    histogram: object, edges: object, q: float, *, epsilon: float, max_rows: int = 1
) -> np.ndarray:
    """The probability of each bin (for audits), float64."""
    scores, sensitivity = quantile_scores(histogram, q, max_rows=max_rows)
    edges = _check_edges(edges, scores.size)
    return selection_probabilities(scores, epsilon=epsilon, sensitivity=sensitivity, log_measure=_log_widths(edges))


def rank_error_bound(*, epsilon: float, bins: int, q: float, max_rows: int = 1, beta: float = 0.05) -> float:
    """With probability >= 1 - beta, the chosen bin's |rank - q n| exceeds the best bin's by at most this.

    The exponential mechanism's accuracy theorem with mu(R) / mu(R_OPT) <= bins (equal widths).
    """
    q = parameters.probability(q, "q")
    return accuracy_bound(epsilon=epsilon, sensitivity=max_rows * max(q, 1 - q), beta=beta, num_candidates=bins)


def uniform_in(low: float, high: float, source) -> float:
    """A uniform point in [low, high): post-processing of the chosen bin (53 random bits)."""
    fraction = source.bits(53) * 2.0**-53
    return float(min(low + fraction * (high - low), np.nextafter(high, low)))
