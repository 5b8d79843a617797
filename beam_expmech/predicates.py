"""Predicate families: a record batch in, one int64 count per candidate out (vectorised).

A family is the scoring half of a selection (OpenDP's "score transformation"): it says which
columns it reads, how many candidates there are and their labels, and how much one row can add
to any single count (``contribution``). Counting is monotone under adding or removing rows.
With at most K rows per privacy unit, every count then has sensitivity K * contribution.

Families never see privacy parameters; the mechanisms never see batches.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

CANDIDATE = "__candidate"  # the column of candidate indices that compact_rows makes
_JOINT_CELLS = 1 << 15  # a workload whose columns' joint domain is this small carries each row as its joint cell


class PredicateFamily:
    """The interface: ``columns``, ``num_candidates``, ``labels``, ``contribution`` and ``count``."""

    columns: tuple[str, ...]
    num_candidates: int
    contribution: int = 1  # the most one row adds to any single count
    monotonic: bool = True  # adding a row never lowers a count

    def labels(self, indices: Sequence[int]) -> list[str]:
        raise NotImplementedError

    def count(self, batch: pa.RecordBatch) -> np.ndarray:
        """Dense counts, shape (num_candidates,), int64."""
        indices, counts = self.sparse_count(batch)
        dense = np.zeros(self.num_candidates, dtype=np.int64)
        dense[indices] = counts
        return dense

    def sparse_count(self, batch: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray]:
        """(candidate indices, their nonzero counts): what large candidate sets ship between workers."""
        dense = self.count(batch)
        indices = np.flatnonzero(dense)
        return indices, dense[indices]

    def compact_rows(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The batch in the form bounding carries to ``compacted``'s count: here, as it is.

        A family may drop the rows that count for no candidate and replace its columns by something
        smaller: a function of each row alone (public), so a privacy unit's rows after it are a subset
        of its rows before, each counting as it did, and at most K of them still move each count by
        at most K * contribution."""
        return batch

    @property
    def compacted(self) -> PredicateFamily:
        """The family that counts batches made by ``compact_rows`` as this one counts the originals."""
        return self


class _OneCandidatePerRow(PredicateFamily):
    """Families where each row falls in at most one candidate: count by bincount / unique."""

    def candidate_of(self, batch: pa.RecordBatch) -> np.ndarray:
        """The candidate index of each row, or -1 where the row is in none."""
        raise NotImplementedError

    def count(self, batch: pa.RecordBatch) -> np.ndarray:
        codes = self.candidate_of(batch)
        return np.bincount(codes[codes >= 0], minlength=self.num_candidates).astype(np.int64)

    def sparse_count(self, batch: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray]:
        codes = self.candidate_of(batch)
        indices, counts = np.unique(codes[codes >= 0], return_counts=True)
        return indices.astype(np.int64), counts.astype(np.int64)

    def compact_rows(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Only the rows in some candidate, the family's columns replaced by that candidate's index (column
        CANDIDATE, in the narrowest integer type): 2 bytes a row for up to 32,768 candidates, where a text
        or number column takes 8 or more. Bounding after it spends a unit's K rows on rows that count."""
        codes = self.candidate_of(batch)
        counted = codes >= 0
        if not counted.all():
            batch, codes = batch.filter(pa.array(counted)), codes[counted]
        return _with_candidates(batch, self.columns, codes, self.num_candidates)

    @property
    def compacted(self) -> PredicateFamily:
        return CandidateIndex(self)


def _with_candidates(batch: pa.RecordBatch, columns: Sequence[str], codes: np.ndarray, size: int) -> pa.RecordBatch:
    """The batch with ``columns`` replaced by ``codes`` (each in 0 .. size - 1), column CANDIDATE, in the
    narrowest unsigned integer type that holds them (2^16 bins: 2 bytes)."""
    kind = next(t for t in (np.uint8, np.uint16, np.uint32, np.uint64) if size - 1 <= np.iinfo(t).max)
    return batch.drop_columns(list(columns)).append_column(CANDIDATE, pa.array(codes.astype(kind)))


class _CountsOfCompactRows(PredicateFamily):
    """A family that counts what ``original.compact_rows`` made (column CANDIDATE) as ``original`` counts
    its rows: the same candidates, labels, contribution and monotonicity."""

    def __init__(self, original: PredicateFamily):
        self.original = original
        self.columns = (CANDIDATE,)
        self.num_candidates = original.num_candidates
        self.contribution, self.monotonic = original.contribution, original.monotonic

    def labels(self, indices: Sequence[int]) -> list[str]:
        return self.original.labels(indices)


class CandidateIndex(_CountsOfCompactRows, _OneCandidatePerRow):
    """A one-candidate-a-row family's counts from its compact rows: each row's candidate index."""

    def candidate_of(self, batch: pa.RecordBatch) -> np.ndarray:
        return batch.column(CANDIDATE).to_numpy(zero_copy_only=False).astype(np.int64)


class CategoryCounts(_OneCandidatePerRow):
    """How many rows have ``column`` equal to each candidate.

    Candidates are a public list of values (strings or numbers) or an integer range(lo, hi);
    values outside them count for no candidate. Contribution 1 per row.
    """

    def __init__(self, column: str, candidates: Sequence | range):
        self.columns = (column,)
        self.column = column
        if isinstance(candidates, range):
            if candidates.step != 1 or len(candidates) == 0:
                raise ValueError(f"candidates must be a non-empty range with step 1, got {candidates}")
            self.range, self.values = candidates, None
        else:
            values = list(candidates)
            if not values:
                raise ValueError("candidates must not be empty")
            if len(set(values)) != len(values):
                duplicated = sorted({str(v) for v in values if values.count(v) > 1})
                raise ValueError(f"candidates must be distinct; duplicated: {', '.join(duplicated[:5])}")
            self.range, self.values = None, pa.array(values)
        self.num_candidates = len(candidates)

    def labels(self, indices: Sequence[int]) -> list[str]:
        if self.range is not None:
            return [str(self.range[i]) for i in indices]
        return [str(self.values[i].as_py()) for i in indices]

    def candidate_of(self, batch: pa.RecordBatch) -> np.ndarray:
        column = batch.column(self.column)
        if self.range is not None:
            values = column.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
            codes = values - self.range.start
            return np.where((codes >= 0) & (codes < self.num_candidates), codes, -1)
        codes = pc.index_in(column, value_set=self.values.cast(column.type, safe=False))
        return codes.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


class HistogramCounts(_OneCandidatePerRow):
    """How many values of ``column`` fall in each of ``bins`` equal bins over [lower, upper].

    Values outside the interval are clamped into the end bins (so every row counts once);
    NaN and infinities must be rejected before (validation sends them to the dead letter).
    """

    def __init__(self, column: str, lower: float, upper: float, bins: int):
        lower, upper = float(lower), float(upper)
        if not (np.isfinite(lower) and np.isfinite(upper) and lower < upper):
            raise ValueError(f"lower must be < upper, both finite; got {lower} and {upper}")
        if isinstance(bins, bool) or not isinstance(bins, int) or not 1 <= bins <= 1 << 24:
            raise ValueError(f"bins must be an integer between 1 and 2^24, got {bins!r}")
        if not (math.isfinite(upper - lower) and math.isfinite(bins / (upper - lower))):  # overflows either way
            raise ValueError(f"{bins} bins over [{lower:g}, {upper:g}] are beyond floating point: use another interval")
        self.columns = (column,)
        self.column, self.lower, self.upper = column, lower, upper
        self.num_candidates = bins
        self.edges = np.linspace(lower, upper, bins + 1)
        # How far (in bins) rounding can move a value's position or an edge, with a margin of 2^8: a few ulps of
        # the bounds' magnitude over a bin's width (rows this close to an edge are placed by the edges).
        self._rounding = 2.0**-42 * bins * (1 + max(abs(lower), abs(upper)) / (upper - lower))
        if self._rounding >= 0.5:  # edges a bin apart or less in floats: no row could be placed for sure
            raise ValueError(f"{bins} bins over [{lower:g}, {upper:g}] are finer than floating point there: use fewer")

    def labels(self, indices: Sequence[int]) -> list[str]:
        """Each bin as its edges, to full precision (close edges of a narrow grid stay apart); the last bin
        holds its upper edge (and, like the first, the values clamped into it)."""
        last = self.num_candidates - 1
        return [f"[{float(self.edges[i])!r}, {float(self.edges[i + 1])!r}{']' if i == last else ')'}" for i in indices]

    def candidate_of(self, batch: pa.RecordBatch) -> np.ndarray:
        values = batch.column(self.column).to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
        with np.errstate(over="ignore", invalid="ignore"):  # a warning on stderr would tell of the data (review 11)
            position = values - self.lower  # in place from here: each fresh array costs the kernel its pages
            position *= self.num_candidates / (self.upper - self.lower)
            np.clip(position, 0, self.num_candidates - 1, out=position)
            index = position.astype(np.int64)  # truncation is floor on [0, bins - 1]; NaN casts with a warning
        # The product rounds, and a value within rounding of an edge can land a bin low or high (review 11): a
        # bin is what its label says, [edges[i], edges[i + 1]), so those rows are placed by the edges themselves.
        position -= index  # where in its bin, 0 to 1
        near = np.flatnonzero((position < self._rounding) | (position > 1 - self._rounding))
        if near.size:
            value, bin_ = values[near], index[near]
            bin_ += value >= self.edges[bin_ + 1]
            bin_ -= value < self.edges[bin_]
            index[near] = np.clip(bin_, 0, self.num_candidates - 1)
        index[np.isnan(values)] = -1  # NaN or null (validation rejects them first): in no bin, whatever the platform
        return index


class MarginalCounts(_OneCandidatePerRow):
    """The cells of a k-way marginal: one candidate per combination of integer codes.

    ``domains[i]`` is the number of codes of ``columns[i]`` (values 0 .. domains[i] - 1); a row
    with any value outside its domain is in no cell. Cells are numbered in C order.
    """

    def __init__(self, columns: Sequence[str], domains: Sequence[int]):
        if not columns or len(columns) != len(domains):
            raise ValueError("columns and domains must be non-empty and of equal length")
        if any(int(d) < 1 for d in domains):
            raise ValueError(f"every domain size must be >= 1, got {list(domains)}")
        self.columns = tuple(columns)
        self.domains = tuple(int(d) for d in domains)
        self.num_candidates = math.prod(self.domains)
        if self.num_candidates >= 1 << 62:  # cells are numbered in int64
            raise ValueError(f"a marginal of {self.num_candidates:.3g} cells is beyond counting: use fewer columns")

    def labels(self, indices: Sequence[int]) -> list[str]:
        cells = np.unravel_index(np.asarray(indices, dtype=np.int64), self.domains)
        return [
            ",".join(f"{c}={int(v[i])}" for c, v in zip(self.columns, cells, strict=True)) for i in range(len(indices))
        ]

    def candidate_of(self, batch: pa.RecordBatch) -> np.ndarray:
        # Horner's rule over the columns as they come (validated codes are int8 or int16): a few passes in
        # place, where widening each column and numpy's ravel_multi_index took 20 times as long.
        cells = np.zeros(batch.num_rows, np.int64)
        outside = np.zeros(batch.num_rows, bool)
        for column, size in zip(self.columns, self.domains, strict=True):
            codes = batch.column(column).to_numpy(zero_copy_only=False)
            if codes.dtype.kind != "i":  # unsigned (could wrap into range), or floats where nulls were
                codes = codes.astype(np.int64)
            outside |= (codes < 0) | (codes >= size)
            cells *= size
            cells += codes  # wraps where a code is out of range: those rows are set to -1 below
        cells[outside] = -1
        return cells


class ExpressionCounts(PredicateFamily):
    """One arbitrary predicate per candidate: how many rows satisfy each pyarrow compute expression.

    A row may satisfy many expressions but adds at most 1 to each count: contribution 1.
    ``columns`` names every column the expressions read (pyarrow cannot list them).
    """

    def __init__(
        self, expressions: Sequence[pc.Expression], *, columns: Sequence[str], labels: Sequence[str] | None = None
    ):
        self.expressions = list(expressions)
        if not self.expressions:
            raise ValueError("expressions must not be empty")
        self._labels = [str(e) for e in self.expressions] if labels is None else list(labels)
        if len(self._labels) != len(self.expressions):
            raise ValueError("give one label per expression")
        self.columns = tuple(columns)
        self.num_candidates = len(self.expressions)

    def labels(self, indices: Sequence[int]) -> list[str]:
        return [self._labels[i] for i in indices]

    def count(self, batch: pa.RecordBatch) -> np.ndarray:
        return np.array([batch.filter(e).num_rows for e in self.expressions], dtype=np.int64)


class MarginalWorkload(PredicateFamily):
    """Every k-way marginal of a set of columns at once: the candidates are all their cells, end to end.

    One pass over the data counts them all; ``split`` cuts the summed vector back into one
    array per marginal (shaped by its domains). A row adds 1 to one cell of each marginal, so
    to any single count at most 1 (contribution 1; over the whole workload it touches
    ``len(marginals)`` counts, which is what an L1 or L2 measurement must account for).
    """

    def __init__(self, marginals: Sequence[Sequence[str]], domain: dict[str, int]):
        if not marginals:
            raise ValueError("the workload has no marginal")
        self.marginals = [tuple(m) for m in marginals]
        unknown = sorted({c for m in self.marginals for c in m} - set(domain))
        if unknown:
            raise ValueError(f"no domain given for column {unknown[0]!r}")
        self.parts = [MarginalCounts(m, [domain[c] for c in m]) for m in self.marginals]
        self.offsets = np.cumsum([0] + [p.num_candidates for p in self.parts])
        self.columns = tuple(dict.fromkeys(c for m in self.marginals for c in m))
        self.num_candidates = int(self.offsets[-1])
        joint = math.prod(domain[c] for c in self.columns)
        self.joint = MarginalCounts(self.columns, [domain[c] for c in self.columns]) if joint <= _JOINT_CELLS else None

    def labels(self, indices: Sequence[int]) -> list[str]:
        labels = []
        for i in indices:
            part = int(np.searchsorted(self.offsets, i, side="right")) - 1
            labels.extend(self.parts[part].labels([i - self.offsets[part]]))
        return labels

    def count(self, batch: pa.RecordBatch) -> np.ndarray:
        return np.concatenate([part.count(batch) for part in self.parts])

    def compact_rows(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Where the columns' joint domain is small (at most _JOINT_CELLS cells), each row as its joint cell
        alone (column CANDIDATE): every marginal's cell is a function of it. A value outside its column's
        domain (which validation sends to the dead letter) is an error: it counts in some marginals only."""
        if self.joint is None:
            return batch
        cells = self.joint.candidate_of(batch)
        if np.any(cells < 0):
            raise ValueError("a value outside its column's domain: validate the rows against the domain first")
        return _with_candidates(batch, self.columns, cells, self.joint.num_candidates)

    @property
    def compacted(self) -> PredicateFamily:
        return self if self.joint is None else JointCellWorkload(self)

    def split(self, counts: np.ndarray) -> dict[tuple[str, ...], np.ndarray]:
        """The summed vector as {marginal: counts shaped by the marginal's domains}."""
        return {
            m: counts[self.offsets[i] : self.offsets[i + 1]].reshape(part.domains)
            for i, (m, part) in enumerate(zip(self.marginals, self.parts, strict=True))
        }


class JointCellWorkload(_CountsOfCompactRows):
    """A marginal workload's counts from its compact rows (each row's joint cell over all the workload's
    columns): one histogram of the joint cells a batch, each marginal a sum of it over the other columns."""

    def count(self, batch: pa.RecordBatch) -> np.ndarray:
        cells = batch.column(CANDIDATE).to_numpy(zero_copy_only=False).astype(np.int64)
        joint_cells = self.original.joint
        joint = np.bincount(cells, minlength=joint_cells.num_candidates).reshape(joint_cells.domains)
        columns = joint_cells.columns
        counts = []
        for marginal in self.original.marginals:
            summed = joint.sum(axis=tuple(i for i, c in enumerate(columns) if c not in marginal))
            kept = [c for c in columns if c in marginal]  # the axes left, in the joint's order
            counts.append(np.transpose(summed, [kept.index(c) for c in marginal]).ravel())
        return np.concatenate(counts).astype(np.int64)
