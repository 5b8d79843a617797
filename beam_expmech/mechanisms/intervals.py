"""Directed rounding: MPFR contexts that round down and up, and exact conversions of their results.

The exact samplers (exact.py, joint_quantiles.py) bound each real quantity they need (a log, an
exp, a log-sum-exp) between two rationals: one computed rounding down, one rounding up. These
are the pieces they share.
"""

from __future__ import annotations

import math
from fractions import Fraction

import gmpy2


def contexts(precision: int) -> tuple[gmpy2.context, gmpy2.context]:
    """MPFR contexts of ``precision`` bits rounding down and up."""
    return (
        gmpy2.context(precision=precision, round=gmpy2.RoundDown),
        gmpy2.context(precision=precision, round=gmpy2.RoundUp),
    )


def to_fraction(x: gmpy2.mpfr) -> Fraction | float:
    """The exact rational value of an MPFR number (an infinity stays a float infinity)."""
    if gmpy2.is_infinite(x):
        return float(x)
    numerator, denominator = x.as_integer_ratio()
    return Fraction(int(numerator), int(denominator))


def dyadic(x: Fraction, bits: int, *, up: bool) -> gmpy2.mpfr:
    """A dyadic bound on x (below, or above if ``up``) with ``bits`` fractional bits, held exactly."""
    scaled = x * (1 << bits)
    n = math.ceil(scaled) if up else math.floor(scaled)
    return gmpy2.mpfr(gmpy2.mpq(n, 1 << bits), max(bits, n.bit_length()) + 2)
