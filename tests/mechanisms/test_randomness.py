"""Random sources: the OS CSPRNG by default, seeded sources only for tests and marked not private."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from beam_expmech.mechanisms import RandomSource, random_source
from beam_expmech.mechanisms.randomness import stream_source


def test_default_is_the_os_csprng_and_private():
    source = random_source(None)
    assert source.private
    a, b = source.uint32(4), source.uint32(4)
    assert a.dtype == np.uint32 and not np.array_equal(a, b)


def test_seeded_sources_repeat_and_are_not_private():
    a, b = random_source(7), random_source(7)
    assert not a.private
    assert np.array_equal(a.uint16(100), b.uint16(100))
    assert a.bits(77) == b.bits(77)
    generator = np.random.default_rng(1)
    assert random_source(generator).private is False
    source = RandomSource()
    assert random_source(source) is source


def test_bits_are_uniform_in_range():
    source = random_source(3)
    draws = np.array([source.bits(5) for _ in range(6400)])
    assert draws.min() == 0 and draws.max() == 31
    counts = np.bincount(draws, minlength=32)
    assert np.abs(counts - 200).max() < 80  # 5.6 standard deviations


@pytest.mark.parametrize("bad", ["seed", 1.5, True])
def test_bad_rng(bad):
    with pytest.raises(ValueError, match="rng"):
        random_source(bad)


def test_a_copied_source_never_replays_its_pool():
    """A step is pickled to every worker and run: a copy of a source must not draw the bits its original drew."""
    source = RandomSource()
    source.bits(8)  # fills the 4 KiB pool
    copies = [pickle.loads(pickle.dumps(source)) for _ in range(2)]
    draws = {c.bits(128) for c in copies} | {source.bits(128)}
    assert len(draws) == 3


def test_a_stream_source_is_the_os_unless_a_test_seeds_it_and_each_stream_is_its_own():
    assert stream_source(None, 3).private
    first, again, other = (stream_source(7, s).uint32(4).tolist() for s in (1, 1, 2))
    assert first == again and first != other and not stream_source(7, 1).private


def test_integers_below_are_exactly_uniform_per_row_whatever_the_bound():
    source = random_source(11)
    bounds = np.repeat(np.array([1, 3, 7, 2**62 + 1]), 6000)
    draws = source.integers_below(bounds)
    assert draws.dtype == np.int64 and np.all((draws >= 0) & (draws < bounds))
    assert np.all(draws[bounds == 1] == 0)
    for n in (3, 7):
        counts = np.bincount(draws[bounds == n], minlength=n)
        expected = 6000 / n
        assert np.abs(counts - expected).max() < 5 * np.sqrt(expected)
    assert draws[bounds == 2**62 + 1].max() > 2**61  # the whole range, not its low bits
    with pytest.raises(ValueError, match="at least 1"):
        source.integers_below(np.array([0]))


def test_unit_floats_lie_in_0_1_and_are_uniform():
    values = random_source(12).unit_floats(20_000)
    assert values.dtype == np.float64 and values.min() >= 0 and values.max() < 1
    counts = np.bincount((values * 10).astype(int), minlength=10)
    assert np.abs(counts - 2000).max() < 5 * np.sqrt(2000)
