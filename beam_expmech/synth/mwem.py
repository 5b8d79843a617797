"""MWEM (Hardt, Ligett and McSherry 2012) on a factored model, pure epsilon-DP.

The generator sees the data only through the true counts of a workload of marginals, and
touches those only through mechanisms. A share of epsilon measures the 1-way marginals (the
start, and the noisy size n~); each of T rounds spends epsilon' / (2T) of the rest twice:

1. select: the exponential mechanism picks the marginal r the model answers worst, score
   ||M_r - n P_r||_1 (M_r the data's counts, P_r the model's distribution, n the data's size);
   one unit with K rows moves M_r by K in L1 and n P_r by K, so the sensitivity is 2K;
2. measure: the discrete Laplace mechanism adds noise of scale K / (epsilon / 2T) to every
   cell of M_r (L1 sensitivity K);
3. update (post-processing): multiplicative weights moves the model towards every marginal
   measured so far, keeping of each only the cells whose noisy counts stand out of the noise.

The model is a product of independent components, each a full histogram over a few columns
(MWEM's factored representation): a measured marginal merges the components it touches. A
marginal whose merge would exceed ``max_cells`` is not a candidate in that round (the choice
depends only on earlier private outputs), so memory never runs out, whatever the data; what
the run can hold at most is known from public parameters (``check_parameters``).

Scores are exact integers: the model's probabilities are rounded to multiples of 2^-30 (a
public function of public state) before the data enters the score.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from beam_expmech import parameters
from beam_expmech.accounting import Release
from beam_expmech.mechanisms.discrete_laplace import discrete_laplace_mechanism
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
from beam_expmech.synth.sampling import allocate, split_cells

_FIXED = 30  # model probabilities as integers in units of 2^-30 inside the scores
_UPDATE_PASSES = 5
MAX_CELLS = 1_000_000  # of any component of the model, and of any workload marginal
DEFAULT_ROUNDS = 20


@dataclass
class FactoredModel:
    """A distribution over rows: independent components, each a normalised histogram over its columns."""

    domain: dict[str, int]
    components: list[tuple[tuple[str, ...], np.ndarray]] = field(default_factory=list)

    def marginal(self, columns: Sequence[str]) -> np.ndarray:
        """The model's distribution over ``columns`` (axes in that order)."""
        factors, axes = [], []
        for names, table in self.components:
            keep = [c for c in names if c in columns]
            if not keep:
                continue
            drop = tuple(i for i, c in enumerate(names) if c not in columns)
            factors.append(table.sum(axis=drop) if drop else table)
            axes.append(keep)
        letters = {c: chr(ord("a") + i) for i, c in enumerate(columns)}
        spec = (
            ",".join("".join(letters[c] for c in keep) for keep in axes) + "->" + "".join(letters[c] for c in columns)
        )
        return np.einsum(spec, *factors)

    def merged_size(self, columns: Sequence[str]) -> int:
        """Cells of the component a marginal over ``columns`` would create."""
        names = {c for comp, _ in self.components if set(comp) & set(columns) for c in comp}
        return math.prod(self.domain[c] for c in names)

    def merge(self, columns: Sequence[str]) -> int:
        """Join the components that ``columns`` touch into one (their product); its index."""
        touched = [i for i, (names, _) in enumerate(self.components) if set(names) & set(columns)]
        if len(touched) == 1:
            return touched[0]
        names = tuple(c for i in touched for c in self.components[i][0])
        joined = self.marginal(names)
        self.components = [comp for i, comp in enumerate(self.components) if i not in touched]
        self.components.append((names, joined))
        return len(self.components) - 1

    def sample(self, rows: int, source: RandomSource) -> dict[str, np.ndarray]:
        """``rows`` synthetic rows, component by component, each by one systematic sample in a random order
        (``sampling.allocate``; post-processing, OS randomness by default)."""
        out = {}
        for names, table in self.components:
            cells = allocate(table.reshape(1, -1), np.zeros(rows, np.int64), source)
            out.update(zip(names, split_cells(cells, table.shape), strict=True))  # each in its code_dtype
        return {c: out[c] for c in self.domain}


def check_parameters(
    domain: dict[str, int],
    workload: Sequence[Sequence[str]],
    *,
    rounds: int = DEFAULT_ROUNDS,
    max_rows: int = 1,
    max_cells: int = MAX_CELLS,
    one_way_share: float = 0.5,
) -> int:
    """Every check MWEM makes from public parameters, in one place; the bytes the run will hold.

    The pipeline calls it before it spends any budget, ``mwem`` before it starts. A ValueError
    when an argument is bad, a workload marginal has more than ``max_cells`` cells, or the run
    would hold more than ``MAX_MEMORY``: the workload's counts, the model (at most one merged
    component of at most ``max_cells`` cells per round, beside the 1-way ones), a measured
    marginal per round, and one marginal scored or measured in Python integers.
    """
    cells = workload_cells(domain, workload)
    rounds = parameters.count(rounds, "rounds")
    parameters.count(max_rows, "max_rows")
    if not 0 < one_way_share < 1:
        raise ValueError(f"one_way_share must be strictly between 0 and 1, got {one_way_share!r}")
    largest = max(cells)
    if largest > max_cells:
        raise ValueError(
            f"MWEM: a workload marginal has {largest:,} cells, over the limit of {max_cells:,}: "
            "use fewer columns per marginal or smaller domains"
        )
    component = min(max_cells, math.prod(domain.values()))
    model = sum(domain.values()) + min(rounds, len(domain) // 2) * component
    arrays = 8 * (sum(cells) + model + 4 * component + rounds * largest) + EXACT_CELL_BYTES * largest
    return check_memory(arrays, "MWEM", "use fewer rounds, fewer columns per marginal or smaller domains")


def mwem(
    marginals: dict[tuple[str, ...], np.ndarray],
    domain: dict[str, int],
    *,
    epsilon: float,
    rounds: int = DEFAULT_ROUNDS,
    max_rows: int = 1,
    max_cells: int = MAX_CELLS,
    one_way_share: float = 0.5,
    min_signal: float = 8.0,
    rng: RandomLike = None,
    progress: Progress | None = None,
) -> SynthesisResult:
    """Run MWEM over the workload ``marginals`` ({columns: true counts shaped by their domains}).

    A share ``one_way_share`` of epsilon first measures every column's 1-way marginal (read
    off the workload; column c gets a share proportional to sqrt(its size), which minimises
    the summed expected L1 error) to start from an independent model instead of a uniform
    one, and gives the noisy size n~. The rest is split over at most ``rounds`` rounds: fewer
    when even the smallest marginal's expected noise (cells times the Laplace scale, in L1)
    would exceed n~ / ``min_signal`` (a rule on public values); with none, the rest of the
    budget measures the 1-way marginals again. On small data this keeps MWEM from trading
    good 1-way marginals for noise. ``progress`` (``Progress``) is told each round run, of the rounds (a public
    number), and all of them at the end (a round that would outgrow the memory cap stops the run sooner).
    Privacy: epsilon-DP (pure), with at most ``max_rows`` rows per unit.
    """
    epsilon = parameters.positive_finite(epsilon, "epsilon")
    workload = list(marginals)
    check_parameters(
        domain, workload, rounds=rounds, max_rows=max_rows, max_cells=max_cells, one_way_share=one_way_share
    )
    check_workload(marginals, domain)
    run = _MwemRun(marginals, domain, max_rows, random_source(rng))
    size = run.measure_one_ways(epsilon * one_way_share)
    rest = epsilon * (1 - one_way_share)
    smallest = min(math.prod(domain[c] for c in m) for m in workload)
    rounds = _affordable_rounds(rounds, smallest, rest=rest, max_rows=max_rows, size=size, min_signal=min_signal)
    if not rounds:
        size = run.measure_one_ways(rest)
    each = rest / (2 * rounds) if rounds else 0.0
    n = int(next(iter(marginals.values())).sum())  # used inside the score only
    for done in range(rounds):
        candidates = [c for c in workload if run.model.merged_size(c) <= max_cells]
        if not candidates:  # every useful marginal would outgrow the memory cap: stop spending
            break
        chosen = run.select(candidates, n=n, epsilon=each)
        noisy = run.measure(chosen, epsilon=each)
        run.update(chosen, noisy, scale=max_rows / each, size=size)
        if progress is not None and done + 1 < rounds:
            progress("MWEM: rounds", done + 1, rounds)
    if progress is not None:
        progress("MWEM: rounds", max(rounds, 1), max(rounds, 1))
    return SynthesisResult(run.model, run.measured, run.releases, max(1, round(size)))


@dataclass
class _MwemRun:
    """One run's state. Only ``measure_one_ways``, ``select`` and ``measure`` read the true counts."""

    marginals: dict[tuple[str, ...], np.ndarray]
    domain: dict[str, int]
    max_rows: int
    source: RandomSource
    model: FactoredModel = field(init=False)
    measured: list[tuple[str, ...]] = field(default_factory=list)
    releases: list[Release] = field(default_factory=list)
    targets: dict = field(default_factory=dict)  # {marginal: the distribution to fit}
    one_way: dict = field(default_factory=dict)  # {(column,): (noisy counts, their precision)}

    def measure_one_ways(self, epsilon: float) -> float:
        """The discrete Laplace mechanism on every column, ``epsilon`` in all; restart the model from them, return n~.

        Column c gets a share proportional to sqrt(its size); a column measured before is merged
        with its earlier measurement (post-processing).
        """
        weights = {c: math.sqrt(size) for c, size in self.domain.items()}
        for column in self.domain:
            column_epsilon = epsilon * weights[column] / sum(weights.values())
            holder = next(c for c in self.marginals if column in c)  # any marginal holding the column
            counts = self.marginals[holder].sum(axis=tuple(i for i, c in enumerate(holder) if c != column))
            values = discrete_laplace_mechanism(
                counts, epsilon=column_epsilon, sensitivity=self.max_rows, rng=self.source
            )
            self.releases.append(Release.pure(column_epsilon, f"MWEM 1-way {column}"))
            precision = column_epsilon**2  # 1 / variance of each cell, up to a common factor
            if (column,) in self.one_way:  # inverse-variance weighted mean of the two (post-processing)
                old, old_precision = self.one_way[(column,)]
                values = (old * old_precision + values * precision) / (old_precision + precision)
                precision += old_precision
            self.one_way[(column,)] = (values, precision)
        # n~ (a private output): the columns' noisy sums, weighted by the inverse of their variances
        sums = np.array([values.sum() for values, _ in self.one_way.values()])
        weights = np.array([precision / values.size for values, precision in self.one_way.values()])
        size = max(1.0, float((sums * weights).sum() / weights.sum()))
        for column in self.domain:
            self.targets[(column,)] = _project_to_simplex(self.one_way[(column,)][0] / size)
        self.model = FactoredModel(self.domain, [((c,), self.targets[(c,)]) for c in self.domain])
        return size

    def select(self, candidates: list, *, n: int, epsilon: float) -> tuple[str, ...]:
        """The exponential mechanism over ``candidates`` with MWEM's score: ``epsilon``."""
        chosen = _select(
            candidates, self.marginals, self.model, n=n, max_rows=self.max_rows, epsilon=epsilon, rng=self.source
        )
        self.releases.append(Release.exponential_mechanism(epsilon, f"MWEM select {chosen}"))
        return chosen

    def measure(self, chosen: tuple[str, ...], *, epsilon: float) -> np.ndarray:
        """The discrete Laplace mechanism on ``chosen``'s true counts: ``epsilon``."""
        noisy = discrete_laplace_mechanism(
            self.marginals[chosen], epsilon=epsilon, sensitivity=self.max_rows, rng=self.source
        )
        self.releases.append(Release.pure(epsilon, f"MWEM measure {chosen}"))
        self.measured.append(chosen)
        return noisy

    def update(self, chosen: tuple[str, ...], noisy: np.ndarray, *, scale: float, size: float) -> None:
        """Post-processing: fit the model to ``chosen``'s noisy counts (Laplace ``scale``) and every earlier target."""
        self.targets[chosen] = _target(noisy, scale, self.model.marginal(chosen), size)
        _update(self.model, chosen, self.targets)


def _affordable_rounds(rounds: int, cells: int, *, rest: float, max_rows: int, size: float, min_signal: float) -> int:
    """At most ``rounds``: as many as keep the expected L1 noise of measuring ``cells`` cells
    (cells times the Laplace scale K 2T / rest) within n~ / ``min_signal`` (post-processing)."""
    while rounds and cells * max_rows * 2 * rounds / rest > size / min_signal:
        rounds -= 1
    return rounds


def selection_scores(
    candidates: list, marginals: dict, model: FactoredModel, *, n: int, max_rows: int
) -> tuple[np.ndarray, int]:
    """Each candidate's score ||M_r - n P~_r||_1 in units of 2^-30 counts, and their sensitivity.

    One unit of K rows moves M_r by K in L1 and n by K, so n P~_r by at most K (2^30 + cells)
    units (P~ sums to 1 within half a unit per cell): the sensitivity is 2 K (2^30 + max cells).
    """
    scores = np.array([_score(marginals[c], model.marginal(c), n) for c in candidates], dtype=object)
    return scores, 2 * max_rows * (2**_FIXED + max(marginals[c].size for c in candidates))


def _select(candidates: list, marginals: dict, model: FactoredModel, *, n: int, max_rows: int, epsilon: float, rng):
    """The exponential mechanism over ``candidates`` with MWEM's score (not monotone: an error)."""
    scores, sensitivity = selection_scores(candidates, marginals, model, n=n, max_rows=max_rows)
    return candidates[exponential_mechanism(scores, epsilon=epsilon, sensitivity=sensitivity, rng=rng)]


def _score(true_counts: np.ndarray, model_probabilities: np.ndarray, n: int) -> int:
    """||M - n P~||_1 in units of 2^-30 counts, exactly (P~: the model rounded to 2^-30)."""
    fixed = np.rint(model_probabilities.ravel() * 2.0**_FIXED).astype(np.int64).astype(object)
    return int(np.abs(true_counts.ravel().astype(object) * 2**_FIXED - n * fixed).sum())


def _update(model: FactoredModel, chosen: tuple[str, ...], targets: dict) -> None:
    """Post-processing: move the component holding ``chosen`` onto every target marginal inside it.

    A multiplicative update with the largest step, iterative proportional fitting: each pass
    rescales the component so its marginal matches a target. The plain MWEM step
    exp((y - n P) / 2n) is too small to move sparse marginals at all.
    """
    index = model.merge(chosen)
    names, table = model.components[index]
    inside = [(c, target) for c, target in targets.items() if set(c) <= set(names)]
    for _ in range(_UPDATE_PASSES):
        for columns, target in inside:
            current = model.marginal(columns)
            ratio = (target + 1e-12) / (current + 1e-12)
            axes = [names.index(c) for c in columns]
            shape = [table.shape[i] if i in axes else 1 for i in range(len(names))]
            table = table * np.transpose(ratio, np.argsort(axes)).reshape(shape)
            table /= table.sum()
            model.components[index] = (names, table)


def _target(noisy: np.ndarray, scale: float, prior: np.ndarray, size: float) -> np.ndarray:
    """The distribution a measured marginal should have: its noisy counts where they stand out
    of the noise, the model's own shape (``prior``) for the rest of the mass (post-processing).

    A cell stands out if its noisy count exceeds scale * (ln(cells) + 2), which noise alone
    reaches in any cell with probability about e^-2 / 2. Keeping noisy values only there is
    what stops a marginal measured on few rows from replacing the model with noise.
    """
    significant = noisy >= scale * (math.log(noisy.size) + 2)
    measured = np.where(significant, noisy / size, 0.0)
    if measured.sum() >= 1 or significant.all():
        return _project_to_simplex(measured / max(measured.sum(), 1e-300) if significant.all() else measured)
    rest = np.where(significant, 0.0, prior)
    spread = rest / rest.sum() if rest.sum() > 0 else (~significant) / (~significant).sum()
    return measured + (1 - measured.sum()) * spread


def _project_to_simplex(v: np.ndarray) -> np.ndarray:
    """The probability vector nearest to ``v`` in L2 (sort-based, Duchi et al. 2008), same shape.

    Noise spread over empty cells falls under the threshold and vanishes, instead of being
    clipped at 0 and renormalised into spurious mass.
    """
    flat = v.ravel().astype(np.float64)
    ordered = np.sort(flat)[::-1]
    cumulative = np.cumsum(ordered) - 1
    k = np.arange(1, flat.size + 1)
    rho = np.nonzero(ordered - cumulative / k > 0)[0][-1]
    return np.maximum(flat - cumulative[rho] / (rho + 1), 0).reshape(v.shape)
