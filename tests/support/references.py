"""Answers computed from their definitions (floats, enumeration, row by row), independent of the library's code."""

from __future__ import annotations

import itertools
import math

import numpy as np


def reference_pmf(histogram, edges, q, epsilon, max_rows=1):
    """From the definition with math.exp: width * exp(-eps * dist(q n, [c_i, c_i+1]) / (2 K max(q, 1-q)))."""
    n, sensitivity = sum(histogram), max_rows * max(q, 1 - q)
    weights = []
    for i, width in enumerate(np.diff(edges)):
        low, high = sum(histogram[:i]), sum(histogram[: i + 1])
        distance = max(0, low - q * n, q * n - high)
        weights.append(width * math.exp(-epsilon * distance / (2 * sensitivity)))
    return np.array(weights) / sum(weights)


def definition_pmf(histogram, edges, qs, epsilon, max_rows=1):
    """Independent of the library: enumerate bin sequences, score with floats, volume with k!."""
    n, widths = sum(histogram), np.diff(edges)
    below = [sum(histogram[: b + 1]) for b in range(len(histogram))]  # points sit at left edges
    targets = [0, *qs, 1]
    weights = {}
    for bins in itertools.combinations_with_replacement(range(len(histogram)), len(qs)):
        ranks = [0] + [below[b] for b in bins] + [n]
        u = -sum(abs(ranks[j] - ranks[j - 1] - (targets[j] - targets[j - 1]) * n) for j in range(1, len(ranks)))
        volume = math.prod(widths[b] for b in bins) / math.prod(
            math.factorial(len(list(g))) for _, g in itertools.groupby(bins)
        )
        weights[bins] = volume * math.exp(epsilon * u / (2 * 2 * max_rows))
    total = sum(weights.values())
    return {bins: w / total for bins, w in weights.items()}


def brute_force(x: np.ndarray, y: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """Row by row: how many records each candidate fits."""
    return np.array([int(((x @ w) >= y).sum()) for w in candidates])
