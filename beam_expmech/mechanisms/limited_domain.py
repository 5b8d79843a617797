"""Top-k over keys found in the data, with no public candidate list: the limited-domain mechanism
(Durfee and Rogers 2019, "pay what you get"), sampled exactly.

The candidates are the kbar keys with the largest true counts, and a stop, bottom, whose score is
the (kbar + 1)-th largest count (0 if there is none) plus a public margin

    margin = K + (K / epsilon_r) ln(min(L, kbar) / delta_r),   epsilon_r = epsilon / k, delta_r = delta / k.

Every candidate gets Gumbel noise of scale K / epsilon_r (the exponential mechanism's one-shot
top-k, exact as in ``exact.py``); the keys whose noisy score beats bottom's are released, best
first, at most k. Fewer when few keys stand out: the release says so.

Sensitivity: a privacy unit keeps at most K rows (``max_rows``) over at most L distinct keys
(``max_keys``). Adding or removing it moves every count, the (kbar + 1)-th included, by at most K
and all in one direction (monotone), and lets at most min(L, kbar) keys enter the top kbar.

Privacy: each of the k rounds of peeling this one-shot draw equals is (epsilon_r, delta_r)-DP:
epsilon_r from the exponential mechanism over the candidates both neighbours share, delta_r
bounding the chance that one of the at most min(L, kbar) keys that only one neighbour's top kbar
holds beats bottom (its count is at most K above the (kbar + 1)-th, so it needs noise beyond
the margin's log term: probability at most delta_r / min(L, kbar) each). The k rounds compose to
(epsilon, delta)-DP. The margin's logarithm is rounded up (a higher bottom only releases less).
"""

from __future__ import annotations

import gmpy2
import numpy as np

from beam_expmech import parameters
from beam_expmech.mechanisms.exact import Noise, noisy_top_k
from beam_expmech.mechanisms.exponential import log_weights
from beam_expmech.mechanisms.intervals import contexts
from beam_expmech.mechanisms.randomness import RandomLike, random_source


def bottom_log_measure(*, k: int, kbar: int, delta: float, max_keys: int) -> float:
    """ln(min(L, kbar) k / delta) rounded up to a float: bottom's log base measure (public)."""
    _, up = contexts(53)
    with up:
        return float(up.log(up.div(gmpy2.mpz(min(max_keys, kbar) * k), gmpy2.mpfr(delta))))


def margin(*, k: int, kbar: int, epsilon: float, delta: float, max_rows: int, max_keys: int) -> float:
    """How far above the (kbar + 1)-th count bottom's score stands (public: the accuracy note)."""
    return max_rows + max_rows * k / epsilon * bottom_log_measure(k=k, kbar=kbar, delta=delta, max_keys=max_keys)


def limited_domain_top_k(
    top_counts: object,
    next_count: int,
    k: int,
    *,
    kbar: int,
    epsilon: float,
    delta: float,
    max_rows: int,
    max_keys: int,
    rng: RandomLike = None,
) -> list[int]:
    """Indices into ``top_counts`` (the kbar largest counts; fewer when fewer keys hold rows), best first:
    at most k.

    ``next_count`` is the (kbar + 1)-th largest count (0 if there is none). ``kbar`` is the public
    parameter, never the number of keys found: bottom's margin must not move with the data (one
    unit bringing new keys would otherwise move it). Privacy: (epsilon, delta)-DP when each unit
    keeps at most ``max_rows`` rows over at most ``max_keys`` keys (module docstring).
    """
    counts = parameters.scores_array(top_counts)
    if counts.dtype.kind not in "iuO" or (counts < 0).any() or isinstance(next_count, bool) or next_count < 0:
        raise ValueError("counts must be integers >= 0")
    if (counts < next_count).any():
        raise ValueError("next_count must be at most every one of top_counts (the kbar largest)")
    k = parameters.count(k, "k")
    kbar = parameters.count(kbar, "kbar")
    if counts.size > kbar:
        raise ValueError(f"top_counts holds {counts.size} counts, more than kbar ({kbar})")
    delta = parameters.probability(delta, "delta")
    max_rows = parameters.count(max_rows, "max_rows")
    max_keys = parameters.count(max_keys, "max_keys")
    scores = np.append(counts.astype(np.int64), int(next_count) + max_rows)  # bottom last
    log_measure = np.zeros(counts.size + 1)
    log_measure[-1] = bottom_log_measure(k=k, kbar=kbar, delta=delta, max_keys=max_keys)
    weights = log_weights(
        scores, epsilon=epsilon, sensitivity=max_rows, monotonic=True, log_measure=log_measure, rounds=k
    )
    bottom = counts.size
    drawn = noisy_top_k(weights, min(k, bottom + 1), Noise.GUMBEL, random_source(rng))
    return drawn[: drawn.index(bottom)] if bottom in drawn else drawn
