"""AIM, or independent 1-way marginals where a private count says the data are too small for AIM.

On small data (few rows per unit of noise) AIM's rounds add more noise than structure, and zCDP, converted
at a small delta, makes AIM's Gaussian 1-ways noisier than Laplace's at the same epsilon (with fewer than
epsilon^2 / (4 rho) columns: 21 at delta 1e-9). There the simplest private generator wins: each column's
1-way marginal with Laplace noise, the columns independent (docs/benchmarks.md, "Issue 38: never worse than
independent 1-way marginals").

So the rows are counted first (discrete Laplace, sensitivity K) with the epsilon whose zCDP cost,
epsilon_c^2 / 2, is ``COUNT_SHARE`` of rho(epsilon, delta); from that noisy count n and AIM's rho (the rest),
z = n sqrt(2 rho) / K: rows per unit of the noise of a measurement that would spend all of rho. z's own noise
is then Laplace of scale sqrt(2 rho) / epsilon_c: about 14 rows per unit of noise (more where delta is near
1/2, and the count's epsilon capped). Under ``SMALL_Z``, the 1-ways are measured with the rest of epsilon
(``independent_one_ways``: each column's noisy counts read two ways, under ``SMOOTH_Z`` smoothed towards
uniform where their noise swamps them, and through an empirical Bayes prior pooled over all columns' cells,
the two estimates averaged); otherwise AIM runs with the rest of rho. Both thresholds were chosen on the
tuning half of the benchmark's tables (benchmarks/bench_synth.py), never the other half, as issue 16's
defaults were.

Where the release names a ``target`` (the column its rows will be used to predict), the 1-ways would teach a
model of it nothing: under ``SMALL_Z_TARGET`` the path for small data is ``naive_bayes`` instead (the target's
2-way marginal with each other column, the same epsilon and smoothing), chosen by the same released count; that
threshold was chosen on the tuning half too, by what a classifier trained on the synthetic rows scores on real
rows held out (benchmarks/bench_tstr.py), AIM keeping the ties (it keeps the other columns' dependence too).

Privacy: (epsilon, delta)-DP, with at most K rows per unit. The independent path (and naive Bayes's) is pure
epsilon-DP (the count's epsilon and the 1-ways' add up); the AIM path is rho(epsilon, delta)-zCDP (the count's
epsilon^2 / 2 and AIM's rho add up), hence (epsilon, delta)-DP. The path is a function of the released count alone: let
M_ind and M_aim run the count and then one path whatever the count, and S_ind, S_aim be the outputs in a set S
whose count picks that path. Then P[M(D) in S] = P[M_ind(D) in S_ind] + P[M_aim(D) in S_aim], each at most
e^epsilon times its value on a neighbour D' (plus delta, once: M_ind has none), so M is (epsilon, delta)-DP.
It is not rho-zCDP (the pure path is only epsilon^2 / 2-zCDP): it is charged as an (epsilon, delta)-DP
release.
"""

from __future__ import annotations

import math

import numpy as np

from beam_expmech import parameters
from beam_expmech.accounting import Release, epsilon_to_zcdp
from beam_expmech.mechanisms.discrete_laplace import discrete_laplace_mechanism
from beam_expmech.mechanisms.randomness import RandomLike, RandomSource, random_source
from beam_expmech.synth import Progress, SynthesisResult, aim, check_workload, naive_bayes, normalised, sqrt_split
from beam_expmech.synth.deconvolution import posterior_medians
from beam_expmech.synth.mwem import FactoredModel

COUNT_SHARE = 0.005  # of rho(epsilon, delta), on the count that chooses (epsilon_c 1.2% of epsilon at 1e-9)
COUNT_EPSILON = 0.02  # of epsilon, at most, on that count
MAX_NOISE_SCALE = 2.0**40  # K / epsilon of a Laplace draw, at most: its noise stays far inside int64
SMALL_Z = 96  # the tuning half's 1-ways won at z 76 and under, AIM at 120 and over: about their geometric mean
SMALL_Z_TARGET = 900  # with a target: on the tuning half naive Bayes led AIM's AUC by over 0.01 in 10 of the 12
# cells at z 881 and under (a tie at 370; at 6.6 both near a coin's 0.5), in none of the 6 at 938 and over
SMOOTH_Z = 40  # under it, the 1-ways' noisy counts are smoothed towards uniform, the more the smaller z
MEDIANS_WEIGHT = 0.5  # of the 1-ways' posterior medians in each column's estimate (the rest: clipped, smoothed)


def aim_or_independent(
    marginals: dict[tuple[str, ...], np.ndarray],
    domain: dict[str, int],
    *,
    epsilon: float,
    delta: float,
    max_rows: int = 1,
    target: str | None = None,
    rng: RandomLike = None,
    progress: Progress | None = None,
    **aim_options,
) -> SynthesisResult:
    """The generator the data's noisy size calls for (module docstring): AIM, or ``independent_one_ways``.

    ``marginals`` are the workload's true counts ({columns: counts shaped by their domains}); ``aim_options``
    go to ``aim.aim`` (rounds, ordered, ...). The result's ``generator`` says which ran (a function of the
    released count). Privacy: (``epsilon``, ``delta``)-DP, at most ``max_rows`` rows per unit.
    """
    check_parameters(domain, epsilon=epsilon, delta=delta, max_rows=max_rows, target=target)
    check_workload(marginals, domain)
    if target is not None and any(len(m) < 2 for m in marginals):
        raise ValueError("auto: a target needs a workload of 2-way marginals or wider (its naive Bayes counts them)")
    count_epsilon, rho = count_and_rho(epsilon, delta)
    source = random_source(rng)
    rows = int(next(iter(marginals.values())).sum())
    count = discrete_laplace_mechanism(np.array([rows]), epsilon=count_epsilon, sensitivity=max_rows, rng=source)
    released = Release.pure(count_epsilon, "rows counted, to choose the generator")
    noisy = float(count[0])
    z = max(noisy, 0.0) * math.sqrt(2 * rho) / max_rows
    small = dict(epsilon=epsilon - count_epsilon, max_rows=max_rows, count=(noisy, count_epsilon),
                 smoothing=max(0.0, 1 - z / SMOOTH_Z), source=source)  # fmt: skip
    if target is not None and z < SMALL_Z_TARGET:
        result = naive_bayes.naive_bayes(marginals, domain, target=target, **small)
    elif target is None and z < SMALL_Z:
        result = independent_one_ways(marginals, domain, **small)
    else:
        result = aim.aim(marginals, domain, rho=rho, max_rows=max_rows, rng=source, progress=progress, **aim_options)
        result.generator = "aim"
    result.releases.insert(0, released)
    return result


def check_parameters(
    domain: dict[str, int], *, epsilon: float, delta: float, max_rows: int = 1, target: str | None = None
) -> None:
    """Every check auto makes from public parameters, before any budget is spent: a ValueError where the count
    or a 1-way would get no epsilon or more noise than an int64 count can carry, or AIM no rho (an epsilon too
    small or too large for its delta)."""
    epsilon = parameters.positive_finite(epsilon, "epsilon")
    delta = parameters.probability(delta, "delta")
    max_rows = parameters.count(max_rows, "max_rows")
    nothing = f"auto: epsilon={epsilon:g} at delta={delta:g} leaves its count or AIM nothing to spend"
    try:
        count_epsilon, rho = count_and_rho(epsilon, delta)
    except (ValueError, OverflowError):  # no rho fits, or it overflows
        raise ValueError(nothing) from None
    if target is not None and (target not in domain or len(domain) < 2):
        raise ValueError(f"auto: the target {target!r} must be one of the columns, beside at least one other")
    shares = sqrt_split(domain, epsilon - count_epsilon)
    if target is not None:
        shares = naive_bayes.shares(domain, target, epsilon - count_epsilon)
    least = min(shares.values())
    if not (math.isfinite(rho) and rho > 0 and count_epsilon > 0 and least > 0):
        raise ValueError(nothing)
    if max_rows / min(count_epsilon, least) > MAX_NOISE_SCALE:
        raise ValueError(f"auto: epsilon={epsilon:g} is too small for its 1-way marginals' noise: use a larger one")


def count_and_rho(epsilon: float, delta: float) -> tuple[float, float]:
    """The count's epsilon, whose zCDP cost epsilon_c^2 / 2 is ``COUNT_SHARE`` of rho(epsilon, delta) but at most
    ``COUNT_EPSILON`` of epsilon (a delta near 1/2 makes rho large beside epsilon^2), and the rest of that rho,
    AIM's (public parameters): each path keeps most of its budget."""
    rho = epsilon_to_zcdp(epsilon, delta=delta)
    count_epsilon = min(math.sqrt(2 * COUNT_SHARE * rho), COUNT_EPSILON * epsilon)
    return count_epsilon, rho - count_epsilon**2 / 2


def independent_one_ways(
    marginals: dict[tuple[str, ...], np.ndarray],
    domain: dict[str, int],
    *,
    epsilon: float,
    max_rows: int,
    count: tuple[float, float],
    smoothing: float = 0.0,
    medians_weight: float = MEDIANS_WEIGHT,
    source: RandomSource,
) -> SynthesisResult:
    """Each column's 1-way marginal with discrete Laplace noise, the columns independent: pure ``epsilon``-DP.

    Column c gets epsilon in proportion to sqrt(size_c) (``sqrt_split``). The size is the inverse-variance
    weighted mean of ``count`` ((noisy count, its epsilon), released before) and the columns' noisy sums. Each
    column's distribution is a weighted mean of two estimates from its noisy counts: clipped at 0, ``smoothing`` times
    the noise's scale K / epsilon_c added to each (where noise swamps the counts, towards uniform), normalised;
    and their empirical Bayes posterior medians (``posterior_medians``: near 0 for the codes off a column's
    few common ones, where the smoothing would lift them), weighted ``medians_weight``. Both are post-processing;
    their mean (``MEDIANS_WEIGHT``) was chosen on the tuning half of the benchmark's tables, where it beat either
    alone (docs/benchmarks.md, "the independent path's 1-ways through an empirical Bayes prior").
    """
    smoothing = parameters.non_negative_finite(smoothing, "smoothing")  # checked before any noise is drawn
    medians_weight = parameters.non_negative_finite(medians_weight, "medians_weight")
    if medians_weight > 1:  # a weight over 1 would give some codes negative probabilities
        raise ValueError(f"medians_weight must be in [0, 1], got {medians_weight!r}")
    noisy_count, count_epsilon = count
    sums, variances = [noisy_count], [2 * (max_rows / count_epsilon) ** 2]
    noisy, scales, releases = {}, {}, []
    for column, share in sqrt_split(domain, epsilon).items():
        noisy[column] = discrete_laplace_mechanism(
            aim.marginal_from(marginals, (column,)), epsilon=share, sensitivity=max_rows, rng=source
        )
        releases.append(Release.pure(share, f"1-way marginal of {column}"))
        scales[column] = max_rows / share
        sums.append(float(noisy[column].sum()))
        variances.append(domain[column] * 2 * scales[column] ** 2)
    rows = np.average(sums, weights=1 / np.array(variances))
    medians = posterior_medians(noisy, scales, rows=rows)
    components = []
    for column, counts in noisy.items():
        smoothed = normalised(np.maximum(counts, 0).astype(np.float64) + smoothing * scales[column])
        components.append(((column,), (1 - medians_weight) * smoothed + medians_weight * medians[column]))
    model = FactoredModel(dict(domain), components)
    return SynthesisResult(model, [(c,) for c in domain], releases, max(1, round(rows)), generator="independent")
