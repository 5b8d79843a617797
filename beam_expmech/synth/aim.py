"""AIM (McKenna, Mullins, Sheldon, Miklau 2022): adaptive, budget-aware marginal selection, rho-zCDP.

The generator sees the data only through the true counts of a workload of marginals W, and
touches those only through mechanisms. With at most K rows per privacy unit (L1 and L2
sensitivity of any marginal: K):

1. a share of rho measures every 1-way marginal with discrete Gaussian noise: by default a tenth;
   then, by how noisy the 1-ways would be if they had all of rho (``one_way_error``, from the data's
   size estimated from those noisy marginals), they are measured again: to a quarter of rho in all
   from ``NOISY_ONE_WAYS``, rising to three quarters over ``VERY_NOISY_ONE_WAYS``, where noisy
   marginals of more columns would mostly add noise (``one_way_shares``);
   codes whose estimated count is under ``RARE`` times its noise are then merged, one merged code
   a column (as MST does: ``compression``, post-processing), and every later measurement counts
   rows on the merged codes: a row is still in one cell of a marginal, and fewer cells carry less
   noise;
2. each round, the exponential mechanism picks a marginal r from the downward closure of W,
   score w_r (||M_r - N p_r||_1 - sqrt(2/pi) sigma n_r): the model's error on r minus the
   error the measurement's own noise would leave (n_r cells), weighted by
   w_r = sum over s in W of |r & s|; sensitivity K max_r w_r (M_r moves by K in L1; N, the
   model's public total, does not move). The chosen marginal is measured with discrete
   Gaussian noise and the graphical model refitted (post-processing);
3. when a round's measurement barely moved the model, sigma halves and the selection epsilon
   doubles (the budget per round quadruples); the last round spends whatever is left.

Only marginals that keep the model under ``max_cells * (rho spent / rho)`` cells are
candidates, a rule that depends on public parameters and earlier outputs only; what the run
can hold at most is known from public parameters (``check_parameters``).

Privacy: rho-zCDP in all (each measurement K^2 / (2 sigma^2), each selection epsilon^2 / 8;
the rounds' sum never exceeds rho). Scores are exact integers (units of 2^-20 counts), so the
exponential mechanism samples exactly; the noise is exact discrete Gaussian.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from beam_expmech import parameters
from beam_expmech.accounting import Release
from beam_expmech.mechanisms import discrete_gaussian
from beam_expmech.mechanisms.exponential import exponential_mechanism
from beam_expmech.mechanisms.randomness import RandomLike, RandomSource, random_source
from beam_expmech.synth import (
    EXACT_CELL_BYTES,
    Progress,
    SynthesisResult,
    check_memory,
    check_workload,
    workload_cells,
)
from beam_expmech.synth.compression import RARE, SMOOTHING, CompressedModel, DomainCompression
from beam_expmech.synth.graphical_model import Columns, GraphicalModel, Measurement, model_cells

_FIXED = 20  # scores in units of 2^-20 counts: int64 cells up to 2^43 rows
_SELECT_SHARE = 0.1  # of each round's rho, as in AIM
# Defaults chosen on half of the benchmark's tables by benchmarks/tune_synth.py's rule (issue 16):
# The 1-ways' share of rho, by one_way_error (rules before 2026-12-07 read the rows per unit of noise instead):
FIRST_ONE_WAY_SHARE = 0.1  # of rho, on the 1-way marginals first: all they get where they are precise
ONE_WAY_SHARE = 0.25  # in all, from NOISY_ONE_WAYS to the bottom of VERY_NOISY_ONE_WAYS
SMALL_DATA_ONE_WAY_SHARE = 0.75  # in all, from the top of VERY_NOISY_ONE_WAYS (0.9 until 2026-12-04)
NOISY_ONE_WAYS = 0.3  # one_way_error from which the 1-ways get ONE_WAY_SHARE
# one_way_error over which the share rises from ONE_WAY_SHARE to SMALL_DATA_ONE_WAY_SHARE, linearly in its log
# (a step at 1.0 until 2026-12-07: data near it took either share by the noise of its estimated size)
VERY_NOISY_ONE_WAYS = (0.7, 1.1)
ONE_WAY_MEASUREMENTS = 2  # of each 1-way at most, by one_way_shares (three until 2026-12-07)
ROUNDS_PER_COLUMN = 16  # 4 from 2026-12-02, 16 again with rare codes merged (2026-12-03)
# A refit's steps, each a few dozen passes over the model's cells: at most FIT_WORK / cells (the last fit's
# FINAL_FIT_WORK / cells), binding on models over 200,000 and 100,000 cells only (where they reach 250 and 2,000
# steps); never under MIN_FIT_STEPS (a floor for smaller work bounds: at MAX_CELLS the defaults allow 25 and 100).
# FINAL_FIT_WORK was 4e8 until 2026-12-07: half the last fit's steps on wide's models, the same error (benchmarks.md).
FIT_WORK = 5e7
FINAL_FIT_WORK = 2e8
MIN_FIT_STEPS = 10
_MODEL_COPIES = 16  # model-sized arrays a fit holds (potentials, marginals, their trials, counts, gradients, ...)
MAX_CELLS = 2_000_000  # of the model
_LOG = logging.getLogger(__name__)


def check_parameters(
    domain: dict[str, int],
    workload: Sequence[Sequence[str]],
    *,
    rounds: int | None = None,
    max_rows: int = 1,
    max_cells: int = MAX_CELLS,
) -> int:
    """Every check AIM makes from public parameters, in one place; the bytes the run will hold.

    The pipeline calls it before it spends any budget, ``aim`` before it starts. A ValueError
    when an argument is bad, the 1-way marginals alone exceed ``max_cells``, or the run would
    hold more than ``MAX_MEMORY``: the workload's counts, the true counts of its downward
    closure (and one merged copy at a time, while rare codes are merged), a fit's copies of a model
    of at most ``max_cells`` cells, and one measurement per column (up to ``ONE_WAY_MEASUREMENTS``) and per
    round (at most ``rounds`` + 1 rounds: each spends at least rho / rounds of the rest), each at
    most the largest candidate.
    """
    cells = workload_cells(domain, workload)
    rounds = parameters.count(rounds or ROUNDS_PER_COLUMN * len(domain), "rounds")
    parameters.count(max_rows, "max_rows")
    one_ways = model_cells(domain, [(c,) for c in domain])
    if one_ways > max_cells:
        raise ValueError(
            f"AIM: the 1-way marginals alone have {one_ways:,} cells, over the limit of {max_cells:,}: "
            "use fewer columns or smaller domains"
        )
    order = {c: i for i, c in enumerate(domain)}
    closure = [math.prod(domain[c] for c in r) for r in _closure_weights([tuple(s) for s in workload], order)]
    model = min(max_cells, math.prod(domain.values()))
    largest = min(max_cells, max(closure))
    measurements = (ONE_WAY_MEASUREMENTS * len(domain) + rounds + 1) * largest  # the 1-ways, then the rounds
    measurements += max(closure)  # a true marginal and its merged copy, while rare codes are merged
    arrays = 8 * (sum(cells) + sum(closure) + _MODEL_COPIES * model + measurements) + EXACT_CELL_BYTES * largest
    return check_memory(arrays, "AIM", "use fewer rounds or columns, or smaller domains")


def aim(
    marginals: dict[tuple[str, ...], np.ndarray],
    domain: dict[str, int],
    *,
    rho: float,
    max_rows: int = 1,
    max_cells: int = MAX_CELLS,
    rounds: int | None = None,
    iterations: int = 250,
    final_iterations: int = 2000,
    tolerance: float = 1.0,
    final_tolerance: float = 0.1,
    fit_work: float = FIT_WORK,
    final_fit_work: float = FINAL_FIT_WORK,
    one_way_share: float | None = None,
    rare: float | None = RARE,
    ordered: Collection[str] = (),
    smoothing: float = SMOOTHING,
    rng: RandomLike = None,
    progress: Progress | None = None,
) -> SynthesisResult:
    """Run AIM over the workload ``marginals`` ({columns: true counts shaped by their domains}).

    ``one_way_share`` of rho measures the 1-way marginals; by default (None) the rule of
    ``one_way_shares``. Codes whose estimated 1-way count is under ``rare`` times its noise scale are
    merged (None: never; ``compression``), and spread back over their codes by the 1-way estimates, on the
    ``ordered`` columns (a number's bins, in order) smoothed with weight ``smoothing``. ``rounds`` (default
    ``ROUNDS_PER_COLUMN`` d) sets the first rounds' budget, the rest of rho over ``rounds`` each; annealing
    usually ends the run sooner.
    Each refit runs at most ``iterations`` steps (the last one ``final_iterations``), and at most ``fit_work``
    (``final_fit_work``) divided by the model's cells, but at least ``MIN_FIT_STEPS`` (or its iterations, if
    fewer); the first fit, of the 1-way measurements, is not bounded by work. It stops sooner once its
    steps gain less than ``tolerance`` nats of the measurements' log-likelihood each
    (``final_tolerance`` for the last: the released model); see ``GraphicalModel.fit``.
    ``progress`` is told the rho spent after each round, of rho (``Progress``; the last call: all of it: rho,
    rho); the rounds depend on the noisy measurements only, which zCDP's composition counts as released.
    Privacy: rho-zCDP with at most
    ``max_rows`` rows per unit.

    The 1-way shares and the rounds are defaults of 2026-12-02 (until then half of rho and 16 d),
    chosen on half of the benchmark's tables, never the other half (benchmarks/tune_synth.py); the
    merging of rare codes and 16 rounds a column (4 on 2026-12-02) by the same rule on 2026-12-03; the
    small data's share (0.9 until then) on 2026-12-04, once merged codes were spread smoothly; the first
    share and the thresholds, on ``one_way_error`` instead of the rows per unit of noise, on 2026-12-07, and
    later that day the ramp in place of a step at 1.0 (``one_way_share_for``).

    The tolerances are defaults new on 2026-12-02 (until then every refit ran all its steps), so
    that a 15-column table of UCI Adult's layout runs in minutes (issue 16). They were set from
    what a nat of likelihood means, not tuned on any benchmark's error; they change outputs (a
    shorter refit moves the model less, so annealing comes sooner) but not what is spent or its
    sensitivity: refits are post-processing. ``tolerance=0, final_tolerance=0`` gives the old runs.
    The work bounds (new on 2026-12-07) cap the steps on large models only (a time bound, issue 38:
    a 15-column table at epsilon 3 grows its model to a million cells); on the benchmark's tables
    they bind on the wide one and on randhie at epsilon 3 (its errors unchanged), and change no output
    elsewhere. ``fit_work=math.inf, final_fit_work=math.inf`` lifts them.
    """
    rho = parameters.positive_finite(rho, "rho")
    if one_way_share is not None and not 0 < parameters.positive_finite(one_way_share, "one_way_share") <= 0.99:
        raise ValueError(f"one_way_share must be above 0 and at most 0.99 (the rounds' share), got {one_way_share!r}")
    if rare is not None:
        rare = parameters.non_negative_finite(rare, "rare")
    smoothing = parameters.non_negative_finite(smoothing, "smoothing")
    if isinstance(ordered, str):  # its characters are not columns
        raise ValueError("ordered must be a collection of column names, not one string")
    ordered = frozenset(ordered)  # read once: an iterator would be used up by the check below
    unknown = [c for c in ordered if c not in domain]
    if unknown:
        raise ValueError(f"ordered column {unknown[0]!r} is not in the domain")
    tolerance = parameters.non_negative_finite(tolerance, "tolerance")
    final_tolerance = parameters.non_negative_finite(final_tolerance, "final_tolerance")
    iterations = parameters.count(iterations, "iterations")
    final_iterations = parameters.count(final_iterations, "final_iterations")
    fit_work = parameters.positive(fit_work, "fit_work")
    final_fit_work = parameters.positive(final_fit_work, "final_fit_work")
    check_parameters(domain, list(marginals), rounds=rounds, max_rows=max_rows, max_cells=max_cells)
    check_workload(marginals, domain)
    rounds = rounds or ROUNDS_PER_COLUMN * len(domain)
    weights = _closure_weights(list(marginals), {c: i for i, c in enumerate(domain)})
    run = _AimRun(domain, max_rows, random_source(rng), weights, {r: marginal_from(marginals, r) for r in weights})
    for share in [one_way_share] if one_way_share is not None else one_way_shares(run, rho):
        run.measure_one_ways(share * rho)
    if rare is not None:
        run.compress(rare, ordered, smoothing)
    run.fit_first_model(iterations, tolerance)
    sigma, epsilon = _round_parameters((rho - run.spent()) / rounds, max_rows)
    last = False
    while not last:
        spent = run.spent()
        if rho - spent < 2 * _spent_after(0.0, sigma, epsilon, max_rows):  # spend the rest in one last round
            sigma, epsilon = _round_parameters((rho - spent) * (1 - 1e-9), max_rows)
            last = True
        limit = max_cells * _spent_after(spent, sigma, epsilon, max_rows) / rho  # cells grow with rho spent
        chosen = run.select(run.candidates(limit), sigma, epsilon)
        fit = (final_iterations, final_fit_work, final_tolerance) if last else (iterations, fit_work, tolerance)
        if run.measure_and_refit(chosen, sigma, *fit):  # barely moved: anneal
            sigma, epsilon = sigma / 2, epsilon * 2
        _LOG.debug("AIM measured %s with sigma %.4g; %.0f%% of rho spent", chosen, sigma, 100 * run.spent() / rho)
        if progress is not None:
            progress("AIM: rho spent", rho if last else min(run.spent(), rho), rho)
    measured = [m.columns for m in run.measurements]
    model = run.model if run.compression is None else CompressedModel(run.model, run.compression)
    return SynthesisResult(model, measured, run.releases, max(1, round(run.model.total)))


@dataclass
class _AimRun:
    """One run's state. Only ``measure`` and ``select`` read the true counts; the rest is public."""

    domain: dict[str, int]
    max_rows: int
    source: RandomSource
    weights: dict[Columns, int]  # the candidates: the workload's downward closure, with their weights
    truth: dict[Columns, np.ndarray]  # their true counts
    releases: list[Release] = field(default_factory=list)
    measurements: list[Measurement] = field(default_factory=list)
    model: GraphicalModel = field(init=False)
    cells_with: dict = field(default_factory=dict)  # candidate -> cells of the model extended by it (0: it fits)
    compression: DomainCompression | None = None  # once rare codes are merged

    def spent(self) -> float:
        """The rho released so far."""
        return math.fsum(r.rho for r in self.releases)

    def measure(self, columns: Columns, sigma: float) -> None:
        """The discrete Gaussian mechanism on the true counts of ``columns``: rho K^2 / (2 sigma^2)."""
        noisy = discrete_gaussian.discrete_gaussian_mechanism(
            self.truth[columns], sigma=sigma, sensitivity=self.max_rows, rng=self.source
        )
        self.releases.append(
            Release.zcdp(discrete_gaussian.rho(sigma=sigma, sensitivity=self.max_rows), f"AIM {columns}")
        )
        self.measurements.append(Measurement(columns, noisy.astype(np.float64), sigma))

    def measure_one_ways(self, rho: float) -> None:
        """Measure every column, ``rho`` in all.

        Column c gets a share of rho proportional to size_c^(2/3): that minimises the summed
        expected L1 error sum_c size_c sigma_c.
        """
        shares = {c: size ** (2 / 3) for c, size in self.domain.items()}
        for c in self.domain:  # sigma rounded up, as a round's: never more than rho in all (review 9)
            self.measure((c,), self.max_rows * math.sqrt(sum(shares.values()) / (2 * rho * shares[c])) * (1 + 1e-12))

    def fit_first_model(self, iterations: int, tolerance: float) -> None:
        """The model of the 1-way measurements (post-processing; a column measured twice counts twice)."""
        self.model = GraphicalModel(self.domain, [(c,) for c in self.domain], _total(self.measurements))
        self.model.fit(self.measurements, iterations=iterations, tolerance=tolerance)

    def compress(self, rare: float, ordered: frozenset[str], smoothing: float) -> None:
        """Merge each column's codes whose count, the inverse-variance weighted mean of its 1-way measurements,
        is under ``rare`` times that mean's noise scale (post-processing); the true counts and the measurements
        move onto the merged codes (``DomainCompression.of_estimates``: ``ordered``, ``smoothing``)."""
        estimates, noise = {}, {}
        for c in self.domain:
            measured = [m for m in self.measurements if m.columns == (c,)]
            weight = math.fsum(1 / m.sigma**2 for m in measured)
            estimates[c] = sum(m.values / m.sigma**2 for m in measured) / weight
            noise[c] = weight**-0.5
        compression = DomainCompression.of_estimates(estimates, noise, rare=rare, ordered=ordered, smoothing=smoothing)
        if not compression.merges():
            return
        self.compression, self.domain = compression, compression.domain
        for r in self.truth:  # one at a time: at most one marginal held twice
            self.truth[r] = compression.counts(self.truth[r], r)
        self.measurements = [compression.measurement(m) for m in self.measurements]

    def candidates(self, limit: float) -> list[Columns]:
        """The marginals that keep the model within ``limit`` cells (public: the model's structure)."""
        if self.cells_with.get(None) != self.model.cliques:  # the model's structure changed: sizes change
            self.cells_with = {None: self.model.cliques}
        for r in self.weights:
            if r not in self.cells_with:
                holds = self.model.clique_holding(r) is not None
                self.cells_with[r] = 0 if holds else model_cells(self.domain, [*self.model.cliques, r])
        return [r for r in self.weights if self.cells_with[r] <= limit]

    def select(self, candidates: list[Columns], sigma: float, epsilon: float) -> Columns:
        """The exponential mechanism over ``candidates`` with AIM's score: rho epsilon^2 / 8."""
        chosen = _select(
            candidates,
            self.weights,
            self.truth,
            self.model,
            sigma=sigma,
            epsilon=epsilon,
            max_rows=self.max_rows,
            rng=self.source,
        )
        self.releases.append(Release.exponential_mechanism(epsilon, f"AIM select {chosen}"))
        return chosen

    def measure_and_refit(self, chosen: Columns, sigma: float, iterations: int, work: float, tolerance: float) -> bool:
        """Measure ``chosen`` (as ``measure``) and refit (post-processing) for at most ``iterations`` steps and
        ``work`` / cells; whether it barely moved the model."""
        before = self.model.project(chosen)
        self.measure(chosen, sigma)
        if self.model.clique_holding(chosen) is None:
            self.model = self.model.extended([chosen])
        self.model.total = _total(self.measurements)
        steps = min(iterations, max(MIN_FIT_STEPS, int(min(work / self.model.cells, iterations))))
        self.model.fit(self.measurements, iterations=steps, tolerance=tolerance)
        return np.abs(self.model.project(chosen) - before).sum() <= math.sqrt(2 / math.pi) * sigma * before.size


def one_way_shares(run: _AimRun, rho: float) -> Iterator[float]:
    """The default 1-way measurements' shares of rho, the second chosen once the first is measured.

    First ``FIRST_ONE_WAY_SHARE``. Then ``one_way_error`` at the data's size estimated from those
    measurements (post-processing), read once: from ``NOISY_ONE_WAYS`` the 1-ways again, to
    ``one_way_share_for`` that error in all. Where the 1-ways are noisy a round's noisy marginal of several
    columns mostly adds noise; where they are precise the rounds gain more from rho than they do
    (tune_synth.py). The choice reads released measurements and public parameters only.
    """
    yield FIRST_ONE_WAY_SHARE
    error = one_way_error(run.domain, rows=_total(run.measurements), rho=rho, max_rows=run.max_rows)
    if error >= NOISY_ONE_WAYS:
        yield one_way_share_for(error) - FIRST_ONE_WAY_SHARE


def one_way_share_for(error: float) -> float:
    """The 1-ways' share of rho in all at a ``one_way_error`` of at least ``NOISY_ONE_WAYS``: ``ONE_WAY_SHARE``
    up to the bottom of ``VERY_NOISY_ONE_WAYS``, ``SMALL_DATA_ONE_WAY_SHARE`` from its top, between them
    linear in log(error). A ramp, not a step: the error is read at an estimated size, and data near a step
    took either share by that estimate's noise (docs/benchmarks.md, "the 1-way share's ramp")."""
    low, high = VERY_NOISY_ONE_WAYS
    rise = min(1.0, max(0.0, math.log(error / low) / math.log(high / low)))
    return ONE_WAY_SHARE + rise * (SMALL_DATA_ONE_WAY_SHARE - ONE_WAY_SHARE)


def one_way_error(domain: dict[str, int], *, rows: float, rho: float, max_rows: int = 1) -> float:
    """The expected L1 error of the 1-way marginals over ``rows``, were all of rho to measure them.

    ``measure_one_ways`` gives column c the share size_c^(2/3) / S of rho, S = sum of size_c^(2/3), so
    sigma_c = K sqrt(S / (2 rho size_c^(2/3))); a cell's expected |noise| is sqrt(2 / pi) sigma_c, and
    the sum over every cell of every column is sqrt(2 / pi) K S^(3/2) / sqrt(2 rho). Public with ``rows``
    a released estimate: the sizes are the declared domain's.
    """
    rows, rho = parameters.positive_finite(rows, "rows"), parameters.positive_finite(rho, "rho")
    spread = math.fsum(size ** (2 / 3) for size in domain.values()) ** 1.5
    return math.sqrt(2 / math.pi) * max_rows * spread / (rows * math.sqrt(2 * rho))


def _total(measurements: list[Measurement]) -> float:
    """The size of the data, estimated from the noisy measurements (post-processing).

    Each measurement's sum is an unbiased estimate with variance sigma^2 times its noisy cells;
    their inverse-variance weighted mean has the least variance.
    """
    weights = np.array([1 / (m.sigma**2 * m.noisy_cells()) for m in measurements])
    sums = np.array([m.values.sum() for m in measurements])
    return max(1.0, float((weights * sums).sum() / weights.sum()))


def _spent_after(spent: float, sigma: float, epsilon: float, max_rows: int) -> float:
    """The rho spent once a round measuring with ``sigma`` and selecting with ``epsilon`` follows ``spent``."""
    return spent + max_rows**2 / (2 * sigma**2) + epsilon**2 / 8


def _round_parameters(round_rho: float, max_rows: int) -> tuple[float, float]:
    """(sigma, epsilon) that spend ``round_rho``: 90% on the measurement, 10% on the selection."""
    sigma = max_rows * math.sqrt(1 / (2 * (1 - _SELECT_SHARE) * round_rho))
    epsilon = math.sqrt(8 * _SELECT_SHARE * round_rho)
    return sigma * (1 + 1e-12), epsilon * (1 - 1e-12)  # round towards spending less


def _closure_weights(workload: list[tuple[str, ...]], order: dict[str, int]) -> dict[tuple[str, ...], int]:
    """Every non-empty subset r of a workload marginal, with weight sum over s in W of |r & s|."""
    closure = {
        tuple(sorted(r, key=order.__getitem__))
        for s in workload
        for k in range(1, len(s) + 1)
        for r in itertools.combinations(s, k)
    }
    return {r: sum(len(set(r) & set(s)) for s in workload) for r in sorted(closure, key=lambda r: (len(r), r))}


def marginal_from(marginals: dict[tuple[str, ...], np.ndarray], columns: tuple[str, ...]) -> np.ndarray:
    """The true counts on ``columns``, summed out of any workload marginal holding them."""
    holder = next(s for s in marginals if set(columns) <= set(s))
    counts = marginals[holder].sum(axis=tuple(i for i, c in enumerate(holder) if c not in columns))
    kept = [c for c in holder if c in columns]
    return np.transpose(counts, [kept.index(c) for c in columns]).astype(np.int64)


def scores(candidates, weights, truth, model: GraphicalModel, *, sigma: float, max_rows: int) -> tuple[list, int]:
    """AIM's score of each candidate in exact integers (units of 2^-20 counts), and their sensitivity.

    One unit with at most ``max_rows`` rows moves a true marginal by at most that much in L1,
    and everything else in the score is public, so a score moves by at most
    max_rows * w_r * 2^20.
    """
    values = []
    for r in candidates:
        # Public, and made safe as public values may be: a NaN or inf of the model would cast to INT64_MIN and
        # wrap the error below, whose sensitivity then holds no more (review 8). Counts up to 2^42 stay exact.
        projected = np.nan_to_num(model.project(r).ravel(), nan=0.0, posinf=0.0, neginf=0.0)
        model_counts = np.rint(np.clip(projected, 0.0, 2.0**42) * 2.0**_FIXED).astype(np.int64)
        error = int(np.abs(truth[r].ravel() * 2**_FIXED - model_counts).sum(dtype=object))
        bias = round(math.sqrt(2 / math.pi) * sigma * truth[r].size * 2**_FIXED)  # public
        values.append(weights[r] * (error - bias))
    return values, max_rows * max(weights[r] for r in candidates) * 2**_FIXED


def _select(candidates, weights, truth, model, *, sigma, epsilon, max_rows, rng) -> tuple[str, ...]:
    """The exponential mechanism over ``candidates`` with AIM's score (not monotone: an error)."""
    values, sensitivity = scores(candidates, weights, truth, model, sigma=sigma, max_rows=max_rows)
    index = exponential_mechanism(np.array(values, dtype=object), epsilon=epsilon, sensitivity=sensitivity, rng=rng)
    return candidates[index]
