"""The final step of private quantiles: m quantiles from a summed histogram on a public grid.

col: one int64 histogram over a ``HistogramCounts`` family's bins (what ``GatherCounts`` emits)
-> col: one dict, each quantile (as ``f"{q:g}"``) to its private value, in increasing order.

Two methods, both the exponential mechanism with the bin width as base measure and a uniform
point inside the chosen bin: ``independent`` draws each quantile alone with epsilon / m on the
full grid (beam_expmech.mechanisms.quantile); ``joint`` draws all m together with epsilon by
JointExp (beam_expmech.mechanisms.joint_quantiles) on the grid regrouped into at most
JOINT_BINS bins along its public edges. The histogram is small (one count a bin): one worker
holds it.
"""

from __future__ import annotations

from collections.abc import Iterable

import apache_beam as beam
import numpy as np

from beam_expmech import parameters
from beam_expmech.accounting import Release
from beam_expmech.io.errors import first_line
from beam_expmech.mechanisms.joint_quantiles import joint_quantiles
from beam_expmech.mechanisms.quantile import private_quantile
from beam_expmech.mechanisms.randomness import random_source
from beam_expmech.predicates import HistogramCounts
from beam_expmech.transforms import lineage

JOINT_BINS = 1024  # JointExp's sampler is quadratic in bins
METHODS = ("independent", "joint")


def _checked_quantiles(quantiles: Iterable[float]) -> tuple[float, ...]:
    """The quantiles, sorted: at least one, each strictly between 0 and 1, no two equal."""
    if isinstance(quantiles, str) or not isinstance(quantiles, Iterable):
        raise ValueError(f"quantiles must be a list of numbers, got {quantiles!r}")
    values = [parameters.probability(q, f"quantile {q}") for q in quantiles]
    if not values:
        raise ValueError("quantiles is empty: give at least one")
    if len(set(values)) != len(values):
        raise ValueError(f"quantiles has a duplicate: {', '.join(f'{q:g}' for q in values)}")
    return tuple(sorted(values))


class PrivateQuantiles(beam.PTransform):
    """m private quantiles, sorted; ``max_rows`` checked against the bounding above if marked, else trusted.

    The quantiles of the values a ``HistogramCounts`` family counts. Where the counts carry no bounding's mark
    (made by hand) it cannot tell a ``max_rows`` too small; ``PrivateRelease`` derives it.

    Privacy: ``epsilon``-DP for the m quantiles together (and epsilon^2/8-zCDP: ``cost``) when
    each privacy unit has at most ``max_rows`` = K rows in the histogram. ``independent``: m
    exponential mechanisms of epsilon / m, each of sensitivity K * max(q, 1 - q); ``joint``: one
    exponential mechanism (JointExp) of sensitivity 2K. Sorting the values is post-processing.
    Arguments are validated here, when the pipeline is built, and the step is rehearsed on an
    empty histogram, so quantiles the grid cannot release fail before any budget is spent.
    ``seed`` is for tests only (not private).
    """

    def __init__(
        self,
        *,
        epsilon: float,
        quantiles: Iterable[float],
        family: HistogramCounts,
        method: str = "independent",
        max_rows: int = 1,
        seed: int | None = None,
    ):
        super().__init__()
        self.epsilon = parameters.positive_finite(epsilon, "epsilon")
        self.quantiles = _checked_quantiles(quantiles)
        if not isinstance(family, HistogramCounts):
            raise ValueError(f"family must be a HistogramCounts (its public grid), got {type(family).__name__}")
        self.family = family
        if method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
        self.method = method
        self.max_rows = parameters.count(max_rows, "max_rows")
        self.seed = parameters.test_seed(seed)
        self._rehearse()

    @property
    def cost(self) -> Release:
        """What the release costs: the m quantiles together are epsilon-DP and epsilon^2/8-zCDP (JointExp is one
        exponential mechanism; independent ones are m of epsilon/m each, which compose to no more)."""
        return Release.exponential_mechanism(self.epsilon, f"{len(self.quantiles)} quantiles of {self.family.column}")

    def _rehearse(self) -> None:
        """Run the step once on an empty histogram: whatever it refuses of its public parameters (quantiles too
        fine, a grid whose regrouped edges collapse) fails here, not after the charge. It reads no data; its
        draw is thrown away."""
        try:
            self.release(np.zeros(self.family.num_candidates, dtype=np.int64))
        except (ValueError, ArithmeticError) as error:
            raise ValueError(f"these quantiles cannot be released on this grid: {first_line(error)}") from None

    @property
    def cuts(self) -> np.ndarray:
        """The indices of the family's edges that bound the bins the mechanism chooses among: every edge for
        ``independent``, at most JOINT_BINS + 1 of them, evenly spread, for ``joint`` (public)."""
        bins = self.family.num_candidates
        if self.method == "independent":
            return np.arange(bins + 1)
        return np.unique(np.linspace(0, bins, min(bins, JOINT_BINS) + 1).round().astype(int))

    @property
    def widest_bin(self) -> float:
        """The width of the widest bin the mechanism may choose: how far apart two values it cannot tell apart
        can be (public)."""
        return float(np.diff(self.family.edges[self.cuts]).max())

    def release(self, histogram: np.ndarray) -> dict[str, float]:
        """What ``expand`` draws, in one process (audits, small jobs): each quantile (as ``f"{q:g}"``) to its
        private value, in increasing order."""
        histogram = np.asarray(histogram)
        bins, edges = self.family.num_candidates, self.family.edges
        if histogram.shape != (bins,):
            raise ValueError(f"expected a histogram of {bins} counts, got shape {histogram.shape}")
        source = random_source(self.seed)
        if self.method == "joint":
            cuts = self.cuts  # regrouped to at most JOINT_BINS bins along public edges
            coarse = np.add.reduceat(histogram, cuts[:-1])
            values = joint_quantiles(
                coarse, edges[cuts], list(self.quantiles), epsilon=self.epsilon, max_rows=self.max_rows, rng=source
            )
        else:
            each = self.epsilon / len(self.quantiles)
            values = [
                private_quantile(histogram, edges, q, epsilon=each, max_rows=self.max_rows, rng=source)
                for q in self.quantiles
            ]
        # Sorting is post-processing: quantiles come out in order whatever the noise did.
        return {f"{q:g}": v for q, v in zip(self.quantiles, sorted(values), strict=True)}

    def expand(self, histograms):
        lineage.check_sensitivity(histograms, self.max_rows, "PrivateQuantiles", self.family)  # a rank: K a unit
        # col: one int64 histogram -> col: one {quantile: value} dict
        return histograms | "Quantiles" >> beam.Map(self.release)
