"""The exact sampler's two halves: float screen bounds are valid, and exact bounds are rigorous."""

from __future__ import annotations

import math
from fractions import Fraction

import gmpy2
import numpy as np
import pytest

from beam_expmech.mechanisms.exact import LogWeights, Noise, _key_bound, _screen, noise_bounds


def random_weights(rng: np.random.Generator, size: int) -> LogWeights:
    """Scores and log measures across many magnitudes, ints past 2**53 included."""
    kind = rng.integers(3)
    if kind == 0:
        scores = rng.normal(size=size) * 10.0 ** rng.integers(-5, 15, size=size)
    elif kind == 1:
        scores = rng.integers(-(2**62), 2**62, size=size)
    else:
        scores = rng.integers(0, 10, size=size)
    scale = Fraction(float(10.0 ** rng.uniform(-6, 6))) / Fraction(float(10.0 ** rng.uniform(-3, 3)))
    log_measure = rng.normal(size=size) * 10.0 ** rng.integers(-3, 3) if rng.integers(2) else None
    return LogWeights(scores, scale, log_measure)


@pytest.mark.parametrize("seed", range(40))
def test_float_weights_stay_within_their_error_bound(seed):
    weights = random_weights(np.random.default_rng(seed), 50)
    w, extra = weights.floats()
    extra = np.broadcast_to(extra, w.shape)
    shift = weights.scale * Fraction(float(weights.scores.astype(np.float64).max()))
    for r in range(w.size):
        if np.isfinite(w[r]) and np.isfinite(extra[r]):
            error = abs(Fraction(float(w[r])) - (weights.exact(r) - shift))
            assert error <= Fraction(8 * 2.0**-53 * abs(float(w[r]))) + Fraction(float(extra[r]))


@pytest.mark.parametrize("noise", list(Noise))
@pytest.mark.parametrize("bits", [16, 48])
def test_float_key_bounds_enclose_the_exact_ones(noise, bits):
    rng = np.random.default_rng(bits)
    size = 400
    w = rng.normal(size=size) * 10.0 ** rng.integers(-3, 13, size=size)
    extra = 0.0
    m = rng.integers(0, 2**bits, size=size, dtype=np.uint64)
    m[:4] = [0, 1, 2**bits - 2, 2**bits - 1]  # the ends of the range, where g is steep or infinite
    low = _key_bound(w, extra, m.astype(np.float64), bits, noise, upper=False)
    high = _key_bound(w, extra, m.astype(np.float64) + 1, bits, noise, upper=True)
    for r in range(size):
        g_low, g_high = noise_bounds(int(m[r]), bits, noise)
        assert low[r] <= Fraction(float(w[r])) + g_low
        assert high[r] >= Fraction(float(w[r])) + g_high


@pytest.mark.parametrize("noise", list(Noise))
def test_exact_noise_bounds_bracket_a_high_precision_value(noise):
    rng = np.random.default_rng(1)
    for _ in range(200):
        bits = int(rng.integers(1, 200))
        m = int(rng.integers(0, 2 ** min(bits, 62))) << max(0, bits - 62)
        g_low, g_high = noise_bounds(m, bits, noise)
        assert g_low < g_high
        for u in (Fraction(m, 2**bits), Fraction(m + 1, 2**bits)):
            if 0 < u < 1:
                x = gmpy2.mpfr(gmpy2.mpq(u.numerator, u.denominator), bits + 200)
                with gmpy2.context(precision=bits + 200):
                    g = -gmpy2.log(-gmpy2.log(x)) if noise is Noise.GUMBEL else -gmpy2.log(1 - x)
                assert g_low <= Fraction(*map(int, g.as_integer_ratio())) <= g_high
    assert noise_bounds(0, 8, Noise.GUMBEL)[0] == -math.inf
    assert noise_bounds(255, 8, noise)[1] == math.inf


def test_a_weight_that_overflows_in_float_is_kept_for_the_exact_step():
    weights = LogWeights(np.array([1.7e308, -1.7e308]), Fraction(1, 2))
    w, extra = weights.floats()
    assert w[1] == -np.inf  # score - top overflowed; the exact weight, -1.7e308, is finite
    kept, _, high = _screen(w, extra, np.array([5, 7], dtype=np.uint16), 16, 1, Noise.GUMBEL)
    assert kept.tolist() == [0, 1] and high[1] == np.inf
