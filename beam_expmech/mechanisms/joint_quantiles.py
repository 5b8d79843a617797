"""JointExp (Gillenwater, Joseph and Kulesza 2021): m quantiles drawn jointly by one exponential mechanism.

On a grid of B bins with edges e_0 < .. < e_B and counts h, the candidates are the sorted
outputs o_1 <= .. <= o_m. Points of bin b are taken to sit at its left edge, so an o inside
bin b has c_{b+1} = h_0 + .. + h_b values below it. With bins b_1 <= .. <= b_m, the gaps hold
n_j = c_{b_j+1} - c_{b_{j-1}+1} values (c_{b_0+1} = 0, c_{b_{m+1}+1} = n), and the utility is

    u(o) = -sum_{j=1}^{m+1} | n_j - (q_j - q_{j-1}) n |      (q_0 = 0, q_{m+1} = 1).

The density over sorted o is proportional to exp(eps * u / (2 D)); integrating o over its
bins, a bin sequence b has probability proportional to vol(b) exp(eps * u(b) / (2 D)), where
vol(b) = prod_j width(b_j) / prod over runs of equal bins of (run length)!; the points are
then uniform and sorted inside their bins.

Sensitivity: one privacy unit with at most K rows moves the n_j by amounts >= 0 summing to at
most K and the targets by (q_j - q_{j-1}) K, so D = 2K. Privacy: epsilon-DP (one exponential
mechanism; epsilon**2/8-zCDP), for all m quantiles together.

Exact sampling. The bin sequence is a chain, so a dynamic program over (bin, run length)
gives its law; but the DP is computed in floats. We therefore draw from the float DP as a
proposal Q (each step an exact draw from the float weights, so Q is known exactly), and
accept with probability P(b) / (M Q(b)), decided in exact arithmetic (MPFR enclosures and a
lazily sampled uniform). M exceeds max P / Q by a rigorous bound on the DP's rounding, so the
result follows P exactly; the acceptance probability is 1 - O(1e-10).
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import gmpy2
import numpy as np

from beam_expmech import parameters
from beam_expmech.mechanisms.exact import LogWeights, Noise, noisy_top_k
from beam_expmech.mechanisms.randomness import RandomLike, RandomSource, random_source

_U = 2.0**-53
_PRECISION = 160  # MPFR bits for the acceptance test (refined if it is ever undecided)
MAX_BINS = 4096


def joint_problem(histogram: object, edges: object, quantiles: list[float], *, epsilon: float, max_rows: int):
    """Validate and return (counts c_0..c_B, log widths, integer targets, denominator, exact scale s).

    Scores are kept as exact integers: with every q_j = A_j / Den (Den a power of two),
    Den * u(b) is an integer, and the exponent is s * Den * u(b) with s = eps / (2 * 2K * Den).
    """
    histogram = np.asarray(histogram)
    if histogram.ndim != 1 or histogram.size == 0 or histogram.dtype.kind not in "iu" or (histogram < 0).any():
        raise ValueError("histogram must be a non-empty 1-d array of integer counts >= 0")
    if histogram.size > MAX_BINS:
        raise ValueError(f"JointExp takes at most {MAX_BINS} bins (its sampler is quadratic), got {histogram.size}")
    edges = np.asarray(edges, dtype=np.float64)
    if edges.shape != (histogram.size + 1,) or not np.isfinite(edges).all() or (np.diff(edges) <= 0).any():
        raise ValueError("edges must be increasing finite numbers, one more than the bins")
    qs = [parameters.probability(q, "quantile") for q in quantiles]
    if not qs or sorted(set(qs)) != qs:
        raise ValueError("quantiles must be distinct and increasing")
    epsilon = parameters.positive_finite(epsilon, "epsilon")
    max_rows = parameters.count(max_rows, "max_rows")
    den = max(Fraction(q).denominator for q in qs)
    targets = [0] + [int(Fraction(q) * den) for q in qs] + [den]  # A_0 .. A_{m+1}
    ranks = np.concatenate([[0], np.cumsum(histogram, dtype=np.int64)]).tolist()  # c_0 .. c_B (Python ints)
    scale = Fraction(epsilon) / (4 * max_rows * den)
    return ranks, np.log(np.diff(edges)), targets, den, scale


def gap_penalties(ranks: list[int], targets: list[int], den: int, j: int, before: np.ndarray, after: np.ndarray):
    """Den * |n_j - (q_j - q_{j-1}) n| for gaps from bin ``before`` to bin ``after``, in float64.

    For the proposal only (its rounding is inside the DP's error bound). ``before`` = -1 stands
    for the start (no values below), ``after`` = B for the end (all n values below).
    """
    c = np.array([*ranks, ranks[-1]], dtype=np.float64)  # c[b + 1] for b in -1 .. B
    return np.abs((c[after + 1] - c[before + 1]) * den - (targets[j] - targets[j - 1]) * float(ranks[-1]))


def sequence_log_weight(bins: list[int], ranks, log_widths, targets, den, scale) -> tuple[Fraction, tuple]:
    """(the exact exponent s * Den * u(b), (log widths of the bins, lengths of the runs)) of one sequence."""
    c = [*ranks, ranks[-1]]
    padded = [-1, *bins, len(log_widths)]
    n = ranks[-1]
    penalty = sum(
        abs((c[padded[j] + 1] - c[padded[j - 1] + 1]) * den - (targets[j] - targets[j - 1]) * n)
        for j in range(1, len(padded))
    )
    runs = [len(run) for run in _runs(bins)]
    return -scale * penalty, ([float(log_widths[b]) for b in bins], runs)


def _runs(bins: list[int]):
    start = 0
    for i in range(1, len(bins) + 1):
        if i == len(bins) or bins[i] != bins[start]:
            yield bins[start:i]
            start = i


def joint_probabilities(histogram, edges, quantiles, *, epsilon: float, max_rows: int = 1) -> dict:
    """P(bin sequence) by enumeration, float64 (for audits on small grids)."""
    ranks, log_widths, targets, den, scale = joint_problem(
        histogram, edges, quantiles, epsilon=epsilon, max_rows=max_rows
    )
    logs = {}
    for bins in itertools.combinations_with_replacement(range(len(log_widths)), len(quantiles)):
        exponent, (widths, runs) = sequence_log_weight(list(bins), ranks, log_widths, targets, den, scale)
        logs[bins] = float(exponent) + sum(widths) - sum(math.lgamma(k + 1) for k in runs)
    top = max(logs.values())
    total = math.fsum(math.exp(v - top) for v in logs.values())
    return {bins: math.exp(v - top) / total for bins, v in logs.items()}


def joint_quantiles(
    histogram: object,
    edges: object,
    quantiles: list[float],
    *,
    epsilon: float,
    max_rows: int = 1,
    rng: RandomLike = None,
) -> list[float]:
    """m sorted epsilon-DP quantile estimates, drawn jointly (JointExp). See the module docstring."""
    problem = joint_problem(histogram, edges, quantiles, epsilon=epsilon, max_rows=max_rows)
    source = random_source(rng)
    edges = np.asarray(edges, dtype=np.float64)
    bins = sample_bins(problem, len(quantiles), source)
    points = []
    for run in _runs(bins):
        low, high = edges[run[0]], edges[run[0] + 1]
        points.extend(sorted(float(low + (high - low) * source.bits(53) * 2.0**-53) for _ in run))
    return points


def sample_bins(problem, m: int, source: RandomSource) -> list[int]:
    """An exact draw of the bin sequence: float-DP proposal, exact acceptance."""
    while True:
        bins, steps, error = _propose(problem, m, source)
        if _accept(problem, bins, steps, error, source):
            return bins


def _propose(problem, m: int, source: RandomSource):
    """Draw from the float DP: the bins, the (float log-weights, choice) of every random step,
    and a bound on the rounding error of every DP entry."""
    ranks, log_widths, targets, den, scale = problem
    size = len(log_widths)
    s = float(scale)
    b = np.arange(size)
    # forward[j][r - 1, b]: log weight of bins b_1..b_j ending in bin b with a run of length r.
    forward = []
    first = log_widths - s * gap_penalties(ranks, targets, den, 1, np.full(size, -1), b)
    layer = np.full((m, size), -np.inf)
    layer[0] = first
    forward.append(layer)
    magnitude = np.abs(first).max()
    for j in range(2, m + 1):
        previous = _logsumexp(forward[-1], axis=0)  # over run lengths: G_{j-1}(b')
        # move[b', b] = G(b') - s * penalty(b' -> b), for b' < b only
        penalty = gap_penalties(ranks, targets, den, j, b[:, None], b[None, :])
        move = previous[:, None] - s * penalty
        move[np.tril_indices(size)] = -np.inf
        layer = np.full((m, size), -np.inf)
        layer[0] = log_widths + _logsumexp(move, axis=0)
        stay = s * float(abs(-(targets[j] - targets[j - 1]) * ranks[-1]))  # n_j = 0 when b_j = b_{j-1}
        for r in range(2, j + 1):
            layer[r - 1] = log_widths - math.log(r) + forward[-1][r - 2] - stay
        forward.append(layer)
        magnitude = max(
            magnitude,
            np.abs(np.where(np.isfinite(layer), layer, 0)).max(),
            np.abs(move[np.isfinite(move)]).max(initial=0),
        )
    final = -s * gap_penalties(ranks, targets, den, m + 1, b, np.full(size, size))
    last = forward[-1] + final[None, :]
    magnitude = max(magnitude, np.abs(np.where(np.isfinite(last), last, 0)).max())
    # Rounding of each DP entry: m layers, each a log-sum-exp of at most m * B terms (a few ulp
    # per term and per result) plus penalties of that magnitude; 16x room to spare.
    error = 16 * m * (m * size + 16) * _U * (1 + magnitude)

    steps = []
    flat = last.ravel()
    pick = _draw(flat, source)
    steps.append((flat, pick))
    run, bin_ = divmod(pick, size)
    bins = [bin_]
    for j in range(m, 1, -1):
        if run > 0:  # b_{j-1} = b_j, run one shorter: determined
            run -= 1
            bins.append(bin_)
            continue
        penalty = gap_penalties(ranks, targets, den, j, b, np.full(size, bin_))
        weights = forward[j - 2] - s * penalty[None, :]
        weights[:, bin_:] = -np.inf  # b_{j-1} < b_j
        flat = weights.ravel()
        pick = _draw(flat, source)
        steps.append((flat, pick))
        run, bin_ = divmod(pick, size)
        bins.append(bin_)
    bins.reverse()
    return bins, steps, error


def _draw(log_weights: np.ndarray, source: RandomSource) -> int:
    """Index r with probability exactly exp(w_r) / sum exp(w) for these float values."""
    finite = np.isfinite(log_weights)
    index = np.flatnonzero(finite)
    weights = LogWeights(log_weights[finite], Fraction(1))
    return int(index[noisy_top_k(weights, 1, Noise.GUMBEL, source)[0]])


def _logsumexp(x: np.ndarray, axis: int) -> np.ndarray:
    top = np.max(x, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return np.squeeze(top, axis=axis) + np.log(np.sum(np.exp(x - top), axis=axis))


def _accept(problem, bins, steps, error, source: RandomSource) -> bool:
    """Bernoulli(P(b) / (M Q(b))) exactly: a lazily drawn uniform against an MPFR enclosure.

    log M = LSE(first step's weights) + 3 (steps) (error): the float DP differs from the exact
    one by at most ``error`` per entry, so T(b) - log Q(b) never exceeds it (module docstring).
    """
    ranks, log_widths, targets, den, scale = problem
    exponent, (widths, runs) = sequence_log_weight(bins, ranks, log_widths, targets, den, scale)
    margin = Fraction(3 * len(steps)) * Fraction(error)
    precision, uniform, bits = _PRECISION, 0, 0
    while True:
        t = _sum_interval([(exponent, exponent)] + [(Fraction(w), Fraction(w)) for w in widths]
                          + [_neg(_log_factorial(k, precision)) for k in runs])  # fmt: skip
        log_q = _sum_interval([(Fraction(float(flat[pick])),) * 2 for flat, pick in steps]
                              + [_neg(_log_sum_exp(flat, precision)) for flat, _ in steps])  # fmt: skip
        lse_low, lse_high = _log_sum_exp(steps[0][0], precision)
        x_low = t[0] - log_q[1] - (lse_high + margin)
        x_high = t[1] - log_q[0] - (lse_low + margin)
        while bits < precision:
            uniform, bits = (uniform << 32) | source.bits(32), bits + 32
        p_low, p_high = _exp_interval(x_low, x_high, precision)
        u_low, u_high = Fraction(uniform, 1 << bits), Fraction(uniform + 1, 1 << bits)
        if u_high <= p_low:
            return True
        if u_low >= p_high:
            return False
        precision *= 2


def _neg(interval):
    return (-interval[1], -interval[0])


def _sum_interval(intervals):
    return (sum(i[0] for i in intervals), sum(i[1] for i in intervals))


def _to_fraction(x: gmpy2.mpfr) -> Fraction:
    numerator, denominator = x.as_integer_ratio()
    return Fraction(int(numerator), int(denominator))


def _log_factorial(k: int, precision: int) -> tuple[Fraction, Fraction]:
    """Rational bounds on log(k!)."""
    down, up = _contexts(precision)
    return (
        sum((_to_fraction(down.log(i)) for i in range(2, k + 1)), Fraction(0)),
        sum((_to_fraction(up.log(i)) for i in range(2, k + 1)), Fraction(0)),
    )


def _log_sum_exp(values: np.ndarray, precision: int) -> tuple[Fraction, Fraction]:
    """Rational bounds on log(sum(exp(v))) over the finite entries of a float vector."""
    finite = values[np.isfinite(values)]
    top = float(finite.max())
    bounds = []
    for ctx in _contexts(precision):
        # mpfr(float) is exact; each operation rounds in the context's direction.
        terms = [ctx.exp(ctx.sub(gmpy2.mpfr(float(v)), top)) for v in finite]
        bounds.append(Fraction(top) + _to_fraction(ctx.log(ctx.fsum(terms))))
    return bounds[0], bounds[1]


def _exp_interval(low: Fraction, high: Fraction, precision: int) -> tuple[Fraction, Fraction]:
    """A rational lower bound on exp(low) and an upper bound on exp(high)."""
    down, up = _contexts(precision)
    return _to_fraction(down.exp(_dyadic(low, precision, up=False))), _to_fraction(
        up.exp(_dyadic(high, precision, up=True))
    )


def _contexts(precision: int):
    """MPFR contexts rounding down and up."""
    return (
        gmpy2.context(precision=precision, round=gmpy2.RoundDown),
        gmpy2.context(precision=precision, round=gmpy2.RoundUp),
    )


def _dyadic(x: Fraction, bits: int, *, up: bool) -> gmpy2.mpfr:
    """A dyadic bound on x (below, or above if ``up``) with ``bits`` fractional bits, held exactly."""
    scaled = x * (1 << bits)
    n = math.ceil(scaled) if up else math.floor(scaled)
    return gmpy2.mpfr(gmpy2.mpq(n, 1 << bits), max(bits, n.bit_length()) + 2)
