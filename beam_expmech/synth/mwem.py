"""MWEM (Hardt, Ligett and McSherry 2012) on a factored model, pure epsilon-DP.

The generator sees the data only through the true counts of a workload of marginals, and
touches those only through mechanisms. Each of T rounds spends epsilon / (2T) twice:

1. select: the exponential mechanism picks the marginal r the model answers worst, score
   ||M_r - n P_r||_1 (M_r the data's counts, P_r the model's distribution, n the data's size);
   one unit with K rows moves M_r by K in L1 and n P_r by K, so the sensitivity is 2K;
2. measure: the discrete Laplace mechanism adds noise of scale K / (epsilon / 2T) to every
   cell of M_r (L1 sensitivity K);
3. update (post-processing): multiplicative weights moves the model towards every noisy
   marginal measured so far.

The model is a product of independent components, each a full histogram over a few columns
(MWEM's factored representation): a measured marginal merges the components it touches. A
marginal whose merge would exceed ``max_cells`` is not a candidate in that round (the choice
depends only on earlier private outputs), so memory never runs out, whatever the data.

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

_FIXED = 30  # model probabilities as integers in units of 2^-30 inside the scores
_UPDATE_PASSES = 5


@dataclass
class FactoredModel:
    """A distribution over rows: independent components, each a normalised histogram over its columns."""

    domain: dict[str, int]
    components: list[tuple[tuple[str, ...], np.ndarray]] = field(default_factory=list)

    @classmethod
    def uniform(cls, domain: dict[str, int]) -> FactoredModel:
        return cls(domain, [((c,), np.full(size, 1.0 / size)) for c, size in domain.items()])

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
        """``rows`` synthetic rows, column by column (post-processing, OS randomness by default)."""
        out = {}
        for names, table in self.components:
            cdf = np.cumsum(table.ravel())
            uniform = source.uint32(rows).astype(np.float64) * 2.0**-32 * cdf[-1]
            cells = np.minimum(np.searchsorted(cdf, uniform, side="right"), cdf.size - 1)
            for name, codes in zip(names, np.unravel_index(cells, table.shape), strict=True):
                out[name] = codes.astype(np.int64)
        return {c: out[c] for c in self.domain}


@dataclass
class MwemResult:
    model: FactoredModel
    measured: list[tuple[str, ...]]  # the marginals selected, in order (a private output)
    releases: list[Release]  # what was spent, for the budget
    rows: int  # the noisy size estimate (a private output)


def mwem(
    marginals: dict[tuple[str, ...], np.ndarray],
    domain: dict[str, int],
    *,
    epsilon: float,
    rounds: int = 20,
    max_rows: int = 1,
    max_cells: int = 1_000_000,
    one_way_share: float = 0.2,
    rng: RandomLike = None,
) -> MwemResult:
    """Run MWEM over the workload ``marginals`` ({columns: true counts shaped by their domains}).

    A share ``one_way_share`` of epsilon first measures every column's 1-way marginal (read
    off the workload) to start from an independent model instead of a uniform one; the rest
    is split over the rounds. Privacy: epsilon-DP (pure), with at most ``max_rows`` rows per unit.
    """
    epsilon = parameters.positive_finite(epsilon, "epsilon")
    rounds = parameters.count(rounds, "rounds")
    max_rows = parameters.count(max_rows, "max_rows")
    if not marginals:
        raise ValueError("the workload has no marginal")
    workload = list(marginals)
    for columns in workload:
        if marginals[columns].shape != tuple(domain[c] for c in columns):
            raise ValueError(f"marginal {columns} does not match the domain")
    model = FactoredModel.uniform(domain)
    if any(math.prod(domain[c] for c in columns) > max_cells for columns in workload):
        raise ValueError(f"a workload marginal has more than {max_cells:,} cells")
    source = random_source(rng)
    measured, noisy, releases = [], {}, []
    if one_way_share > 0:
        start = epsilon * one_way_share / len(domain)
        for column in domain:
            holder = next(c for c in workload if column in c)  # any marginal holding the column
            counts = marginals[holder].sum(axis=tuple(i for i, c in enumerate(holder) if c != column))
            noisy[(column,)] = discrete_laplace_mechanism(counts, epsilon=start, sensitivity=max_rows, rng=source)
            releases.append(Release.pure(start, f"MWEM 1-way {column}"))
            clipped = np.maximum(noisy[(column,)], 0).astype(np.float64)
            index = next(i for i, (names, _) in enumerate(model.components) if names == (column,))
            model.components[index] = (
                (column,),
                clipped / clipped.sum() if clipped.sum() else np.full(clipped.size, 1 / clipped.size),
            )
    each = epsilon * (1 - one_way_share) / (2 * rounds)
    n = int(next(iter(marginals.values())).sum())  # used inside the score only
    for _ in range(rounds):
        candidates = [c for c in workload if model.merged_size(c) <= max_cells]
        scores = np.array([_score(marginals[c], model.marginal(c), n) for c in candidates], dtype=object)
        sensitivity = 2 * max_rows * (2**_FIXED + max(marginals[c].size for c in candidates))
        chosen = candidates[exponential_mechanism(scores, epsilon=each, sensitivity=sensitivity, rng=source)]
        releases.append(Release.exponential_mechanism(each, f"MWEM select {chosen}"))
        noisy[chosen] = discrete_laplace_mechanism(marginals[chosen], epsilon=each, sensitivity=max_rows, rng=source)
        releases.append(Release.pure(each, f"MWEM measure {chosen}"))
        measured.append(chosen)
        _update(model, chosen, noisy)
    size = max(1, round(float(np.mean([m.sum() for m in noisy.values()]))))
    return MwemResult(model, measured, releases, size)


def _score(true_counts: np.ndarray, model_probabilities: np.ndarray, n: int) -> int:
    """||M - n P~||_1 in units of 2^-30 counts, exactly (P~: the model rounded to 2^-30)."""
    fixed = np.rint(model_probabilities.ravel() * 2.0**_FIXED).astype(np.int64).astype(object)
    return int(np.abs(true_counts.ravel().astype(object) * 2**_FIXED - n * fixed).sum())


def _update(model: FactoredModel, chosen: tuple[str, ...], noisy: dict) -> None:
    """Post-processing: move the component holding ``chosen`` towards every noisy marginal inside it.

    A multiplicative update with the largest step, iterative proportional fitting: each pass
    rescales the component so its marginal matches a measurement (negative noisy counts clipped
    to 0). The plain MWEM step exp((y - n P) / 2n) is too small to move sparse marginals at all.
    """
    index = model.merge(chosen)
    names, table = model.components[index]
    total = max(1.0, float(np.mean([y.sum() for y in noisy.values()])))
    inside = [(c, _project_to_simplex(y / total)) for c, y in noisy.items() if set(c) <= set(names)]
    for _ in range(_UPDATE_PASSES):
        for columns, target in inside:
            current = model.marginal(columns)
            ratio = (target + 1e-12) / (current + 1e-12)
            axes = [names.index(c) for c in columns]
            shape = [table.shape[i] if i in axes else 1 for i in range(len(names))]
            table = table * np.transpose(ratio, np.argsort(axes)).reshape(shape)
            table /= table.sum()
            model.components[index] = (names, table)


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
