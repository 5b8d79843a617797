"""Rows from a model's conditional tables: each row's value follows its table, a group's counts are
within one row of their expectation, and the values come in a random order."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from sampling import assert_follows
from scipy import stats

from beam_expmech.mechanisms.randomness import random_source
from beam_expmech.synth.sampling import ROW_BYTES, allocate, cells_of, code_dtype, split_cells


def test_each_groups_counts_are_within_one_row_of_their_expectation():
    rng = np.random.default_rng(1)
    table = rng.dirichlet(np.ones(7), size=5) * rng.uniform(1, 50, size=(5, 1))  # rows not normalised
    table[3] = 0.0  # a condition of probability 0 is uniform
    condition = rng.integers(0, 5, size=10_001)
    values = allocate(table, condition, random_source(2))
    assert values.dtype == np.int64 and values.shape == condition.shape
    for c in range(5):
        rows = values[condition == c]
        expected = rows.size * (table[c] / table[c].sum() if table[c].sum() else np.full(7, 1 / 7))
        assert np.all(np.abs(np.bincount(rows, minlength=7) - expected) < 1)


def test_a_rows_value_follows_its_table_whatever_its_place():
    """The first row of a group, over many draws, follows the table (a systematic sample's first point
    alone would not: it lies in [0, 1/n))."""
    table = np.array([[0.5, 0.3, 0.2]])
    source = random_source(3)
    firsts = [int(allocate(table, np.zeros(6, np.int64), source)[0]) for _ in range(3000)]
    assert_follows(firsts, {0: 0.5, 1: 0.3, 2: 0.2})


def test_values_come_in_a_random_order_not_the_rows():
    """Handed out in the rows' order (Private-PGM's "round"), they would rise with the row number and
    correlate columns the model leaves independent."""
    values = allocate(np.array([[0.25, 0.25, 0.25, 0.25]]), np.zeros(20_000, np.int64), random_source(4))
    assert abs(stats.spearmanr(np.arange(values.size), values).statistic) < 0.05
    codes = allocate(np.full((2, 2), 0.5), np.arange(20_000) % 2, random_source(5))
    assert abs(np.corrcoef(codes[::2], codes[1::2])[0, 1]) < 0.05  # two groups drawn independently


def test_no_rows():
    assert allocate(np.ones((2, 3)), np.zeros(0, np.int64), random_source(6)).size == 0


def test_groups_of_one_row_each_draw_their_own_offset():
    """Review 9: one offset shared by every group made 10,000 one-row groups all take one value."""
    values = allocate(np.full((10_000, 2), 0.5), np.arange(10_000), random_source(7))
    assert 0.45 < values.mean() < 0.55
    assert abs(np.corrcoef(values[:-1], values[1:])[0, 1]) < 0.05


class _Highest:
    """A source whose every word is 2^32 - 1: the last point of every group."""

    def uint32(self, n: int) -> np.ndarray:
        return np.full(n, 0xFFFFFFFF, np.uint32)


def test_a_value_of_probability_zero_is_never_drawn_however_many_conditions():
    """Review 9: shifted by a float, a point near 1 of condition 600,000 rounded into the next row."""
    table = np.zeros((600_002, 2))
    table[:, 0] = 1.0
    assert not allocate(table, np.full(8, 600_000), _Highest()).any()


def test_a_condition_outside_the_table_is_refused():
    with pytest.raises(ValueError, match="outside the table"):
        allocate(np.ones((1, 2)), np.array([0, 5]), random_source(8))


def test_cells_split_into_codes_each_in_the_narrowest_type_and_back():
    sizes = [3, 300, 2, 70_000]
    rng = np.random.default_rng(9)  # test-only
    cells = rng.integers(0, np.prod(sizes), 5_000)
    codes = split_cells(cells, sizes)
    for got, expected in zip(codes, np.unravel_index(cells, sizes), strict=True):
        assert np.array_equal(got, expected)
    assert [c.dtype for c in codes] == [np.uint8, np.uint16, np.uint8, np.uint32]
    assert np.array_equal(cells_of(codes, sizes), cells)
    assert code_dtype(256) == np.uint8 and code_dtype(257) == np.uint16 and code_dtype(1) == np.uint8


def test_drawing_holds_no_more_than_row_bytes_a_row_beside_its_codes():
    """What row_fitting.memory_bound counts for drawing (sampling.ROW_BYTES), against tracemalloc's peak of
    allocate and a split, as a model's sample runs them (600,000 rows, 40 conditions)."""
    rows = 600_000
    condition = np.arange(rows, dtype=np.int64) % 40
    table = np.random.default_rng(10).dirichlet(np.ones(12), 40)  # test-only
    tracemalloc.start()
    try:
        held = tracemalloc.get_traced_memory()[0]
        codes = split_cells(allocate(table, condition, random_source(11)), [3, 4])
        peak = tracemalloc.get_traced_memory()[1] - held
    finally:
        tracemalloc.stop()
    assert peak <= rows * ROW_BYTES and sum(c.nbytes for c in codes) == 2 * rows
