"""Exact report-noisy-max: floats screen the candidates, exact arithmetic decides.

The exponential mechanism with log weights w (w_r = log mu_r + scale * score_r) is
argmax_r (w_r + G_r) with G_r iid standard Gumbel, and the k largest keys in order are k rounds
of peeling (Durfee and Rogers 2019). Permute-and-flip is argmax_r (w_r + E_r) with E_r iid
Exp(1) (Ding et al. 2021). Either way the key is w_r + g(U_r) for an increasing g and a uniform
U_r, so the mechanism is exact when the order of the true keys decides the output.

We never hold U_r in full. We hold its first b bits m, so U_r lies in [m 2^-b, (m+1) 2^-b] and,
g being increasing, the key lies in an interval. The output is decided once the intervals that
matter are disjoint; until then the candidates still in question draw more bits of their own
U_r (partially sampled noise, as in OpenDP's exact noisy max). The decision is therefore the
exact order of the exact keys, whatever the floating-point error.

1. Screen (numpy): 16 bits of U for every candidate, then 32 more for the few that survive.
   Key bounds come from float64 with a margin that covers numpy's rounding; a bound that is
   not finite (overflow, U at the end of its range) keeps its candidate. A candidate is dropped
   when k others are certainly above it. Almost always exactly the answer remains, in order.
2. Decide (Python, only when intervals still overlap): the same bits, 32 more at a time; the
   log weights as exact rationals of the float inputs, the noise bounds from MPFR's log with
   directed rounding (gmpy2), the comparisons in exact rationals.
"""

from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass
from fractions import Fraction

import gmpy2
import numpy as np

from beam_expmech.mechanisms.intervals import contexts, to_fraction
from beam_expmech.mechanisms.randomness import RandomSource

_U = 2.0**-53  # unit roundoff of float64
_FIRST_BITS = 16  # bits of U drawn for every candidate
_MORE_BITS = 32  # bits added each time a candidate is still in question
_GUARD_BITS = 64  # MPFR precision beyond the bits of U held
# |g(u)| <= 37 for every finite g at u = m 2^-b, b <= 52: the noise's share of the float error.
_NOISE_MAGNITUDE = 40.0
_TINY = 2.0**-1000  # absorbs underflow in the float weights


class Noise(enum.Enum):
    GUMBEL = "gumbel"  # g(U) = -ln(-ln U): the exponential mechanism
    EXPONENTIAL = "exponential"  # g(U) = -ln(1 - U): permute-and-flip


@dataclass(frozen=True)
class LogWeights:
    """w_r = log_measure_r + scale * scores_r, exactly, for the float or int inputs given.

    ``scale`` is the exact rational epsilon / (c * sensitivity) (c = 2, or 1 for a monotone
    score, times k for top-k rounds); the inputs are validated by the caller.
    """

    scores: np.ndarray
    scale: Fraction
    log_measure: np.ndarray | None = None

    def exact(self, r: int) -> Fraction:
        score = self.scores[r]
        weight = self.scale * Fraction(score.item() if isinstance(score, np.generic) else score)
        if self.log_measure is not None:
            weight += Fraction(float(self.log_measure[r]))
        return weight

    def floats(self) -> tuple[np.ndarray, np.ndarray | float]:
        """(w, extra): float64 log weights less a common shift, and an error term.

        Each |w_r - (exact w_r - shift)| <= 8 u |w_r| + extra_r (u = 2^-53). ``extra`` is
        infinite where no bound holds (Python ints beyond float range, a scale outside the
        normal range), so the screen keeps those candidates for the exact step.
        """
        try:
            scale = float(self.scale)  # correctly rounded
            w = self.scores.astype(np.float64)
        except OverflowError:  # no float bound: the exact step decides among all candidates
            return np.zeros(self.scores.size), np.inf
        top = w.max()
        conversion = 0.0
        if self.scores.dtype.kind in "iuO" and max(abs(top), abs(w.min())) > 2**53:
            conversion = 4 * _U * max(abs(top), abs(w.min())) * scale  # big ints were rounded
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            w -= top  # scale * (score - top) <= 0 cannot overflow upwards
            w *= scale
            extra = conversion + _TINY
            if self.log_measure is not None:
                # |tilt| <= |w| + |lm|, so 8u(|tilt| + |lm|) <= 8u|w| + 16u|lm|.
                w += self.log_measure
                extra = 16 * _U * np.abs(self.log_measure) + extra
        if not 2.0**-1022 <= scale < np.inf:
            extra = np.inf
        return w, extra


@dataclass
class PartialKey:
    """A candidate's key w + g(U) as far as it has been sampled: U in [prefix 2^-bits, (prefix+1) 2^-bits].

    Carrying these between workers lets shards of candidates be screened apart and merged
    exactly: the merge goes on refining the very uniforms each shard started.
    """

    index: int
    weight: Fraction
    prefix: int
    bits: int

    def bounds(self, noise: Noise) -> tuple[Fraction | float, Fraction | float]:
        """Rigorous bounds on the key."""
        g_low, g_high = noise_bounds(self.prefix, self.bits, noise)
        return self.weight + g_low, self.weight + g_high


def noisy_top_k(weights: LogWeights, k: int, noise: Noise, source: RandomSource) -> list[int]:
    """The indices of the k largest keys w_r + g(U_r), largest first, decided exactly.

    Candidates with log_measure -inf are never returned; the caller ensures k of them are positive.
    """
    return [key.index for key in noisy_top_k_keys(weights, k, noise, source)]


def noisy_top_k_keys(weights: LogWeights, k: int, noise: Noise, source: RandomSource) -> list[PartialKey]:
    """The k largest keys, largest first, with the state of their noise (for merging shards)."""
    w, extra = weights.floats()
    index = _positive_measure(weights)  # None: every candidate has positive measure
    if index is not None:
        w, extra = w[index], _take(extra, index)
    prefix = source.uint16(w.size)
    bits = _FIRST_BITS
    kept, low, high = _screen(w, extra, prefix, bits, k, noise)
    prefix = prefix[kept]  # from here on, kept and prefix are aligned: position i is candidate kept[i]
    order = _ordered(low, high, k)
    if order is None:
        # Some keys overlap: 32 more bits for the survivors, and screen them again.
        prefix = prefix.astype(np.uint64) << np.uint64(_MORE_BITS) | source.uint32(len(kept))
        bits += _MORE_BITS
        again, low, high = _screen(w[kept], _take(extra, kept), prefix, bits, k, noise)
        kept, prefix = kept[again], prefix[again]
        order = _ordered(low, high, k)
    if order is not None:
        kept, prefix = kept[order], prefix[order]
    original = kept.tolist() if index is None else index[kept].tolist()
    keys = [PartialKey(r, weights.exact(r), int(m), bits) for r, m in zip(original, prefix.tolist(), strict=True)]
    return keys if order is not None else decide(keys, k, noise, source)


def exact_top_k(weights: LogWeights, k: int, noise: Noise, source: RandomSource) -> list[int]:
    """The same draw as ``noisy_top_k`` with no float screen: every candidate starts from zero bits.

    Slow (Python per candidate); the reference that audits compare the fast sampler with.
    """
    index = _positive_measure(weights)
    candidates = range(weights.scores.size) if index is None else index.tolist()
    keys = [PartialKey(r, weights.exact(r), 0, 0) for r in candidates]
    return [key.index for key in decide(keys, k, noise, source)]


def decide(keys: list[PartialKey], k: int, noise: Noise, source: RandomSource) -> list[PartialKey]:
    """The k largest of ``keys``, largest first: refine the uniforms until the order is certain.

    Each round drops the keys that k others certainly beat and draws 32 more bits for the rest.
    """
    while True:
        bounds = {id(key): key.bounds(noise) for key in keys}
        threshold = sorted((low for low, _ in bounds.values()), reverse=True)[k - 1]
        keys = [key for key in keys if bounds[id(key)][1] >= threshold]
        if len(keys) == k:
            keys.sort(key=lambda key: bounds[id(key)][0], reverse=True)
            if all(bounds[id(a)][0] > bounds[id(b)][1] for a, b in itertools.pairwise(keys)):
                return keys
        for key in keys:
            key.prefix = (key.prefix << _MORE_BITS) | source.bits(_MORE_BITS)
            key.bits += _MORE_BITS


def _positive_measure(weights: LogWeights) -> np.ndarray | None:
    """Indices of the candidates of positive measure, or None when that is all of them."""
    if weights.log_measure is None or (weights.log_measure > -np.inf).all():
        return None
    return np.flatnonzero(weights.log_measure > -np.inf)


def _take(extra: np.ndarray | float, at: np.ndarray) -> np.ndarray | float:
    return extra[at] if isinstance(extra, np.ndarray) else extra


def _ordered(low: np.ndarray, high: np.ndarray, k: int) -> np.ndarray | None:
    """The order of k candidates whose key intervals are disjoint, or None."""
    if len(low) != k:
        return None
    order = np.argsort(-low, kind="stable")
    return order if np.all(low[order[:-1]] > high[order[1:]]) else None


def _screen(
    w: np.ndarray, extra: np.ndarray | float, prefix: np.ndarray, bits: int, k: int, noise: Noise
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Drop every candidate that k others certainly beat, from float bounds on the keys.

    U_r lies in [m 2^-bits, (m+1) 2^-bits] (exact in float64 for bits <= 52). Returns the
    positions kept and their lower and upper key bounds.
    """
    high = _key_bound(w, extra, prefix.astype(np.float64) + 1.0, bits, noise, upper=True)
    # Any k candidates give a threshold, the least of their lower bounds; the k with the
    # highest finite upper bounds almost always give the best one, so few survive it.
    finite_high = np.where(high < np.inf, high, -np.inf)
    best = np.argpartition(finite_high, -k)[-k:] if k > 1 else np.argmax(finite_high, keepdims=True)
    threshold = -np.inf
    if finite_high[best].min() > -np.inf:
        threshold = _lower_bound_at(w, extra, prefix, bits, noise, best).min()
    kept = np.flatnonzero(high >= threshold)
    return kept, _lower_bound_at(w, extra, prefix, bits, noise, kept), high[kept]


def _lower_bound_at(
    w: np.ndarray, extra: np.ndarray | float, prefix: np.ndarray, bits: int, noise: Noise, at: np.ndarray
) -> np.ndarray:
    """Lower key bounds of the candidates at positions ``at``."""
    return _key_bound(w[at], _take(extra, at), prefix[at].astype(np.float64), bits, noise, upper=False)


def _key_bound(
    w: np.ndarray, extra: np.ndarray | float, numerator: np.ndarray, bits: int, noise: Noise, *, upper: bool
) -> np.ndarray:
    """A float bound on w + g(numerator 2^-bits): above it if ``upper``, else below; +-inf if unsure."""
    u = numerator * 2.0**-bits  # exact
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        g = -np.log(-np.log(u)) if noise is Noise.GUMBEL else -np.log(1.0 - u)  # 1 - u is exact
        # The error of w (8u|w| + extra) and of numpy's log (a few ulp of each term) fit in
        # 40 ulp of |w| plus 32 ulp of the noise's magnitude, with room to spare.
        slack = np.abs(w)
        slack *= 40 * _U
        slack += extra + 32 * _U * _NOISE_MAGNITUDE
        bound = w + g
        if upper:
            bound += slack
        else:
            bound -= slack
    bound[np.isnan(bound)] = np.inf if upper else -np.inf
    return bound


def noise_bounds(m: int, bits: int, noise: Noise) -> tuple[Fraction | float, Fraction | float]:
    """Exact rational bounds (or +-inf) on g(U) for U in [m 2^-bits, (m+1) 2^-bits].

    MPFR rounds each log in the direction that keeps the bound valid; negation is exact.
    """
    precision = bits + _GUARD_BITS
    down, up = contexts(precision)

    def dyadic(numerator: int) -> gmpy2.mpfr:  # exact: numerator <= 2**bits
        return gmpy2.mpfr(gmpy2.mpq(numerator, 1 << bits), precision)

    if noise is Noise.GUMBEL:
        # g(U) = -ln(E), E = -ln U: a lower bound on g needs an upper bound on E, and so on.
        low = -to_fraction(up.log(up.minus(down.log(dyadic(m)))))
        high = -to_fraction(down.log(down.minus(up.log(dyadic(m + 1)))))
    else:
        low = -to_fraction(up.log(dyadic((1 << bits) - m)))
        high = -to_fraction(down.log(dyadic((1 << bits) - m - 1)))
    return low, high
