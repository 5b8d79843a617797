"""Halfspaces over bits: candidate weight vectors, and how many records each one fits.

Records are bit vectors (x_1 .. x_d, y). A candidate pi fits a record when
pi_1 x_1 + ... + pi_d x_d >= y. Its score is the number of records it fits: a count, so one
record adds at most 1 to any score (with at most K records per privacy unit: sensitivity K)
and adding records never lowers a score (monotone).

The data pass only needs the histogram of the 2^(d+1) bit patterns (a k-way marginal, summed
across shards); every candidate's score is then exact integer arithmetic over the distinct
patterns, a few matrix products, whatever the number of rows.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

MAX_FEATURES = 22  # 2^(d+1) pattern counts: 8M cells at most
DEFAULT_MAX_CANDIDATES = 100_000
_CHUNK = 4096  # candidates scored per matrix product


def weight_grid(values: Sequence[float], num_features: int, *, max_candidates: int) -> np.ndarray:
    """Every weight vector with entries from ``values``: shape (len(values)^d, d).

    Refuses, naming the count and the limit, when there would be more than ``max_candidates``.
    """
    values = sorted(set(float(v) for v in values))
    if not values:
        raise ValueError("the weight set is empty")
    count = len(values) ** num_features
    if count > max_candidates:
        raise ValueError(
            f"{len(values)} weights over {num_features} features make {count:,} candidates, over the limit of "
            f"{max_candidates:,} (raise --max-candidates, or give fewer weights or features)"
        )
    return np.array(list(itertools.product(values, repeat=num_features)), dtype=np.float64).reshape(count, num_features)


def check_candidates(candidates: np.ndarray, num_features: int, *, max_candidates: int) -> np.ndarray:
    """Validate a given candidate matrix: finite, one weight per feature, distinct rows, within the limit."""
    candidates = np.asarray(candidates, dtype=np.float64)
    if candidates.ndim != 2 or candidates.shape[1] != num_features or candidates.shape[0] == 0:
        raise ValueError(f"candidates must be a non-empty list of {num_features} weights each")
    if not np.isfinite(candidates).all():
        raise ValueError("candidate weights must be finite")
    if candidates.shape[0] > max_candidates:
        raise ValueError(f"{candidates.shape[0]:,} candidates, over the limit of {max_candidates:,}")
    if len(np.unique(candidates, axis=0)) != candidates.shape[0]:
        raise ValueError("candidates must be distinct")
    return candidates


def fit_counts(pattern_counts: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """How many records each candidate fits, from the counts of every (x_1..x_d, y) pattern.

    ``pattern_counts`` is the C-order marginal over (x_1, .., x_d, y), each of domain 2: the
    pattern with bits b_1..b_d, y sits at index sum_j b_j 2^(d-j) * 2 + y. Exact (int64).
    """
    num_features = candidates.shape[1]
    if pattern_counts.shape != (2 ** (num_features + 1),):
        raise ValueError(f"expected {2 ** (num_features + 1)} pattern counts for {num_features} features")
    present = np.flatnonzero(pattern_counts)
    bits = (present[:, None] >> np.arange(num_features, -1, -1)) & 1  # (patterns, d + 1)
    x, y = bits[:, :-1].astype(np.float64), bits[:, -1]
    counts = pattern_counts[present].astype(np.int64)
    scores = np.empty(candidates.shape[0], dtype=np.int64)
    for start in range(0, candidates.shape[0], _CHUNK):
        chunk = candidates[start : start + _CHUNK]
        # Whatever the rounding of pi . x, each record adds 0 or 1 to each score: the
        # sensitivity holds exactly. (Integer weights, the usual grid, sum exactly.)
        fits = chunk @ x.T >= y
        scores[start : start + len(chunk)] = fits.astype(np.int64) @ counts
    return scores
