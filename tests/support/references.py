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


def limited_domain_pmf(counts, k, kbar, epsilon, delta, max_rows, max_keys):
    """The limited-domain top-k's law from its definition, over keys 0..len(counts)-1 (count 0: absent).

    The kbar largest present counts (ties: the lower key first), bottom at the next count (0 if none)
    plus K + (K k / epsilon) ln(min(L, kbar) k / delta); k rounds of peeling with epsilon / k each, stopped
    at bottom. Outcome: the tuple of released keys, best first.
    """
    present = sorted((key for key, c in enumerate(counts) if c > 0), key=lambda key: (-counts[key], key))
    top, rest = present[:kbar], present[kbar:]
    bar = min(max_keys, kbar)
    bottom = (counts[rest[0]] if rest else 0) + max_rows + max_rows * k / epsilon * math.log(bar * k / delta)
    scores = {**{key: counts[key] for key in top}, None: bottom}
    pmf: dict[tuple, float] = {}

    def peel(chosen: tuple, p: float) -> None:
        if len(chosen) == k:
            pmf[chosen] = pmf.get(chosen, 0.0) + p
            return
        remaining = [key for key in scores if key not in chosen]
        top_score = max(scores[key] for key in remaining)
        weights = {key: math.exp(epsilon / k * (scores[key] - top_score) / max_rows) for key in remaining}
        total = sum(weights.values())
        for key, weight in weights.items():
            if key is None:
                pmf[chosen] = pmf.get(chosen, 0.0) + p * weight / total
            else:
                peel((*chosen, key), p * weight / total)

    peel((), 1.0)
    return pmf


def partition_selection_pmf(units, probability):
    """P(the released set of keys) when key i, held by units[i] units, is kept with probability(units[i])."""
    pmf = {}
    for kept in itertools.product((False, True), repeat=len(units)):
        p = 1.0
        for n, keep in zip(units, kept, strict=True):
            q = float(probability(n)) if n > 0 else 0.0
            p *= q if keep else 1 - q
        if p > 0:
            released = tuple(i for i, keep in enumerate(kept) if keep)
            pmf[released] = pmf.get(released, 0.0) + p
    return pmf


def optimal_partition_rule(epsilon, delta, max_keys):
    """pi(n) of Desfontaines et al. 2022 at (epsilon / L, delta / L), in floats, from its recursion."""
    x, d = epsilon / max_keys, delta / max_keys

    def pi(n):
        p = 0.0
        for _ in range(n):
            p = min(1.0, math.exp(x) * p + d, 1 - math.exp(-x) * (1 - p - d))
        return p

    return pi


def gaussian_tail(sigma2):
    """m -> P(Z >= m) for the discrete Gaussian, P(Z = z) proportional to exp(-z^2 / (2 sigma2)), in floats."""
    z = np.arange(-int(40 * math.sqrt(sigma2)) - 40, int(40 * math.sqrt(sigma2)) + 41)
    weights = np.exp(-(z.astype(float) ** 2) / (2 * sigma2))
    tails = np.cumsum(weights[::-1])[::-1] / weights.sum()

    def tail(m):
        return 1.0 if m <= z[0] else 0.0 if m > z[-1] else float(tails[m - z[0]])

    return tail


def keys_then_exponential_pmf(rows, units, k, epsilon, delta, share, max_rows, max_keys, pi=None):
    """Partition selection on ``units`` (share of epsilon; the optimal rule unless ``pi`` is given), then
    k' = min(k, released) rounds of the exponential mechanism (monotone, sensitivity K) over the released
    keys' ``rows`` with the rest."""
    pi = pi or optimal_partition_rule(epsilon * share, delta, max_keys)
    rest = epsilon * (1 - share)
    pmf: dict[tuple, float] = {}
    for released, p_released in partition_selection_pmf(units, pi).items():
        if not released:
            pmf[()] = pmf.get((), 0.0) + p_released
            continue
        rounds = min(k, len(released))
        for order in itertools.permutations(released, rounds):
            p, remaining = p_released, list(released)
            for key in order:
                top = max(rows[r] for r in remaining)
                weights = {r: math.exp(rest / rounds * (rows[r] - top) / max_rows) for r in remaining}
                p *= weights[key] / sum(weights.values())
                remaining.remove(key)
            pmf[order] = pmf.get(order, 0.0) + p
    return pmf


def discrete_laplace_pmf(scale, support):
    """P(Z = z) for z in -support..support, P(Z = z) proportional to exp(-|z| / scale) (the rest: below 1e-13)."""
    z = np.arange(-support, support + 1)
    decay = math.exp(-1 / scale)
    return z, (1 - decay) / (1 + decay) * decay ** np.abs(z)


def keys_then_laplace_pmf(rows, units, k, epsilon, delta, share, max_rows, max_keys, pi=None):
    """Partition selection on ``units`` as in keys_then_exponential_pmf, then each released key's ``rows``
    plus discrete Laplace noise of scale K / (the rest of epsilon); the released order is the min(k, released)
    largest noisy counts, a tie going to the larger key. P(a1, ..., ak) by a pass over the noisy values: g1 = the
    law of a1's value, g_j(y) = P(a_j's value is y and below a_(j-1)'s) and the others all below a_k's."""
    pi = pi or optimal_partition_rule(epsilon * share, delta, max_keys)
    scale = max_rows / (epsilon * (1 - share))
    noise, noise_pmf = discrete_laplace_pmf(scale, math.ceil(32 * math.log(10) * scale))
    low, high = min(rows) + noise[0], max(rows) + noise[-1]
    laws = {}
    for key, count in enumerate(rows):  # the law of each key's noisy count on the grid low..high
        law = np.zeros(high - low + 1)
        law[count + noise[0] - low : count + noise[-1] - low + 1] = noise_pmf
        laws[key] = law
    pmf: dict[tuple, float] = {}
    for released, p_released in partition_selection_pmf(units, pi).items():
        for order in itertools.permutations(released, min(k, len(released))):
            g = laws[order[0]] if order else None
            for before, key in itertools.pairwise(order):
                above = np.concatenate([np.cumsum(g[::-1])[::-1][1:], [0.0]])  # P(before's value > y, and so on)
                g = laws[key] * (above + (g if before > key else 0.0))
            p = 1.0 if not order else g
            for other in set(released) - set(order):  # every other released key below the last chosen
                below = np.concatenate([[0.0], np.cumsum(laws[other])[:-1]])  # P(other's value < y)
                p = p * (below + (laws[other] if order[-1] > other else 0.0))
            pmf[order] = pmf.get(order, 0.0) + p_released * float(np.sum(p))
    return pmf
