"""Public grids of numeric columns: a number becomes the code of its bin, the same way wherever it is read.

A ``NumericGrid`` is ``bins`` equal-width bins over [lower, upper], all public (a domain file states
them): bin i is [edges[i], edges[i + 1]), the last one closed at ``upper``. A value outside
[lower, upper] is clamped into the end bin on its side (it still counts once, so a count's
sensitivity is unchanged); NaN, infinities and nulls are rejected before (validation sends them to
the dead letter). Validation (io/validation.py) bins columns with ``codes``, for synthesize and
evaluate_synthetic alike; a synthetic column turns its codes back into numbers inside the bins
(transforms/synthesis.py), post-processing of a private release.

Every check of a grid's public parameters runs when it is built, before any data is read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

MAX_BINS = 10_000
# Where NumericGrid.near may place a float column's edges: lower + k (upper - lower) / FLOAT_LATTICE.
FLOAT_LATTICE = 2**16
EXACT_INTEGERS = 2**53  # an integer grid's bounds stay where float64 edges are exact integers


def _real(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {type(value).__name__}")
    try:
        finite = math.isfinite(float(value))
    except OverflowError:  # an integer beyond float64
        finite = False
    if not finite:
        raise ValueError(f"{name} must be finite")
    return value


@dataclass(frozen=True)
class NumericGrid:
    """``bins`` equal-width bins over [``lower``, ``upper``] (public); ``integer``: the column holds integers
    (True) or floats (False); None where nobody said, which is read as floats unless the input's schema says
    integers (``releases.domains.with_input_types``).

    ``cuts``: the bins - 1 inner edges, when they are not equal-width (edges released privately,
    pipelines.synthesize's "bins": "private"): increasing, strictly inside (lower, upper).
    Checked when built: finite bounds with lower < upper, 1 <= bins <= MAX_BINS (an integer), bins
    wide enough to tell apart in float64, and for an integer column bounds within +-2^53 and at
    least one integer in every bin (a synthetic value is drawn inside its bin).
    """

    lower: int | float
    upper: int | float
    bins: int
    integer: bool | None = None
    cuts: tuple[float, ...] | None = None

    def __post_init__(self):
        lower, upper = _real(self.lower, "lower"), _real(self.upper, "upper")
        if not lower < upper:
            raise ValueError(f"lower must be below upper, got {lower!r} and {upper!r}")
        if isinstance(self.bins, bool) or not isinstance(self.bins, int):
            raise ValueError(f"bins must be an integer, got {self.bins!r}")
        if not 1 <= self.bins <= MAX_BINS:
            raise ValueError(f"bins must be between 1 and {MAX_BINS:,}, got {self.bins}")
        if not math.isfinite(float(upper) - float(lower)):
            raise ValueError(f"[{lower!r}, {upper!r}] is too wide for floating point: its width overflows")
        if self.cuts is not None and (len(self.cuts) != self.bins - 1 or not np.all(np.isfinite(self.cuts))):
            raise ValueError(f"cuts must be the {self.bins - 1} finite inner edges of the bins")
        if self.cuts is not None and not np.all(np.diff(self.edges) > 0):
            raise ValueError("the edges must increase strictly from lower to upper")
        if not np.all(np.diff(self.edges) > 0):
            raise ValueError(f"{self.bins} bins over [{lower!r}, {upper!r}] are too narrow for floating point")
        if self.integer:
            if max(abs(lower), abs(upper)) > EXACT_INTEGERS:
                raise ValueError("an integer column's lower and upper must lie within +-2^53")
            first, last = self.integer_ranges
            empty = np.flatnonzero(first > last)
            if empty.size:
                raise ValueError(f"bin {empty[0]} of {self.bins} over [{lower!r}, {upper!r}] holds no integer "
                                 "(fewer bins, or a float column)")  # fmt: skip

    @classmethod
    def near(cls, lower: float, upper: float, bins: int, *, integer: bool | None, points: np.ndarray) -> NumericGrid:
        """A grid whose bins - 1 inner edges lie near ``points`` (released quantiles): post-processing, vectorised.
        Each point is snapped onto a public lattice (the integers for an integer column, so that every bin holds
        one, else FLOAT_LATTICE equal steps of [lower, upper]), then moved the least to make the edges increase
        strictly. A ValueError if the lattice has too few points inside (lower, upper) for the bins."""
        grid = cls(lower, upper, bins, integer=False)  # the bounds' and bins' checks
        points = np.sort(np.asarray(points, dtype=np.float64))
        if points.shape != (bins - 1,):
            raise ValueError(f"{bins} bins need {bins - 1} points, got {points.size}")
        if integer:
            first, last = math.ceil(grid.lower) + 1, math.ceil(grid.upper) - 1  # inside (lower, upper)
            lattice, steps = None, np.ceil(points)
            if last - first < bins - 2:
                raise ValueError(f"{bins} bins over [{lower!r}, {upper!r}] need more integers in it")
        else:
            first, last = 1, FLOAT_LATTICE - 1
            lattice = np.linspace(float(lower), float(upper), FLOAT_LATTICE + 1)
            if not np.all(np.diff(lattice) > 0):
                raise ValueError(f"[{lower!r}, {upper!r}] is too narrow for floating point")
            steps = np.rint((points - float(lower)) / (float(upper) - float(lower)) * FLOAT_LATTICE)
        j = np.arange(bins - 1)
        steps = np.clip(np.nan_to_num(steps), first, last).astype(np.int64)
        steps = np.maximum.accumulate(np.maximum(steps, first + j) - j) + j  # strictly increasing, each >= first
        steps = np.minimum(steps, last - (bins - 2 - j))  # and <= last, still strictly increasing
        cuts = steps if lattice is None else lattice[steps]
        return cls(lower, upper, bins, integer=integer, cuts=tuple(float(c) for c in cuts))

    @cached_property
    def edges(self) -> np.ndarray:
        """The bins + 1 edges, float64, from lower to upper exactly (equal-width unless ``cuts`` are given)."""
        if self.cuts is not None:
            return np.array([self.lower, *self.cuts, self.upper], dtype=np.float64)
        return np.linspace(float(self.lower), float(self.upper), self.bins + 1)

    @cached_property
    def integer_ranges(self) -> tuple[np.ndarray, np.ndarray]:
        """Each bin's smallest and largest integer (int64; an empty bin's smallest is above its largest)."""
        first = np.ceil(self.edges[:-1]).astype(np.int64)
        last = np.append(np.ceil(self.edges[1:-1]).astype(np.int64) - 1, math.floor(self.upper))
        return first, last

    def codes(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(each value's bin code 0 .. bins - 1 as int64, which values lay outside [lower, upper] and were
        clamped into an end bin). Integers are compared exactly; NaN lands in the last bin (reject it first)."""
        values = np.asarray(values)
        if self.integer and values.dtype.kind in "iu":
            first, last = self.integer_ranges
            codes = np.searchsorted(first[1:], values, side="right")
            return codes.astype(np.int64, copy=False), (values < first[0]) | (values > last[-1])
        values = values.astype(np.float64, copy=False)
        codes = np.searchsorted(self.edges[1:-1], values, side="right")
        return codes.astype(np.int64, copy=False), (values < self.edges[0]) | (values > self.edges[-1])

    def manifest(self) -> dict:
        """The grid as a release states it (public)."""
        stated = {"lower": self.lower, "upper": self.upper, "bins": self.bins,
                  "type": "integer" if self.integer else "float"}  # fmt: skip
        return stated if self.cuts is None else stated | {"edges": self.edges.tolist()}
