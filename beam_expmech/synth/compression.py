"""Domain compression (MST, McKenna, Miklau, Sheldon 2021): codes too rare to measure are merged.

Once the 1-way marginals are measured, a column's codes whose estimated count is under ``RARE``
times the noise of that estimate (3, as MST) are merged into one code, where there are two or
more of them. The likeliest code is always kept, so that no column is left with a single code
(MST's would be, and every later measurement of it wasted). Later measurements count rows on the
merged codes: a row is still in exactly one cell of any marginal, so their sensitivity is
unchanged, while fewer cells carry less noise in all. The map is built from released
measurements only (post-processing), and so is the way back: a merged code is spread over its
codes as the 1-way estimate spreads it. On an ordered column (a numeric column's bins) that estimate
is first smoothed, each code's count blended with its neighbours' (``SMOOTHING``): the merged codes'
counts are mostly noise, and neighbouring bins of a number hold similar counts.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np

from beam_expmech.mechanisms.randomness import RandomSource
from beam_expmech.synth.graphical_model import GraphicalModel, Measurement
from beam_expmech.synth.sampling import allocate, code_dtype

RARE = 3.0  # noise scales under which a code's estimated count is rare (MST's threshold)
SMOOTHING = 0.5  # an ordered column's neighbouring codes' weight, each, in a merged code's spread (tune_synth.py)


@dataclass(frozen=True)
class DomainCompression:
    """Each column's codes mapped to fewer: kept codes in order, then one code for the rare ones."""

    codes: dict[str, np.ndarray]  # column -> the merged code of each original code
    within: dict[str, np.ndarray]  # column -> each original code's share of its merged code

    @classmethod
    def of_estimates(
        cls,
        estimates: dict[str, np.ndarray],
        noise: dict[str, float],
        *,
        rare: float = RARE,
        ordered: Collection[str] = (),
        smoothing: float = SMOOTHING,
    ) -> DomainCompression:
        """The compression of columns whose estimated 1-way counts are ``estimates``, with noise scale
        ``noise``: codes under ``rare`` times it are merged (post-processing of those estimates). A
        merged code is spread over its codes by their estimates, clipped at 0 and, on the ``ordered``
        columns, each blended with its neighbours' at weight ``smoothing``."""
        codes, within = {}, {}
        for column, estimate in estimates.items():
            kept = estimate >= rare * noise[column]
            kept[np.argmax(estimate)] = True  # a column of one code would carry nothing: its likeliest stays
            if kept.size - int(kept.sum()) >= 2:
                codes[column] = np.where(kept, np.cumsum(kept) - 1, int(kept.sum()))
            else:  # one rare code or none: nothing to merge
                codes[column] = np.arange(kept.size)
            shares = np.clip(estimate, 0.0, None)
            if column in ordered:
                shares = _smoothed(shares, smoothing)
            shares = shares + 1e-12  # no code made impossible in the model (rows resolve shares to 2^-32)
            within[column] = shares / np.bincount(codes[column], weights=shares)[codes[column]]
        return cls(codes, within)

    @property
    def domain(self) -> dict[str, int]:
        """The merged codes' domain."""
        return {c: int(codes.max()) + 1 for c, codes in self.codes.items()}

    def merges(self, column: str | None = None) -> bool:
        """Whether ``column`` (None: any column) has fewer codes."""
        columns = self.codes if column is None else [column]
        return any(int(self.codes[c].max()) + 1 < self.codes[c].size for c in columns)

    def counts(self, counts: np.ndarray, columns: Sequence[str]) -> np.ndarray:
        """``counts`` on ``columns`` (axes in that order) added up onto the merged codes."""
        for axis, column in enumerate(columns):
            if self.merges(column):  # each original code's slice added into its merged code's
                moved = np.moveaxis(counts, axis, 0)
                merged = np.zeros((int(self.codes[column].max()) + 1, *moved.shape[1:]), counts.dtype)
                np.add.at(merged, self.codes[column], moved)
                counts = np.moveaxis(merged, 0, axis)
        return counts

    def measurement(self, measurement: Measurement) -> Measurement:
        """A measurement added up onto the merged codes: each value now sums several noisy cells."""
        summed = np.ones(measurement.values.shape) if measurement.summed is None else measurement.summed
        return Measurement(
            measurement.columns,
            self.counts(measurement.values, measurement.columns),
            measurement.sigma,
            self.counts(summed, measurement.columns),
        )


def _smoothed(counts: np.ndarray, weight: float) -> np.ndarray:
    """Each count blended with its two neighbours' (weight ``weight`` each, its own 1), renormalised at the ends."""
    side = 1.0 / (2.0 + 1.0 / weight) if weight else 0.0  # w / (1 + 2w), where 1 + 2w would overflow
    kernel = np.array([side, 1.0 - 2.0 * side, side])  # summing to 1: finite at any finite weight
    # "full" then trimmed: the same length as counts, even 1 or 2
    return np.convolve(counts, kernel)[1:-1] / np.convolve(np.ones_like(counts), kernel)[1:-1]


class CompressedModel:
    """A model fitted on merged codes, answering on the original ones (post-processing).

    A merged code's probability is spread over its codes by ``DomainCompression.within``,
    independently of every other column: p(x) = p_merged(codes(x)) prod_c within_c(x_c).
    """

    def __init__(self, model: GraphicalModel, compression: DomainCompression):
        self.model = model
        self.compression = compression

    @property
    def total(self) -> float:
        return self.model.total

    def project(self, columns: Sequence[str]) -> np.ndarray:
        """The model's counts on ``columns``, axes in the order given, on the original codes."""
        merged = self.model.project(columns)
        codes = [self.compression.codes[c] for c in columns]
        counts = merged[np.ix_(*codes)]
        for axis, column in enumerate(columns):
            shape = [1] * len(columns)
            shape[axis] = -1
            counts = counts * self.compression.within[column].reshape(shape)
        return counts

    def marginal(self, columns: Sequence[str]) -> np.ndarray:
        """The model's probabilities on ``columns``, axes in the order given, on the original codes."""
        return self.project(columns) / self.total

    def sample(self, rows: int, source: RandomSource) -> dict[str, np.ndarray]:
        """``rows`` rows: the merged model's, each row of a merged code then drawn over its codes by the
        ``within`` shares (``allocate``: one systematic sample, in a uniformly random order)."""
        out = {}
        for column, merged in self.model.sample(rows, source).items():
            out[column] = merged
            if self.compression.merges(column):
                codes = self.compression.codes[column]
                rare_code = int(codes.max())  # the merged code, after the kept ones
                kept, rare = np.flatnonzero(codes != rare_code), np.flatnonzero(codes == rare_code)
                is_rare = merged == rare_code
                out[column] = np.empty(merged.size, code_dtype(codes.size))  # the original codes: maybe wider
                out[column][~is_rare] = kept[merged[~is_rare]]
                table = self.compression.within[column][rare][None, :]
                out[column][is_rare] = rare[allocate(table, np.zeros(int(is_rare.sum()), np.int64), source)]
        return out
