"""Private partition selection: which keys found in the data may be released at all.

Each key is released with a probability pi(n) that depends only on n, the number of privacy units
that hold it, and each key's draw is independent (Desfontaines, Voss, Gipson and Mandayam 2022).
When one unit holds at most one key, the largest pi that keeps (epsilon, delta)-DP is

    pi(0) = 0,   pi(n) = min(1, e^epsilon pi(n - 1) + delta, 1 - e^-epsilon (1 - pi(n - 1) - delta)):

adding a unit moves one key from n - 1 to n units, and the two bounds are the DP inequalities for
"released" and "not released" (the others hold since pi grows). When one unit holds at most L keys,
each key's rule runs at (epsilon / L, delta / L): the L draws a unit can move compose to
(epsilon, delta)-DP. The rule needs no noise and no threshold: it is the threshold.

Sensitivity: n counts units, not rows, so a unit moves each of its (at most L) keys' n by one.

Exact: pi is replaced by a lower envelope p of dyadic rationals with ``BITS`` fractional bits,
built by the same recursion with e^epsilon rounded down, e^-epsilon rounded up and every step
rounded down, so that p(n) <= e^epsilon p(n - 1) + delta and 1 - p(n - 1) <= e^epsilon (1 - p(n)) +
delta hold exactly for the true e^epsilon; a key is released when BITS uniform bits, read as an
integer, fall below p(n) 2^BITS. A key held by at least ``always`` units is released for sure.

When a unit holds several keys, splitting epsilon L ways costs more than Gaussian thresholding
(gaussian_thresholding.py: one noisy count per key, L2 sensitivity sqrt(L)), which releases keys by
a table of the same kind. ``rule="best"`` takes the one that releases a key at fewer units with
probability 1/2 (the optimal one below 4 keys a unit): a choice made from the public parameters alone.
"""

from __future__ import annotations

import functools
from fractions import Fraction

import numpy as np

from beam_expmech import parameters
from beam_expmech.mechanisms.gaussian_thresholding import GaussianThreshold, gaussian_rule
from beam_expmech.mechanisms.intervals import contexts, to_fraction
from beam_expmech.mechanisms.randomness import RandomSource

BITS = 64
_MAX_STEPS = 1 << 20  # pi reaches 1 within about 2 ln(1 / delta) / epsilon steps
RULES = ("best", "optimal", "gaussian")
_GAUSSIAN_FROM = 4  # below 4 keys a unit the optimal rule needed fewer units wherever we looked (and "best" then
# skips calibrating the Gaussian)


class PartitionSelection:
    """The release rule of (``epsilon``, ``delta``)-DP partition selection, ``max_keys`` keys per unit.

    ``rule``: "optimal" (the rule above at (epsilon / L, delta / L) per key), "gaussian" (Gaussian
    thresholding), or "best" of the two for these parameters (the optimal one when L < 4, or where
    Gaussian thresholding cannot be calibrated).

    Privacy: (epsilon, delta)-DP for the set of released keys, when each privacy unit holds at
    most ``max_keys`` of the keys and a key's n counts the distinct units that hold it.
    """

    def __init__(self, *, epsilon: float, delta: float, max_keys: int = 1, rule: str = "best"):
        self.epsilon = parameters.positive_finite(epsilon, "epsilon")
        self.delta = parameters.probability(delta, "delta")
        self.max_keys = parameters.count(max_keys, "max_keys")
        if rule not in RULES:
            raise ValueError(f"rule must be one of {', '.join(RULES)}, got {rule!r}")
        if self.delta / self.max_keys < 2.0**-BITS:  # p(1) = delta / L would round down to 0, and stay there
            raise ValueError(
                f"delta / max_keys must be at least 2^-{BITS} (5.4e-20), got {self.delta / self.max_keys:g}"
            )
        self.gaussian: GaussianThreshold | None = None  # sigma^2 and T, when the Gaussian rule is the one
        public = {"epsilon": self.epsilon, "delta": self.delta, "max_keys": self.max_keys}
        if rule == "gaussian":
            self.rule = "gaussian"
            self.numerators, self.gaussian = gaussian_rule(**public)
            return
        self.rule = "optimal"
        self.numerators = _envelope(Fraction(self.epsilon) / self.max_keys, Fraction(self.delta) / self.max_keys)
        if rule == "best" and self.max_keys >= _GAUSSIAN_FROM:
            try:
                numerators, gaussian = gaussian_rule(**public)
            except ValueError:  # parameters Gaussian thresholding cannot take (a tiny delta, a huge epsilon)
                return
            if _units_for_half(numerators) < _units_for_half(self.numerators):
                self.rule, self.numerators, self.gaussian = "gaussian", numerators, gaussian

    @property
    def always(self) -> int:
        """The fewest units that release a key for sure (public)."""
        return len(self.numerators)

    def probability(self, units: int) -> Fraction:
        """p(n), exactly: the probability that a key held by ``units`` units is released."""
        return Fraction(int(self.numerators[units]), 1 << BITS) if units < self.always else Fraction(1)

    def units_needed(self, probability: float) -> int:
        """The fewest units that release a key with at least ``probability`` (public: the accuracy note)."""
        return next(n for n in range(self.always + 1) if self.probability(n) >= probability)

    def keep(self, units: np.ndarray, source: RandomSource) -> np.ndarray:
        """Which keys are released, given how many units hold each (a bool mask, one draw per key)."""
        units = np.asarray(units, dtype=np.int64)
        if (units < 1).any():
            raise ValueError("every key found in the data is held by at least one unit")
        kept = units >= self.always
        drawn = np.flatnonzero(~kept)
        words = source.uint32(2 * drawn.size).astype(np.uint64)
        uniform = words[0::2] << np.uint64(32) | words[1::2]  # BITS = 64 uniform bits per key
        kept[drawn] = uniform < self.numerators[units[drawn]]
        return kept


def _units_for_half(numerators: np.ndarray) -> int:
    """The fewest units whose key a table releases with probability at least 1/2."""
    return int(np.searchsorted(numerators, np.uint64(1 << (BITS - 1))))


@functools.lru_cache(maxsize=16)  # a function of public parameters, built once per process
def _envelope(epsilon: Fraction, delta: Fraction) -> np.ndarray:
    """p(0), ..., p(T - 1) times 2^BITS (all < 2^BITS), where T is the first n with p(n) = 1 (read-only: shared)."""
    down, up = contexts(BITS + 64)
    with down:
        grow = Fraction(to_fraction(down.exp(down.div(epsilon.numerator, epsilon.denominator))))  # <= e^eps
    with up:
        shrink = Fraction(to_fraction(up.exp(up.div(-epsilon.numerator, epsilon.denominator))))  # >= e^-eps
    one = 1 << BITS
    numerators, p = [0], Fraction(0)
    for _ in range(_MAX_STEPS):
        rest = 1 - p - delta
        p = min(Fraction(1), grow * p + delta, 1 - shrink * rest if rest > 0 else Fraction(1))
        if p >= 1:
            table = np.array(numerators, dtype=np.uint64)
            table.flags.writeable = False
            return table
        numerator = p.numerator * one // p.denominator  # rounded down to BITS bits
        numerators.append(numerator)
        p = Fraction(numerator, one)
    raise ValueError(
        f"partition selection at epsilon={float(epsilon):g}, delta={float(delta):g} per key needs over {_MAX_STEPS:,} "
        "units to release a key for sure: use a larger epsilon or delta"
    )
