"""Naive Bayes rows: a target column's 2-way marginal with each other column, those columns independent given
the target.

Where a release names the column its rows will be used to predict and the data are small (``choice``), the
independent 1-ways teach a model nothing: every column is independent of the target. Measuring the target's
2-way marginal with each other column instead keeps what a classifier needs most, each column's dependence on
the target (the structure of a naive Bayes classifier, and of the "star" a private Bayesian network would
start from), for about the 1-ways' noise: one marginal a column, each of |target| times the cells.

Privacy: pure ``epsilon``-DP with at most K = ``max_rows`` rows per unit: each 2-way marginal is a histogram
whose cells a unit moves by at most K in L1, measured with discrete Laplace noise of scale K / epsilon_c, and
the epsilon_c add up to ``epsilon``. Everything after the measurements is post-processing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from beam_expmech.accounting import Release
from beam_expmech.mechanisms.discrete_laplace import discrete_laplace_mechanism
from beam_expmech.mechanisms.randomness import RandomSource
from beam_expmech.synth import SynthesisResult, normalised, sqrt_split
from beam_expmech.synth.aim import marginal_from
from beam_expmech.synth.sampling import allocate, split_cells


@dataclass
class NaiveBayesModel:
    """p(x) = p(target) times, for each other column c, p(x_c | target)."""

    domain: dict[str, int]
    target: str
    prior: np.ndarray  # p(target), sums to 1
    given: dict[str, np.ndarray]  # c -> p(c | target), shaped (|target|, |c|), each row sums to 1

    def marginal(self, columns: Sequence[str]) -> np.ndarray:
        """The model's distribution over ``columns`` (axes in that order): the target summed out last."""
        axes = {c: i + 1 for i, c in enumerate(columns)} | {self.target: 0}  # einsum's sublists: any letters' count
        operands = [self.prior, [0]]
        for column in columns:
            if column != self.target:
                operands += [self.given[column], [0, axes[column]]]
        return np.einsum(*operands, [axes[c] for c in columns])

    def sample(self, rows: int, source: RandomSource) -> dict[str, np.ndarray]:
        """``rows`` rows: the target by one systematic sample, then each column given it (``sampling.allocate``;
        post-processing)."""
        size = self.domain[self.target]
        target = allocate(self.prior.reshape(1, -1), np.zeros(rows, np.int64), source)
        out = {self.target: split_cells(target, (size,))[0]}
        for column, table in self.given.items():
            out[column] = split_cells(allocate(table, target, source), (self.domain[column],))[0]
        return {c: out[c] for c in self.domain}


def shares(domain: dict[str, int], target: str, epsilon: float) -> dict[str, float]:
    """Each other column's epsilon, in proportion to sqrt(the cells of its 2-way marginal with the target): the
    split that makes the sum of their expected L1 errors (cells K / epsilon_c each) least."""
    return sqrt_split({c: domain[target] * size for c, size in domain.items() if c != target}, epsilon)


def naive_bayes(
    marginals: dict[tuple[str, ...], np.ndarray],
    domain: dict[str, int],
    *,
    target: str,
    epsilon: float,
    max_rows: int,
    count: tuple[float, float],
    smoothing: float = 0.0,
    source: RandomSource,
) -> SynthesisResult:
    """The target's 2-way marginal with each other column (discrete Laplace, ``shares`` of ``epsilon``), as a
    naive Bayes model: pure ``epsilon``-DP (module docstring). The domain needs a column beside ``target``.

    From the noisy counts N_c (post-processing): p(target) from every N_c's sums over c, weighted by their
    inverse variances; p(c | target) from N_c's rows; both clipped at 0, ``smoothing`` times their noise's
    scale added to each cell (towards uniform where noise swamps the counts), and normalised. The size is the
    inverse-variance weighted mean of ``count`` ((noisy count, its epsilon), released before) and the N_c's
    totals.
    """
    noisy_count, count_epsilon = count
    sums, variances = [noisy_count], [2 * (max_rows / count_epsilon) ** 2]
    target_sums, target_weights, given, measured, releases = [], [], {}, [], []
    for column, share in shares(domain, target, epsilon).items():
        columns = (target, column)
        noisy = discrete_laplace_mechanism(marginal_from(marginals, columns), epsilon=share, sensitivity=max_rows,
                                           rng=source).astype(np.float64)  # fmt: skip
        releases.append(Release.pure(share, f"2-way marginal of {target} and {column}"))
        measured.append(columns)
        variance = 2 * (max_rows / share) ** 2  # of one cell
        sums.append(float(noisy.sum()))
        variances.append(noisy.size * variance)
        target_sums.append(noisy.sum(axis=1))
        target_weights.append(1 / (domain[column] * variance))
        given[column] = normalised(np.maximum(noisy, 0) + smoothing * max_rows / share)
    prior = np.average(target_sums, axis=0, weights=target_weights)
    scale = math.sqrt(1 / (2 * math.fsum(target_weights)))  # a Laplace scale of the prior's variance
    model = NaiveBayesModel(dict(domain), target, normalised(np.maximum(prior, 0) + smoothing * scale), given)
    rows = np.average(sums, weights=1 / np.array(variances))
    return SynthesisResult(model, measured, releases, max(1, round(rows)), generator="naive bayes")
