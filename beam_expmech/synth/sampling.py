"""Rows drawn from a fitted model's conditional tables, with the least sampling noise (post-processing).

A generator's model is released; rows drawn from it add noise of their own: with n rows drawn i.i.d.,
a cell of probability p is off by about sqrt(n p) rows. ``allocate`` draws a group's rows by one
systematic sample instead (Madow 1949): each value's count is the floor or the ceiling of its
expectation, off by less than one row, and the values go to the group's rows in a uniformly random
order. Each row's value still follows the table exactly, and, given its group, is independent of
everything else the rows hold; only the counts' spread shrinks.

Private-PGM's ``synthetic_data(method="round")`` allocates counts this way too, but hands the values
out in the rows' order, which correlates columns that the model leaves independent; the random order
here is what keeps them independent. Post-processing: no data is read, no budget spent.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from beam_expmech.mechanisms.randomness import RandomSource

_ONE = np.uint64(1 << 32)  # probability 1, in the integer units of the cdfs
_SHIFT = np.uint64(33)  # condition c's cdf lies in [c 2^33, c 2^33 + 2^32]
ROW_BYTES = 96
"""Bytes a row that drawing holds at most beside the codes drawn: ``allocate``'s arrays of a word a row, a
clique's condition and cells, a column being split off them (7 words at once measured: 56 bytes; row_fitting's
``memory_bound`` counts 12)."""


def code_dtype(size: int) -> np.dtype:
    """The narrowest unsigned integer type that holds the codes 0 .. ``size`` - 1: a byte a code for up to 256,
    where int64 took eight (synthetic tables of many rows are held in it)."""
    return np.min_scalar_type(max(0, size - 1))


def split_cells(cells: np.ndarray, sizes: Sequence[int]) -> list[np.ndarray]:
    """The codes of each axis of C-order ``cells`` over axes of ``sizes`` (``np.unravel_index``), each in its
    ``code_dtype``, worked out one axis at a time: two int64 arrays at once, not one per axis."""
    out = []
    for axis, size in enumerate(sizes):
        codes = cells // math.prod(sizes[axis + 1 :])
        codes %= size
        out.append(codes.astype(code_dtype(size)))
    return out


def cells_of(codes: Sequence[np.ndarray], sizes: Sequence[int]) -> np.ndarray:
    """The C-order cell (int64) of each row's ``codes`` over axes of ``sizes`` (``np.ravel_multi_index`` on codes
    known to lie in their axes), without an int64 copy of each axis."""
    cells = np.zeros(codes[0].size if codes else 0, np.int64)
    for axis_codes, size in zip(codes, sizes, strict=True):
        cells *= size
        cells += axis_codes
    return cells


def allocate(table: np.ndarray, condition: np.ndarray, source: RandomSource) -> np.ndarray:
    """For each row r, a column index of ``table``'s row ``condition[r]`` (each table row normalised;
    a row of zeros uniform): the rows of one condition share one systematic sample of that row's
    distribution, in a uniformly random order."""
    rows, width = condition.size, table.shape[1]
    if rows and not 0 <= condition.min() <= condition.max() < table.shape[0]:
        raise ValueError("allocate: a condition outside the table")
    table = np.clip(np.nan_to_num(table, nan=0.0, posinf=0.0, neginf=0.0), 0.0, None)  # a model's: finite anyway
    sums = table.sum(axis=1, keepdims=True)
    table = np.where(sums > 0, table / np.where(sums > 0, sums, 1), 1.0 / width)
    # Each row's cdf in integer units of 2^-32 (its last value exactly 2^32), shifted by its condition:
    # exact comparisons, where a float shift (c + x) rounds a point near 1 into the next condition's row.
    cdf = np.rint(np.cumsum(table, axis=1) * 2.0**32).astype(np.uint64)
    cdf[:, -1] = _ONE
    flat = (cdf + (np.arange(table.shape[0], dtype=np.uint64) << _SHIFT)[:, None]).ravel()
    # Rows grouped by condition, in a uniformly random order within each group (64-bit keys: ties,
    # which stable sorting breaks by row number, have probability about rows^2 / 2^65).
    order = np.lexsort((source.uint32(2 * rows).view(np.uint64), condition))
    grouped = condition[order].astype(np.int64, copy=False)
    starts = np.flatnonzero(np.diff(grouped, prepend=-1))
    sizes = np.diff(np.append(starts, rows))
    # The group's n points (u + j) / n, below 1, as integers below 2^32: u one per group, j the row's rank in
    # it. Worked in place, so that a draw of many rows holds few arrays of a word a row at once.
    points = np.repeat(source.uint32(starts.size).astype(np.float64) * 2.0**-32, sizes)
    rank = np.arange(rows)
    rank -= np.repeat(starts, sizes)
    points += rank
    del rank
    points /= np.repeat(sizes, sizes)
    points *= 2.0**32
    np.floor(points, out=points)
    np.minimum(points, 2.0**32 - 1, out=points)
    points = points.astype(np.uint64)
    shifted = grouped.astype(np.uint64)
    shifted <<= _SHIFT
    points += shifted
    del shifted
    found = np.searchsorted(flat, points, side="right")
    del points
    grouped *= width
    found -= grouped
    del grouped
    index = np.empty(rows, np.int64)
    index[order] = found
    return index
