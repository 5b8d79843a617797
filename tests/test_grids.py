"""NumericGrid: its bins, clamping, integer ranges, and the checks of its public parameters when built."""

from __future__ import annotations

import math

import numpy as np
import pytest

from beam_expmech.grids import MAX_BINS, NumericGrid


def test_values_take_their_bins_codes_and_values_outside_are_clamped_and_flagged():
    grid = NumericGrid(0, 10, 5)  # bins [0, 2) [2, 4) [4, 6) [6, 8) [8, 10]
    values = np.array([-3.0, 0.0, 1.99, 2.0, 7.5, 9.99, 10.0, 10.5])
    codes, clamped = grid.codes(values)
    assert codes.tolist() == [0, 0, 0, 1, 3, 4, 4, 4]
    assert clamped.tolist() == [True, False, False, False, False, False, False, True]
    assert codes.dtype == np.int64


def test_an_integer_grid_bins_integers_exactly_as_the_float_edges_do():
    grid = NumericGrid(17, 91, 16, integer=True)  # width 4.625
    first, last = grid.integer_ranges
    assert first[:3].tolist() == [17, 22, 27] and last[:3].tolist() == [21, 26, 30] and last[-1] == 91
    values = np.arange(0, 120)
    codes, clamped = grid.codes(values)
    float_codes, float_clamped = NumericGrid(17, 91, 16).codes(values.astype(float))
    assert codes.tolist() == float_codes.tolist() and clamped.tolist() == float_clamped.tolist()
    inside = (values >= 17) & (values <= 91)
    assert clamped.tolist() == (~inside).tolist()
    assert np.all(first[codes[inside]] <= values[inside]) and np.all(values[inside] <= last[codes[inside]])
    assert set(codes[values < 17]) == {0} and set(codes[values > 91]) == {15}
    # beyond float64's exact integers the comparison stays exact
    big = NumericGrid(-(2**53), 2**53, 2, integer=True)
    assert big.codes(np.array([2**53 + 1, -1, 0]))[1].tolist() == [True, False, False]


def test_the_manifest_states_the_grid():
    assert NumericGrid(17, 91, 16, integer=True).manifest() == {"lower": 17, "upper": 91, "bins": 16, "type": "integer"}
    assert NumericGrid(0, 1.5, 3).manifest()["type"] == "float"


@pytest.mark.parametrize(
    "lower,upper,bins,integer,message",
    [
        (5, 5, 2, False, "lower must be below upper"),
        (6, 5, 2, False, "lower must be below upper"),
        (math.nan, 5, 2, False, "lower must be finite"),
        (0, math.inf, 2, False, "upper must be finite"),
        (0, 10**400, 2, False, "upper must be finite"),
        ("0", 5, 2, False, "lower must be a number"),
        (True, 5, 2, False, "lower must be a number"),
        (0, 5, 0, False, "bins must be between 1 and 10,000"),
        (0, 5, MAX_BINS + 1, False, "bins must be between 1 and 10,000"),
        (0, 5, 2.0, False, "bins must be an integer"),
        (0, 5, "16", False, "bins must be an integer"),
        (0, 5, True, False, "bins must be an integer"),
        (1e16, 1e16 + 2, 1000, False, "too narrow for floating point"),
        (0, 5, 10, True, "bin 1 of 10 over [0, 5] holds no integer"),
        (0.2, 0.8, 1, True, "bin 0 of 1 over [0.2, 0.8] holds no integer"),
        (0, 2**54, 2, True, "within +-2^53"),
    ],
)
def test_a_bad_grid_is_refused_when_built(lower, upper, bins, integer, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("+", r"\+").replace("^", r"\^")):
        NumericGrid(lower, upper, bins, integer=integer)


def test_edges_near_released_points_snap_to_a_public_lattice_and_increase_strictly():
    grid = NumericGrid.near(17, 91, 8, integer=True, points=np.array([91, 20, 20, 20.5, 40, 60, 90.9]))  # unsorted
    assert grid.edges.tolist() == [17, 20, 21, 22, 40, 60, 89, 90, 91]  # ties pushed apart, the last below upper
    first, last = grid.integer_ranges
    assert np.all(first <= last)  # every bin holds an integer
    floats = NumericGrid.near(0, 1, 4, integer=False, points=np.array([0.0, 0.0, 0.5]))
    assert floats.edges.tolist() == [0, 2**-16, 2**-15, 0.5, 1] and floats.manifest()["edges"] == floats.edges.tolist()
    assert np.array_equal(floats.codes(np.array([0.00002, 0.7]))[0], [1, 3])
    with pytest.raises(ValueError, match="need more integers"):
        NumericGrid.near(0, 3, 4, integer=True, points=np.zeros(3))
    with pytest.raises(ValueError, match="too narrow for floating point"):
        NumericGrid.near(1e16, 1e16 + 64, 3, integer=False, points=np.zeros(2))
    with pytest.raises(ValueError, match="need 2 points"):
        NumericGrid.near(0, 1, 3, integer=False, points=np.zeros(3))
