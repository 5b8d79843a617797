"""Gaussian thresholding: the partition selection rule for units that hold several keys (Gopi et al. 2020).

Each key's unit count n gets discrete Gaussian noise Z (P(Z = z) proportional to exp(-z^2 / (2 sigma^2)))
and the key is released when n + Z >= T. Only the released set is output, so this is a rule like the
optimal one (partition_selection.py): key by key, independently, released with probability
p(n) = P(Z >= T - n).

Privacy, for a unit that holds at most L keys. Let D' be D with one more unit. On the keys both hold,
the unit moves at most L counts by one: L2 sensitivity sqrt(L), so the noisy counts are
rho = L / (2 sigma^2)-zCDP (Canonne, Kamath, Steinke 2020, Theorem 4) and, thresholded (post-processing),
(eps_noise, delta_noise)-DP by the zCDP-to-DP conversion. The keys only D' holds (at most L, each held
by this one unit) are released with probability q_all <= L P(Z >= T - 1) <= delta_threshold; given none
is released, D' is D on the shared keys. So for any set S of outputs:

    P_D'(S) <= e^eps_noise P_D(S) + delta_noise + delta_threshold
    P_D(S)  <= e^eps_noise / (1 - delta_threshold) P_D'(S) + delta_noise

which is (epsilon, delta)-DP for eps_noise = epsilon - ln(1 / (1 - delta_threshold)) and
delta_noise + delta_threshold = delta - delta_rounding: delta_threshold = delta / 2 here.

Exact: p(n) is bounded between two rationals with MPFR's directed rounding at ``PRECISION`` bits (every
weight exp(-z^2 / (2 sigma^2)), sum and quotient rounded the safe way) and the lower bound is rounded down
to ``BITS`` bits, to 1 when within 2^-63 of it: the table's p'(n) is within 2^-62 of p(n). Over the at
most L keys whose law a unit changes, that moves each output probability by at most L 2^-62, which
costs delta_rounding = (1 + e^epsilon) L 2^-62 (taken out of delta_noise, with delta_noise rounded down
to a float and L P(Z >= T - 1) bounded above). Keys the unit does not hold
have the same law in D and D'.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction

import gmpy2
import numpy as np

from beam_expmech.accounting import epsilon_to_zcdp
from beam_expmech.mechanisms.intervals import contexts

BITS = 64
PRECISION = 320
_CUT = 300  # weights past exp(-_CUT ln 2) are left out of the sums, and 2^-_REST bounds what they add up to
_REST = 200
_MAX_SIGMA2 = 1 << 60  # so that the left-out tail is below 2^-_REST (1 / (1 - ratio) <= 1 + 2 sigma^2)
_MAX_ENTRIES = 1 << 22


@dataclass(frozen=True)
class GaussianThreshold:
    """The noise's variance (exact) and the threshold a noisy unit count must reach."""

    sigma2: Fraction
    threshold: int


def calibrate(*, epsilon: float, delta: float, max_keys: int) -> GaussianThreshold:
    """sigma^2 and T for (epsilon, delta)-DP with at most ``max_keys`` keys a unit (see the module's proof)."""
    if epsilon > 40:  # past e^40, the rounding slack below is no longer negligible: the optimal rule is the one
        raise ValueError(f"Gaussian thresholding is for epsilon up to 40, got {epsilon:g}")
    # (1 + e^eps) L 2^-62 <= 2 ceil(e^eps) L 2^-62 (the float e^eps rounded away first)
    delta_rounding = Fraction(math.ceil(math.exp(epsilon) * (1 + 1e-9))) * max_keys / (1 << 61)
    delta_threshold = Fraction(delta) / 2
    delta_noise = _below(Fraction(delta) - delta_threshold - delta_rounding)
    epsilon_noise = (epsilon + math.log1p(-float(delta_threshold))) * (1 - 1e-9)  # the log's float error, rounded away
    if delta_noise <= 0 or epsilon_noise <= 0:
        raise ValueError(f"Gaussian thresholding needs a larger delta than {delta:g} for {max_keys} keys a unit")
    rho = epsilon_to_zcdp(epsilon_noise, delta=delta_noise)
    sigma2 = Fraction(max_keys) / (2 * Fraction(rho))  # exactly rho-zCDP at L2 sensitivity sqrt(L)
    if sigma2 > _MAX_SIGMA2:
        raise ValueError(f"Gaussian thresholding at epsilon={epsilon:g}, delta={delta:g} needs too much noise")
    tails, budget = _Tails(sigma2), gmpy2.mpq(delta_threshold.numerator, delta_threshold.denominator)
    _, up = contexts(PRECISION)
    m = 1
    while True:  # the least m with L P(Z >= m) <= delta / 2: P(any key held by this unit alone is released)
        tail = tails.upper(m)
        with up:
            if max_keys * tail <= budget:
                break
        m += 1
    return GaussianThreshold(sigma2=sigma2, threshold=m + 1)


@functools.lru_cache(maxsize=16)  # a function of public parameters, built once per process
def gaussian_rule(*, epsilon: float, delta: float, max_keys: int) -> tuple[np.ndarray, GaussianThreshold]:
    """p'(0), ..., p'(A - 1) times 2^BITS, where A is the first unit count released for sure, and sigma^2, T
    (the table is read-only: it is shared)."""
    chosen = calibrate(epsilon=epsilon, delta=delta, max_keys=max_keys)
    tails, one = _Tails(chosen.sigma2), 1 << BITS
    down, _ = contexts(PRECISION)
    numerators = [0]
    for n in range(1, _MAX_ENTRIES):
        m = chosen.threshold - n  # p(n) = P(Z >= m) = 1 - P(Z >= 1 - m) for m <= 0 (Z is symmetric)
        lower = tails.lower(m) if m >= 1 else _one_minus(tails.upper(1 - m), down)
        with down:
            numerator = int(gmpy2.floor(lower * one))
        if numerator >= one - 1:
            table = np.array(numerators, dtype=np.uint64)
            table.flags.writeable = False
            return table, chosen
        numerators.append(numerator)
    raise ValueError("Gaussian thresholding's table is too long: use a larger epsilon")


def _below(x: Fraction) -> float:
    """The largest float at most x."""
    value = float(x)
    return value if Fraction(value) <= x else math.nextafter(value, -math.inf)


def _one_minus(x: gmpy2.mpfr, context: gmpy2.context) -> gmpy2.mpfr:
    with context:
        return 1 - x


class _Tails:
    """Bounds on P(Z >= m), m >= 1, for the discrete Gaussian of variance parameter ``sigma2``."""

    def __init__(self, sigma2: Fraction):
        self.down, self.up = contexts(PRECISION)
        # Past z = cut, exp(-z^2 / (2 sigma^2)) < 2^-_CUT, and the weights from there add up to under 2^-_REST.
        cut = math.isqrt(math.ceil(2 * sigma2 * _CUT * math.log(2)) + 1) + 2
        self.suffix_down = self._suffix(sigma2, cut, self.down, gmpy2.mpfr(0))
        self.suffix_up = self._suffix(sigma2, cut, self.up, gmpy2.mpfr(2) ** -_REST)
        with self.down:
            self.total_down = 1 + 2 * self.suffix_down[1]  # the normaliser: w(0) + 2 sum over z >= 1
        with self.up:
            self.total_up = 1 + 2 * self.suffix_up[1]

    @staticmethod
    def _suffix(sigma2: Fraction, cut: int, context: gmpy2.context, rest: gmpy2.mpfr) -> list:
        """sum of exp(-z^2 / (2 sigma2)) for z >= m, m = 0..cut (the last is ``rest``), rounded as ``context``."""
        sums = [rest] * (cut + 1)
        with context:
            for z in range(cut - 1, -1, -1):
                exponent = gmpy2.mpfr(gmpy2.mpq(-z * z * sigma2.denominator, 2 * sigma2.numerator))
                sums[z] = sums[z + 1] + gmpy2.exp(exponent)
        return sums

    def lower(self, m: int) -> gmpy2.mpfr:
        with self.down:
            return self.suffix_down[min(m, len(self.suffix_down) - 1)] / self.total_up

    def upper(self, m: int) -> gmpy2.mpfr:
        with self.up:
            return self.suffix_up[min(m, len(self.suffix_up) - 1)] / self.total_down
