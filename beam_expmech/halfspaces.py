"""Halfspaces over bits: candidate weight vectors, and how many records each one fits.

Records are bit vectors (x_1 .. x_d, y). A candidate pi fits a record when
pi_1 x_1 + ... + pi_d x_d >= y. Its score is the number of records it fits: a count, so one
record adds at most 1 to any score (with at most K records per privacy unit: sensitivity K)
and adding records never lowers a score (monotone).

That bound holds only if whether pi fits a pattern depends on pi and the pattern alone. Float
sums do not give that: 0.7 + 0.2 + 0.1 < 1 <= 0.1 + 0.2 + 0.7 in float64, and a matrix product
sums in an order that depends on the matrix shape, so one more record (one more distinct
pattern) could flip the fit of a heavy pattern and move a score by far more than K. The weights
are therefore exact rationals (0.1 is 1/10), held as integer numerators over one common
denominator D, and pi . x >= y is decided as N . x >= D * y in integers: float64 products are
exact while every sum stays below 2^53, int64 ones below 2^63; finer weights are refused.

The data pass only needs the histogram of the 2^(d+1) bit patterns (a k-way marginal, summed
across shards); every candidate's score is then exact integer arithmetic over the distinct
patterns, a few matrix products, whatever the number of rows.
"""

from __future__ import annotations

import functools
import itertools
import math
import numbers
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

MAX_FEATURES = 22  # 2^(d+1) pattern counts: 8M cells at most
DEFAULT_MAX_CANDIDATES = 100_000
_CHUNK = 4096  # candidates scored per matrix product
_FLOAT64_EXACT = 2**53  # float64 holds every integer below this exactly
_INT64_EXACT = 2**62  # int64 sums below this cannot overflow, with room for the threshold D * y


@functools.lru_cache(maxsize=4096, typed=True)  # a candidates file repeats a few values many times
def exact_weight(value: str | numbers.Real) -> Fraction:
    """A weight as the exact rational it denotes.

    Text as written ("0.1" is 1/10, "1/3" is 1/3, "2e-3" is 1/500); an int or a Fraction as
    itself; a float as its shortest decimal form (0.1 is 1/10, the number its user typed, not
    the binary fraction nearest to it). Raises ValueError for anything else, NaN and infinity.
    """
    try:
        if isinstance(value, str):
            return Fraction(value.strip())
        if isinstance(value, numbers.Rational) and not isinstance(value, bool):
            return Fraction(value)
        if isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value):
            return Fraction(repr(float(value)))
    except (ValueError, ZeroDivisionError):
        pass
    raise ValueError("a weight must be a finite number, such as 0.1 or 1/3")


@dataclass(frozen=True, eq=False)
class Candidates:
    """Public weight vectors pi, exactly: row i is ``numerators[i] / denominator``.

    Built by ``weight_grid`` or ``check_candidates``, which guarantee that every row's
    sum_j |numerators[i, j]| + denominator stays below 2^62, so ``fit_counts`` decides exactly.
    """

    numerators: np.ndarray  # (candidates, features), int64
    denominator: int

    def __len__(self) -> int:
        return self.numerators.shape[0]

    @property
    def num_features(self) -> int:
        return self.numerators.shape[1]

    def weights(self, index: int) -> list[float]:
        """Candidate ``index`` as numbers (each the float nearest its exact value), for the release."""
        return [float(Fraction(int(n), self.denominator)) for n in self.numerators[index]]


def _over_common_denominator(values: Iterable[Fraction]) -> tuple[dict[Fraction, int], int]:
    """Each value's numerator over D, the least common denominator of them all; and D."""
    values = set(values)
    denominator = math.lcm(*(v.denominator for v in values))
    return {v: int(v * denominator) for v in values}, denominator


def _check_exact(largest_sum: int, denominator: int, name: str) -> None:
    """Refuse weights whose integer form could overflow: pi . x >= y must be decided exactly."""
    if largest_sum + denominator >= _INT64_EXACT:
        raise ValueError(
            f"{name}: the weights are too fine to decide pi . x >= y exactly (over their common denominator a sum "
            f"needs {(largest_sum + denominator).bit_length()} bits, over 62): give them fewer decimal places"
        )


def weight_grid(
    values: Sequence[str | numbers.Real], num_features: int, *, max_candidates: int, name: str = "--weights"
) -> Candidates:
    """Every weight vector with entries from ``values`` (read by ``exact_weight``): len(values)^d candidates.

    Refuses, naming the count and the limit, when there would be more than ``max_candidates``,
    and, naming ``name``, weights too fine to decide exactly.
    """
    exact = sorted({exact_weight(v) for v in values})
    if not exact:
        raise ValueError("the weight set is empty")
    count = len(exact) ** num_features
    if count > max_candidates:
        raise ValueError(
            f"{len(exact)} weights over {num_features} features make {count:,} candidates, over the limit of "
            f"{max_candidates:,} (raise --max-candidates, or give fewer weights or features)"
        )
    scaled, denominator = _over_common_denominator(exact)
    _check_exact(num_features * max(abs(n) for n in scaled.values()), denominator, name)
    numerators = np.array(list(itertools.product([scaled[v] for v in exact], repeat=num_features)), dtype=np.int64)
    return Candidates(numerators.reshape(count, num_features), denominator)


def check_candidates(
    rows: Sequence[Sequence[str | numbers.Real]], num_features: int, *, max_candidates: int, name: str = "candidates"
) -> Candidates:
    """Given weight vectors (entries read by ``exact_weight``): one weight per feature, distinct, within the limit.

    Refuses, naming ``name``, weights too fine to decide exactly.
    """
    table = np.asarray(rows, dtype=object)
    if table.ndim != 2 or table.shape[1] != num_features or table.shape[0] == 0:
        raise ValueError(f"candidates must be a non-empty list of {num_features} weights each")
    if table.shape[0] > max_candidates:
        raise ValueError(f"{table.shape[0]:,} candidates, over the limit of {max_candidates:,}")
    exact = {v: exact_weight(v) for v in set(table.flat)}
    scaled, denominator = _over_common_denominator(exact.values())
    numerators = np.frompyfunc(lambda v: scaled[exact[v]], 1, 1)(table)  # Python ints: no overflow yet
    _check_exact(int(np.abs(numerators).sum(axis=1).max()), denominator, name)
    numerators = numerators.astype(np.int64)
    if len(np.unique(numerators, axis=0)) != len(numerators):
        raise ValueError("candidates must be distinct")
    return Candidates(numerators, denominator)


def fit_counts(pattern_counts: np.ndarray, candidates: Candidates) -> np.ndarray:
    """How many records each candidate fits, from the counts of every (x_1..x_d, y) pattern.

    ``pattern_counts`` is the C-order marginal over (x_1, .., x_d, y), each of domain 2: the
    pattern with bits b_1..b_d, y sits at index sum_j b_j 2^(d-j) * 2 + y. Exact: whether a
    candidate fits a pattern depends on nothing else (not on which other patterns occur), so
    one record moves each score by 0 or 1.
    """
    num_features = candidates.num_features
    if pattern_counts.shape != (2 ** (num_features + 1),):
        raise ValueError(f"expected {2 ** (num_features + 1)} pattern counts for {num_features} features")
    present = np.flatnonzero(pattern_counts)
    bits = (present[:, None] >> np.arange(num_features, -1, -1)) & 1  # (patterns, d + 1)
    # N . x >= D * y in integers. Whatever order a matrix product adds the terms in, each partial
    # sum is a sum of some N_ij, at most sum_j |N_ij| in size: below 2^53 float64 (BLAS) is
    # exact, else int64 (numpy's own loop, slower) is, below 2^63.
    largest_sum = int(np.abs(candidates.numerators).sum(axis=1).max()) + candidates.denominator
    exact_type = np.float64 if largest_sum < _FLOAT64_EXACT else np.int64
    numerators = candidates.numerators.astype(exact_type)
    x, threshold = bits[:, :-1].astype(exact_type), (bits[:, -1] * candidates.denominator).astype(exact_type)
    counts = pattern_counts[present].astype(np.int64)
    scores = np.empty(len(candidates), dtype=np.int64)
    for start in range(0, len(candidates), _CHUNK):
        chunk = numerators[start : start + _CHUNK]
        fits = chunk @ x.T >= threshold
        scores[start : start + len(chunk)] = fits.astype(np.int64) @ counts
    return scores
