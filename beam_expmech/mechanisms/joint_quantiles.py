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

Exact sampling. The bin sequence is a chain, so a dynamic program (DP) over (bin, run length)
gives its law; but the DP is computed in floats. We therefore draw from the float DP as a
proposal Q (each step an exact draw from the float weights, so Q is known exactly), and accept
with probability P(b) / (M Q(b)), decided in exact arithmetic (MPFR enclosures and a lazily
sampled uniform). M exceeds max P / Q by a rigorous bound on the DP's rounding, so the result
follows P exactly.

Why the running time does not depend on n. A gap's penalty counts rows, so log weights are of
order eps * n, and float rounding is relative to them: a DP on raw log weights errs by about
1e-16 eps n per entry, M grows as exp(that), and at n = 10^10 most proposals are rejected. The
running time is public (anyone watching the job sees it) while n is not released, so it must not
depend on n. The DP is therefore kept relative to an exact reference: an integer min-plus DP over
the same chain gives I_j(b), the least sum of the whole parts of the penalties of gaps 1..j with
b_j = b, and each float entry is the log weight plus eps / (4K) * I_j(b). The floats then see
only residuals (exact int64 >= 0, zero along the best chain) and fractional parts in [0, 1].
Residuals beyond W / (eps / 4K) are capped: that only raises weights (exp T(b) <= exp T_cap(b)
for every chain), so a bound on T_cap - log Q bounds T - log Q; W is chosen so that capping adds
less than e^-64 of the total weight. Every float is then bounded by a magnitude that depends on
m, B, eps / K and the widths, not on n: for nine deciles on 1,024 bins the rounding bound is
~1e-9 and fewer than one proposal in 10^7 is rejected, whatever n.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import NamedTuple

import gmpy2
import numpy as np

from beam_expmech import parameters
from beam_expmech.mechanisms.exact import LogWeights, Noise, noisy_top_k
from beam_expmech.mechanisms.intervals import contexts, dyadic, to_fraction
from beam_expmech.mechanisms.quantile import check_histogram, uniform_in
from beam_expmech.mechanisms.randomness import RandomLike, RandomSource, random_source

_U = 2.0**-53
_PRECISION = 160  # MPFR bits for the acceptance test (refined if it is ever undecided)
_TAIL = 64  # capping residuals adds at most e^-64 of the total weight
MAX_BINS = 4096
MAX_ROWS = 2**60  # every integer penalty of a chain stays below 4 n: int64 with room
_NO_CHAIN = 2**62  # the min-plus DP's stand-in for an impossible predecessor


class JointProblem(NamedTuple):
    """What JointExp samples from, in exact integers where it matters."""

    ranks: list[int]  # c_0 .. c_B: the rows below each edge (Python ints)
    log_widths: np.ndarray  # log of each bin's width (the base measure)
    targets: list[int]  # A_0 .. A_{m+1}: q_j = A_j / den, with q_0 = 0 and q_{m+1} = 1
    den: int  # the common denominator of the quantiles (a power of two)
    scale: Fraction  # s: the exponent is s * den * u(b)


def joint_problem(
    histogram: object, edges: object, quantiles: list[float], *, epsilon: float, max_rows: int
) -> JointProblem:
    """Validate and return the problem: counts c_0..c_B, log widths, integer targets, denominator, exact scale s.

    Scores are kept as exact integers: with every q_j = A_j / Den (Den a power of two),
    Den * u(b) is an integer, and the exponent is s * Den * u(b) with s = eps / (2 * 2K * Den).
    """
    histogram = check_histogram(histogram)
    if histogram.size > MAX_BINS:
        raise ValueError(f"JointExp takes at most {MAX_BINS} bins (its sampler is quadratic), got {histogram.size}")
    if sum(histogram.tolist()) >= MAX_ROWS:
        raise ValueError("JointExp takes a histogram of fewer than 2^60 rows")
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
    return JointProblem(ranks, np.log(np.diff(edges)), targets, den, scale)


def gap_penalties(ranks: list[int], targets: list[int], den: int, j: int, before: np.ndarray, after: np.ndarray):
    """|n_j - (q_j - q_{j-1}) n| for gaps from bin ``before`` to bin ``after``, as (whole, part).

    ``whole`` is an exact int64 >= 0 and ``part`` a float in [0, 1] within 2 ulp of the rest, so
    no rounding grows with n. ``before`` = -1 stands for the start (no values below), ``after`` = B
    for the end (all n values below).
    """
    n = ranks[-1]
    c = np.array([*ranks, n], dtype=np.int64)  # c[b + 1] for b in -1 .. B
    target = Fraction((targets[j] - targets[j - 1]) * n, den)  # (q_j - q_{j-1}) n, exactly
    floor = math.floor(target)
    fraction = float(target - floor)
    d = c[after + 1] - c[before + 1] - floor
    # |d - fraction| is (d - 1) + (1 - fraction) when d >= 1, and -d + fraction when d <= 0.
    return np.maximum(d - 1, -d), np.where(d >= 1, 1.0 - fraction, fraction)


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
    """m sorted epsilon-DP quantile estimates, drawn jointly (JointExp). See the module docstring.

    Sensitivity 2K (K = ``max_rows``); epsilon-DP for the m estimates together. The running time
    does not depend on the number of rows (module docstring).
    """
    problem = joint_problem(histogram, edges, quantiles, epsilon=epsilon, max_rows=max_rows)
    source = random_source(rng)
    edges = np.asarray(edges, dtype=np.float64)
    bins = sample_bins(problem, len(quantiles), source)
    points = []
    for run in _runs(bins):
        points.extend(sorted(uniform_in(edges[run[0]], edges[run[0] + 1], source) for _ in run))
    return points


def sample_bins(problem: JointProblem, m: int, source: RandomSource) -> list[int]:
    """An exact draw of the bin sequence: float-DP proposal, exact acceptance."""
    while True:
        proposal = propose(problem, m, source)
        if _accept(problem, proposal, source):
            return proposal.bins


@dataclass
class Proposal:
    """A draw from the float DP, with what the exact acceptance test needs.

    ``steps``: the (float log weights, choice) of every random step, Q(b) being the product of
    their exact softmax probabilities (the first step's weights do not depend on the draw);
    ``margin``: log M less the log-sum-exp of the first step's weights, the same for every
    draw, (2m + 1) times the bound on the rounding of every float DP entry and step weight, so
    the acceptance probability is at least exp(-margin * (2m + 2) / (2m + 1) - e^-64);
    ``shift``: eps / (4K) * I, the exact whole penalty of the best chain.
    """

    bins: list[int]
    steps: list[tuple[np.ndarray, int]]
    margin: float
    shift: Fraction


def propose(problem: JointProblem, m: int, source: RandomSource) -> Proposal:
    """Draw from the float DP, every entry relative to the exact min-plus reference (module docstring)."""
    ranks, log_widths, targets, den, scale = problem
    size = len(log_widths)
    s = float(scale * den)  # eps / (4K): log weight per row of penalty
    cap = _residual_cap(log_widths, m, s)
    b = np.arange(size)
    earlier_or_same, earlier = b[:, None] <= b[None, :], b[:, None] < b[None, :]

    def penalty(residual: np.ndarray, part: np.ndarray) -> np.ndarray:
        return s * (np.minimum(residual, cap) + part)

    # forward[j - 1][r - 1, b]: log weight of bins b_1..b_j ending in b with a run of length r,
    # plus s * references[j - 1][b] (the least whole penalty of such a chain, exact).
    whole, part = gap_penalties(ranks, targets, den, 1, np.full(size, -1), b)
    references = [whole]
    layer = np.full((m, size), -np.inf)
    layer[0] = log_widths - s * part
    forward = [layer]
    for j in range(2, m + 1):
        whole, part = gap_penalties(ranks, targets, den, j, b[:, None], b[None, :])
        chain = np.where(earlier_or_same, references[-1][:, None] + whole, _NO_CHAIN)  # b' -> b, b' <= b
        reference = chain.min(axis=0)
        weight = penalty(chain - reference[None, :], part)
        move = _logsumexp(forward[-1], axis=0)[:, None] - weight  # b_{j-1} = b' < b_j = b: a new run
        move[~earlier] = -np.inf
        layer = np.full((m, size), -np.inf)
        layer[0] = log_widths + _logsumexp(move, axis=0)
        stay = np.diagonal(weight)  # b_{j-1} = b_j: the run grows
        for r in range(2, j + 1):
            layer[r - 1] = log_widths - math.log(r) + forward[-1][r - 2] - stay
        forward.append(layer)
        references.append(reference)
    whole, part = gap_penalties(ranks, targets, den, m + 1, b, np.full(size, size))
    chain = references[-1] + whole
    best = int(chain.min())
    last = forward[-1] - penalty(chain - best, part)[None, :]

    # Every float here (entries, penalties, terms of each log-sum-exp) is at most `magnitude`.
    # Per layer, rounding costs ~15 ulp of it (penalty 6, additions 3, two log-sum-exps 3 each)
    # plus 3 ulp per term summed; m + 1 layers, 16x room to spare.
    entries = np.concatenate([layer[np.isfinite(layer)] for layer in forward])
    magnitude = np.abs(entries).max() + s * (cap + 1) + np.abs(log_widths).max() + math.log(m) + 1
    error = 16 * (m + 1) * _U * (16 * (1 + magnitude) + 3 * m * size)
    margin = (2 * m + 1) * error  # never the number of steps of this draw: M must not depend on b

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
        whole, part = gap_penalties(ranks, targets, den, j, b, np.full(size, bin_))
        weights = forward[j - 2] - penalty(references[j - 2] + whole - references[j - 1][bin_], part)[None, :]
        weights[:, bin_:] = -np.inf  # b_{j-1} < b_j
        flat = weights.ravel()
        pick = _draw(flat, source)
        steps.append((flat, pick))
        run, bin_ = divmod(pick, size)
        bins.append(bin_)
    bins.reverse()
    return Proposal(bins, steps, margin, scale * den * best)


def _residual_cap(log_widths: np.ndarray, m: int, s: float) -> int:
    """The residual (in rows) beyond which penalties are capped: s * cap >= W.

    A capped chain weighs at most exp(m max lw - W); the best chain at least
    exp(m min lw - log m! - (m + 1) s); there are at most B^m chains. So with
    W = 64 + m (log B + log m + max lw - min lw) + (m + 1) s, capping adds at most e^-64 of Z.
    """
    spread = float(log_widths.max() - log_widths.min())
    w = _TAIL + m * (math.log(len(log_widths)) + math.log(m) + spread) + (m + 1) * s
    return min(math.ceil(w / s) if s > 0 else _NO_CHAIN, _NO_CHAIN)


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


def _accept(problem: JointProblem, proposal: Proposal, source: RandomSource) -> bool:
    """Bernoulli(P(b) / (M Q(b))) exactly: a lazily drawn uniform against a rational enclosure.

    Let P_cap be the capped law (every exact weight exp T(b) <= exp T_cap(b)) and F the exact
    DP of which the floats are within ``error``. log Q(b) is a sum over at most m steps of
    (chosen weight - log-sum-exp of the step's weights), and so is log P_cap(b) with the exact
    values, so T(b) - log Q(b) <= T_cap(b) - log Q(b) <= log Z_cap + 2 m error, and log Z_cap
    <= (the first step's log-sum-exp) + error: log M = LSE(first step) + (2m + 1) error, all
    relative to the exact reference ``shift``. The first enclosure comes from float64 (one
    numpy pass, ~1e-10 wide); MPFR at doubling precision decides the rare draws it leaves open.
    """
    ranks, log_widths, targets, den, scale = problem
    exponent, (widths, runs) = sequence_log_weight(proposal.bins, ranks, log_widths, targets, den, scale)
    exponent += proposal.shift  # relative to the best chain's whole penalty: small, whatever n
    margin = Fraction(proposal.margin)
    precision, uniform, bits = _PRECISION, 0, 0
    log_sum_exp = _float_log_sum_exp
    while True:
        sums = [log_sum_exp(flat, precision) for flat, _ in proposal.steps]
        t = _sum_interval([(exponent, exponent)] + [(Fraction(w), Fraction(w)) for w in widths]
                          + [_neg(_log_factorial(k, precision)) for k in runs])  # fmt: skip
        log_q = _sum_interval([(Fraction(float(flat[pick])),) * 2 for flat, pick in proposal.steps]
                              + [_neg(interval) for interval in sums])  # fmt: skip
        x_low = t[0] - log_q[1] - (sums[0][1] + margin)
        x_high = t[1] - log_q[0] - (sums[0][0] + margin)
        while bits < precision:
            uniform, bits = (uniform << 32) | source.bits(32), bits + 32
        p_low, p_high = _exp_interval(x_low, x_high, precision)
        u_low, u_high = Fraction(uniform, 1 << bits), Fraction(uniform + 1, 1 << bits)
        if u_high <= p_low:
            return True
        if u_low >= p_high:
            return False
        precision, log_sum_exp = 2 * precision, _log_sum_exp


def _neg(interval):
    return (-interval[1], -interval[0])


def _sum_interval(intervals):
    return (sum(i[0] for i in intervals), sum(i[1] for i in intervals))


def _log_factorial(k: int, precision: int) -> tuple[Fraction, Fraction]:
    """Rational bounds on log(k!)."""
    down, up = contexts(precision)
    return (
        sum((to_fraction(down.log(i)) for i in range(2, k + 1)), Fraction(0)),
        sum((to_fraction(up.log(i)) for i in range(2, k + 1)), Fraction(0)),
    )


def _float_log_sum_exp(values: np.ndarray, _precision: int) -> tuple[Fraction, Fraction]:
    """Rational bounds on log(sum(exp(v))) over the finite entries, from one float64 pass.

    Rounding: v - top (1 ulp of at most 745 where exp does not underflow), exp (a few ulp), the
    sum (N ulp), log and + top (a few ulp of |top| + log N): within 1,000 + N + |top| ulp; the
    bounds allow 64 times that. Underflowed terms are below 2^-1074 each, against a sum >= 1.
    """
    finite = values[np.isfinite(values)]
    top = float(finite.max())
    with np.errstate(under="ignore"):
        middle = top + math.log(float(np.exp(finite - top).sum()))
    slack = Fraction(64 * _U * (1000 + finite.size + abs(top)))
    return Fraction(middle) - slack, Fraction(middle) + slack


def _log_sum_exp(values: np.ndarray, precision: int) -> tuple[Fraction, Fraction]:
    """Rational bounds on log(sum(exp(v))) over the finite entries of a float vector, by MPFR.

    Terms more than ``cutoff`` below the largest add at most 2^-(precision + 16) of it together:
    the lower bound leaves them out, the upper bound counts them at that much.
    """
    finite = values[np.isfinite(values)]
    top = float(finite.max())
    cutoff = (precision + 16) * math.log(2) + math.log(finite.size) + 1  # + 1: the float test's rounding
    near = finite[finite - top >= -cutoff]
    tail = gmpy2.mul_2exp(gmpy2.mpfr(1), -(precision + 16))  # exact (a float would underflow)
    bounds = []
    for ctx, far in zip(contexts(precision), (0, tail), strict=True):
        # mpfr(float) is exact; each operation rounds in the context's direction.
        terms = [ctx.exp(ctx.sub(gmpy2.mpfr(float(v)), top)) for v in near]
        bounds.append(Fraction(top) + to_fraction(ctx.log(ctx.add(ctx.fsum(terms), far))))
    return bounds[0], bounds[1]


def _exp_interval(low: Fraction, high: Fraction, precision: int) -> tuple[Fraction, Fraction]:
    """A rational lower bound on exp(low) and an upper bound on exp(high)."""
    down, up = contexts(precision)
    return to_fraction(down.exp(dyadic(low, precision, up=False))), to_fraction(
        up.exp(dyadic(high, precision, up=True))
    )
