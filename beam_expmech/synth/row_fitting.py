"""Synthetic rows moved towards their model's answers on the workload (post-processing).

Rows drawn from a model answer each workload marginal with sampling noise of their own: about
sqrt(n p) rows a cell, less within one conditional table (``sampling.allocate``), but nothing holds the
marginals that span several tables. On small data that noise is a large part of the rows' error.
``fit_rows`` is a local search on the rows: it changes one value of one row where that brings the rows'
workload marginals closer, in L1, to the model's (n times its probabilities). It reads only the model
and public parameters, so it is post-processing. It starts from rows drawn from the model and moves few
of them, so what the workload does not pin down (the model's other dependencies) stays as drawn.

The moves run in parallel, a column at a time: a few rows drawn at random (``ROUND_VALUES``) propose
their best value of that column against the current differences, the proposals are taken best first,
and one is kept only while each cell it moves has room. A cell whose difference from its target is d
takes at most max(1, floor |d|) moves: along them d keeps its sign, so each kept move's gain is exact
and the L1 distance falls by their sum, every round. Rows proposing the same cells crowd each other
out, so many small rounds move more rows for the work than a few large ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from beam_expmech.mechanisms.randomness import RandomSource
from beam_expmech.ordering import stable_order
from beam_expmech.synth import Progress, sampling

ROUNDS = 4  # rounds of moves a column gets before the next column's
# Values weighed in one round (rows x marginals x values). Few: a round keeps only the moves that fit in their
# cells' room, and many rows proposing crowd the same cells (2**22 until 2026-12-07: on the wide table 1.4% of a
# round's proposals were kept), so small rounds move as many rows for far less work (docs/benchmarks.md).
ROUND_VALUES = 2**16
ROUND_COST = 2**16  # the least a round is charged: its fixed cost, so that small tables' rounds are bounded too
WORK = 2**29  # values weighed in all: about 20 ns each here (10 s); small tables stop sooner
PASSES = 16  # passes of ``_kept`` a round; proposals still left propose again in the next round
FITTING = "fitting the rows to the measured marginals"  # what progress is told
_GAIN = 1e-9  # the least gain, in rows of L1 distance, worth a move (the targets are floats)


def synthetic_rows(
    model, domain: dict[str, int], marginals: Sequence[tuple[str, ...]], rows: int, *, source: RandomSource,
    progress: Progress | None = None,
) -> dict[str, np.ndarray]:  # fmt: skip
    """``rows`` rows drawn from a generator's ``model`` (its ``sample``), then fitted to its answers on the
    workload ``marginals`` (its ``marginal``; ``fit_rows``). Post-processing."""
    return fit_rows(model.sample(rows, source), domain, marginals, model.marginal, source=source, progress=progress)


def memory_bound(domain: dict[str, int], marginals: Sequence[tuple[str, ...]]) -> Callable[[int], int]:
    """The bytes ``synthetic_rows`` holds at most beside its model, as a function of the rows drawn: an upper
    bound from public parameters, for a generator's check before any budget is spent (its test measures the
    real peak against it).

    The codes drawn (each column in its ``sampling.code_dtype``) stay held until the search ends. Drawing holds
    ``sampling.ROW_BYTES`` a row more; then the search holds its table of the codes (one type for all
    columns), its layout of the workload (``_Layout``), three words on every workload cell (``_Distance``), and
    either the working arrays of ``_Layout.difference`` (two words a row, two of the largest marginal), or two
    words a cell while ``_Distance`` is made, or those of its largest round (``_round_bytes``).
    """
    drawn = sum(sampling.code_dtype(size).itemsize for size in domain.values())
    width = sampling.code_dtype(max(domain.values(), default=1)).itemsize
    cells = [math.prod(domain[c] for c in m) for m in marginals]
    holding, others = dict.fromkeys(domain, 0), dict.fromkeys(domain, 0)  # M and W of each column, in one pass
    for m in marginals:
        for c in m:
            holding[c], others[c] = holding[c] + 1, max(others[c], len(m) - 1)
    shapes = [(holding[c], others[c], domain[c]) for c in domain if holding[c] and domain[c] >= 2]
    # _Layout: each column's marginals (their offsets, strides and other columns: 2 M W + 2 M words), and Python's
    # objects (arrays and list entries: under 400 bytes a marginal and 600 a column, measured), and 64 KiB besides
    layout = 8 * sum(2 * holding[c] * others[c] + 2 * holding[c] for c in domain)
    layout += 400 * len(marginals) + 600 * len(domain) + 2**16

    def bound(rows: int) -> int:
        if not domain or rows < 1:
            return 0
        if not marginals:
            return rows * (drawn + sampling.ROW_BYTES)
        differences = 8 * max(2 * max(cells) + 2 * rows, 2 * sum(cells))
        rounds = max((_round_bytes(*shape, rows, width, len(domain)) for shape in shapes), default=0)
        search = rows * len(domain) * width + layout + 3 * 8 * sum(cells) + max(differences, rounds)
        return rows * drawn + max(rows * sampling.ROW_BYTES, search)

    return bound


def _round_bytes(m: int, w: int, size: int, rows: int, width: int, columns: int) -> int:
    """The most one ``_round`` holds (its arrays, counted from the code) for a column in ``m`` workload marginals
    (``w`` other columns each at most) with ``size`` values: 8-byte words a chosen row, at the largest of its
    three phases: the rows' cells (M W of its columns, and its whole row of the table), the gains (their V, and
    a value's M cells and gains at a time: about 5 M), and the proposals' cells sorted and ranked (``_distinct``
    and ``_kept``: about 24 M, and ``_distinct``'s table of marks, 5 bytes for each of 2^16 cells beyond its
    share of the 24 M); and the draw of the rows that propose."""
    proposing = _proposing(m, size)
    chosen = min(rows, proposing)
    words = max(24 * m, m * w * (1 + width / 8) + 2 * m + columns * width / 8)
    draws = 48 * proposing if rows > proposing else 8 * rows
    return math.ceil(8 * chosen * (words + size + 4)) + draws + 5 * 2**16


def _proposing(marginals: int, size: int) -> int:
    """How many rows propose in a round for a column of ``size`` values in that many workload ``marginals``."""
    return max(1, ROUND_VALUES // (marginals * size))


def fit_rows(
    codes: dict[str, np.ndarray],
    domain: dict[str, int],
    marginals: Sequence[tuple[str, ...]],
    probabilities: Callable[[tuple[str, ...]], np.ndarray],
    *,
    source: RandomSource,
    progress: Progress | None = None,
) -> dict[str, np.ndarray]:
    """``codes`` ({column: codes of each row}) after the local search towards n ``probabilities(m)`` on each
    workload marginal m (its axes in m's order): sweeps over the columns until sweeps move no row (one where every
    row proposes each round; where a round's rows are drawn, as many as it takes each column's rounds to draw
    about n rows), or ``WORK`` is spent. Post-processing: no data is read, no budget spent. ``progress`` is told
    the work spent of ``WORK`` after each column's rounds, and all of it when the search ends (it may end sooner:
    no row left to move)."""
    table = _table(codes, domain)
    columns = list(domain)
    if not table.size or not marginals:
        return {c: table[:, i] for i, c in enumerate(columns)}
    layout = _Layout(domain, marginals)
    distance = _Distance(layout.difference(table, probabilities))
    fewest = min((layout.proposing(c) for c in range(len(columns)) if layout.movable(c)), default=table.shape[0])
    patience = math.ceil(table.shape[0] / fewest)  # sweeps without a move that end the search
    work, idle = 0, 0
    while idle < patience and work < WORK:
        moved = False
        for column in range(len(columns)):
            for _ in range(ROUNDS):
                kept, weighed = _round(table, column, distance, layout, source)
                moved, work = moved or kept > 0, work + weighed
                if not kept:
                    break
            if progress is not None and work < WORK:
                progress(FITTING, float(work), float(WORK))
        idle = 0 if moved else idle + 1
    if progress is not None:
        progress(FITTING, float(WORK), float(WORK))
    return {c: table[:, i] for i, c in enumerate(columns)}


def _table(codes: dict[str, np.ndarray], domain: dict[str, int]) -> np.ndarray:
    """The rows as one (rows, columns) array in the narrowest type that holds every column's codes (a byte a code
    for up to 256: the table of many rows is the search's largest array); ValueError on a code outside its
    column's domain, or columns of different lengths."""
    columns = list(domain)
    rows = np.asarray(codes[columns[0]]).shape[0] if columns else 0
    table = np.empty((rows, len(columns)), sampling.code_dtype(max(domain.values(), default=1)))
    for i, c in enumerate(columns):
        column = np.asarray(codes[c])
        if column.shape != (rows,):
            raise ValueError("fit_rows: columns of different lengths")
        if column.dtype.kind not in "iu":
            column = column.astype(np.int64)
        if rows and (column.min() < 0 or column.max() >= domain[c]):
            raise ValueError("fit_rows: a code outside its column's domain")
        table[:, i] = column
    return table


class _Layout:
    """Each workload marginal's cells, one after another in one flat vector (C order inside each)."""

    def __init__(self, domain: dict[str, int], marginals: Sequence[tuple[str, ...]]) -> None:
        if any(len(set(m)) != len(m) for m in marginals):
            raise ValueError("fit_rows: a workload marginal names a column twice")
        position = {c: i for i, c in enumerate(domain)}
        self.marginals = list(marginals)
        self.sizes = [domain[c] for c in domain]
        self.positions = [np.array([position[c] for c in m]) for m in marginals]
        shapes = [[domain[c] for c in m] for m in marginals]
        self.strides = [np.array([math.prod(s[i + 1 :]) for i in range(len(s))], dtype=np.int64) for s in shapes]
        self.cells = [math.prod(s) for s in shapes]
        self.offsets = np.cumsum([0, *self.cells[:-1]])
        self.around = [self._around(column) for column in range(len(self.sizes))]  # the same every round
        # a cell's index in 4 bytes where they hold every cell: a round's indices are its largest arrays
        self.cell_type = np.int32 if sum(self.cells) < 2**31 else np.int64

    def difference(self, table: np.ndarray, probabilities: Callable[[tuple[str, ...]], np.ndarray]) -> np.ndarray:
        """The rows' counts less n ``probabilities``, every marginal's cells in one vector."""
        out = np.empty(sum(self.cells))
        for m, offset, cells, positions, strides in zip(
            self.marginals, self.offsets, self.cells, self.positions, self.strides, strict=True
        ):
            wanted = np.asarray(probabilities(m), float)
            if (
                wanted.shape != tuple(self.sizes[i] for i in positions)
                or not (np.isfinite(wanted) & (wanted >= 0)).all()
            ):
                raise ValueError(f"fit_rows: the model's marginal on {m} is not finite non-negative of its shape")
            index = np.zeros(table.shape[0], np.int64)  # each row's cell, a column at a time: no int64 table
            for position, stride in zip(positions, strides, strict=True):
                index += table[:, position] * stride
            segment = out[offset : offset + cells]
            segment[:] = np.bincount(index, minlength=cells)
            del index
            segment -= table.shape[0] * wanted.ravel()  # in place: the model's marginal and one temporary
        return out

    def movable(self, column: int) -> bool:
        """Whether ``column`` can move: it is in a workload marginal and has two codes or more."""
        return bool(self.around[column][0].size) and self.sizes[column] >= 2

    def proposing(self, column: int) -> int:
        """How many rows propose a value of ``column`` in a round (at most): ``ROUND_VALUES`` weighed."""
        return _proposing(self.around[column][0].size, self.sizes[column])

    def _around(self, column: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The marginals holding ``column``: their offsets, the column's stride in each, and the other
        columns' positions and strides (padded with stride 0)."""
        holding = [k for k, p in enumerate(self.positions) if column in p]
        width = max((len(self.positions[k]) - 1 for k in holding), default=0)
        others = np.zeros((len(holding), width), np.int64)
        other_strides = np.zeros((len(holding), width), np.int64)
        stride = np.empty(len(holding), np.int64)
        for j, k in enumerate(holding):
            inside = self.positions[k] != column
            others[j, : inside.sum()] = self.positions[k][inside]
            other_strides[j, : inside.sum()] = self.strides[k][inside]
            stride[j] = self.strides[k][~inside][0]
        return self.offsets[holding], stride, others, other_strides


class _Distance:
    """The rows' counts less their targets on every workload cell (``difference``), and by how much one row
    arriving in a cell or leaving it changes the L1 distance there (``arriving``: |d + 1| - |d|, ``leaving``:
    |d - 1| - |d|). The two are kept beside the differences, updated where rows move, because every round reads
    them for each proposing row at each of its values: a gather and a sum, not four passes of arithmetic."""

    def __init__(self, difference: np.ndarray) -> None:
        self.difference = difference
        self.arriving = np.abs(difference + 1)
        self.arriving -= np.abs(difference)  # in place: one temporary a cell at most
        self.leaving = np.abs(difference - 1)
        self.leaving -= np.abs(difference)

    def move(self, leaving: np.ndarray, arriving: np.ndarray) -> None:
        """One row leaves each cell of ``leaving`` and one arrives in each of ``arriving`` (repeats counted)."""
        np.subtract.at(self.difference, leaving, 1.0)
        np.add.at(self.difference, arriving, 1.0)
        touched = np.concatenate([leaving, arriving])
        d = self.difference[touched]
        self.arriving[touched] = np.abs(d + 1) - np.abs(d)
        self.leaving[touched] = np.abs(d - 1) - np.abs(d)


def _round(
    table: np.ndarray, column: int, distance: _Distance, layout: _Layout, source: RandomSource
) -> tuple[int, int]:
    """One round of moves of ``column``'s values (``table`` and ``distance`` updated): how many were kept, and how
    many values were weighed."""
    if not layout.movable(column):
        return 0, 0
    offsets, stride, others, other_strides = layout.around[column]
    size = layout.sizes[column]
    chosen = np.arange(table.shape[0])
    proposing = layout.proposing(column)
    if chosen.size > proposing:  # a uniformly random subset of a larger table proposes (repeats merged)
        chosen = np.unique((source.uint32(proposing).astype(np.uint64) * np.uint64(chosen.size)) >> np.uint64(32))
        chosen = chosen.astype(np.int64)
    rows = chosen.size
    cell = layout.cell_type
    stride = stride.astype(cell)
    base = (offsets + (table[chosen[:, None, None], others] * other_strides).sum(axis=-1)).astype(cell)  # (rows, M)
    old = table[chosen, column]
    here = base + old[:, None].astype(cell) * stride
    # At the row's own value the two terms meet in one cell, |d + 1| + |d - 1| - 2 |d| >= 0: never proposed.
    gains = np.empty((rows, size))
    for value in range(size):  # (rows, marginals) at a time: contiguous sums, no (rows, marginals, values) array
        gains[:, value] = distance.arriving[base + cell(value) * stride].sum(axis=1)
    gains += distance.leaving[here].sum(axis=1)[:, None]
    best = gains.argmin(axis=1)
    gain = gains[np.arange(rows), best]
    weighed = max(ROUND_COST, rows * offsets.size * size)
    proposed = np.flatnonzero(gain < -_GAIN)
    if not proposed.size:
        return 0, weighed
    proposed = proposed[np.lexsort((source.uint32(proposed.size), gain[proposed]))]  # best first, ties at random
    leaving, arriving = here[proposed], base[proposed] + best[proposed, None].astype(cell) * stride
    cells, inverse = _distinct(np.concatenate([leaving, arriving], axis=1).ravel(), distance.difference.size)
    room = np.maximum(1, np.floor(np.abs(distance.difference[cells]))).astype(np.int64)
    kept = _kept(inverse.reshape(proposed.size, -1), room)
    distance.move(leaving[kept].ravel(), arriving[kept].ravel())
    table[chosen[proposed[kept]], column] = best[proposed[kept]]
    return int(kept.sum()), weighed


def _kept(touches: np.ndarray, room: np.ndarray) -> np.ndarray:
    """Which proposals to keep, each a row of the cells it ``touches`` (rows in priority order), so that no
    cell takes more than its ``room``: in each of at most ``PASSES`` passes, a proposal is kept when it is
    among the first ``room`` left of every cell it touches, and dropped once one of them is full."""
    proposals, width = touches.shape
    kept, alive = np.zeros(proposals, bool), np.ones(proposals, bool)
    flat = touches.ravel()
    order = stable_order(flat)  # sorted once: dropping proposals keeps each cell's touches in priority order
    cell, owner = flat[order], order // width
    for _ in range(PASSES):
        if not cell.size:
            break
        starts = np.flatnonzero(np.diff(cell, prepend=-1))
        rank = np.arange(cell.size) - np.repeat(starts, np.diff(np.append(starts, cell.size)))
        fits = alive.copy()
        fits[owner[rank >= room[cell]]] = False
        kept |= fits
        room -= np.bincount(cell[fits[owner]], minlength=room.size)
        alive &= ~fits
        alive[owner[room[cell] <= 0]] = False
        left = alive[owner]
        cell, owner = cell[left], owner[left]
    return kept


def _distinct(values: np.ndarray, bound: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` for ints in [0, ``bound``): the distinct values, sorted, and each
    value's index among them; by a table of ``bound`` marks rather than a sort where ``bound`` is not far above the
    values' count (a round's cells: a sort of them took a third of the row fitting's time)."""
    if bound > 2 * values.size + 2**16:
        distinct, inverse = np.unique(values, return_inverse=True)
        return distinct, inverse.ravel()
    present = np.zeros(bound, bool)
    present[values] = True
    index = np.cumsum(present, dtype=np.int32 if bound < 2**31 else np.int64)  # 5 bytes a cell with its marks
    index -= 1
    return np.flatnonzero(present), index[values]
