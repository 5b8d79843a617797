"""Domain compression: which codes merge, counts added up exactly, and the model answering on the original codes."""

from __future__ import annotations

import itertools
import sys

import numpy as np
import pytest

from beam_expmech.mechanisms.randomness import random_source
from beam_expmech.synth.compression import CompressedModel, DomainCompression
from beam_expmech.synth.graphical_model import GraphicalModel, Measurement


def test_codes_under_the_threshold_merge_into_one_after_the_kept_ones():
    estimates = {"a": np.array([50.0, 2.0, 40.0, -3.0, 9.0]), "b": np.array([5.0, 20.0, 30.0]), "c": np.array([9, 8.0])}
    compression = DomainCompression.of_estimates(estimates, {"a": 4.0, "b": 4.0, "c": 10.0}, rare=3.0)
    np.testing.assert_array_equal(compression.codes["a"], [0, 2, 1, 2, 2])  # 50 and 40 kept, in order
    np.testing.assert_array_equal(compression.codes["b"], [0, 1, 2])  # one rare code: nothing to merge
    np.testing.assert_array_equal(compression.codes["c"], [0, 1])  # both rare: the likeliest stays
    assert compression.domain == {"a": 3, "b": 3, "c": 2}
    assert compression.merges()
    np.testing.assert_allclose(compression.within["a"][[1, 3, 4]], np.array([2, 0, 9]) / 11, atol=1e-9)
    np.testing.assert_allclose(compression.within["a"][[0, 2]], 1.0)
    assert compression.within["a"][3] > 0  # no code made impossible
    assert not DomainCompression.of_estimates(estimates, {"a": 0.1, "b": 0.1, "c": 0.1}).merges()


def test_an_ordered_columns_merged_code_is_spread_by_its_estimates_smoothed_over_neighbouring_bins():
    estimate = np.array([2.0, 100.0, -4.0, 6.0, 1.0])  # codes 0, 2, 3, 4 rare under 3 x 4
    compression = DomainCompression.of_estimates(
        {"x": estimate, "c": estimate}, {"x": 4.0, "c": 4.0}, rare=3.0, ordered={"x"}, smoothing=0.5
    )
    np.testing.assert_array_equal(compression.codes["x"], compression.codes["c"])  # smoothing never moves the map
    np.testing.assert_array_equal(compression.codes["x"], [1, 0, 1, 1, 1])
    # clipped [2, 100, 0, 6, 1], each blended with its neighbours at half weight, renormalised at the ends
    smoothed = np.array([(2 + 50) / 1.5, (0 + 53) / 2, (6 + 0.5) / 2, (1 + 3) / 1.5])
    np.testing.assert_allclose(compression.within["x"][[0, 2, 3, 4]], smoothed / smoothed.sum(), rtol=1e-9)
    np.testing.assert_allclose(compression.within["c"][[0, 2, 3, 4]], np.array([2, 0, 6, 1]) / 9, atol=1e-9)
    assert compression.within["x"][1] == compression.within["c"][1] == 1.0
    unsmoothed = DomainCompression.of_estimates({"x": estimate}, {"x": 4.0}, rare=3.0, ordered={"x"}, smoothing=0.0)
    np.testing.assert_array_equal(unsmoothed.within["x"], compression.within["c"])

    # any finite weight, however large, leaves the shares finite: each code then takes its neighbours' mean
    for weight in (1e300, sys.float_info.max):
        heavy = DomainCompression.of_estimates({"x": estimate * 1e9}, {"x": 4e9}, ordered={"x"}, smoothing=weight)
        assert np.isfinite(heavy.within["x"]).all()
        np.testing.assert_allclose(heavy.within["x"][[0, 2, 3, 4]], np.array([100, 53, 0.5, 6]) / 159.5, rtol=1e-6)


def compression_of(domain, rng) -> DomainCompression:
    estimates = {c: rng.exponential(10.0, size) for c, size in domain.items()}
    return DomainCompression.of_estimates(estimates, {c: 3.0 for c in domain}, rare=2.0)


def test_counts_are_added_up_exactly_onto_the_merged_codes():
    rng = np.random.default_rng(1)
    domain = {"a": 7, "b": 3, "c": 9}
    compression = compression_of(domain, rng)
    assert compression.merges()
    counts = rng.integers(0, 2**40, (9, 7))  # columns (c, a): any order
    merged = compression.counts(counts, ("c", "a"))
    expected = np.zeros((compression.domain["c"], compression.domain["a"]), np.int64)
    np.add.at(expected, (compression.codes["c"][:, None], compression.codes["a"][None, :]), counts)
    np.testing.assert_array_equal(merged, expected)
    assert merged.dtype == np.int64
    # one row more is one count more, in one cell: the sensitivity stays
    neighbour = counts.copy()
    neighbour[4, 2] += 1
    assert np.abs(compression.counts(neighbour, ("c", "a")) - merged).sum() == 1


def test_a_merged_measurement_counts_the_noisy_cells_in_each_value():
    compression = DomainCompression.of_estimates({"a": np.array([40.0, 1.0, 2.0, 3.0])}, {"a": 2.0}, rare=3.0)
    merged = compression.measurement(Measurement(("a",), np.array([40.0, 1.0, 2.0, 3.0]), 2.0))
    np.testing.assert_array_equal(merged.values, [40.0, 6.0])
    np.testing.assert_array_equal(merged.summed, [1, 3])
    np.testing.assert_allclose(merged.weights(), [1 / 4, 1 / 12])
    assert merged.noisy_cells() == 4


def test_the_model_on_the_original_codes_is_the_merged_one_spread_by_the_within_shares():
    rng = np.random.default_rng(2)
    domain = {"a": 6, "b": 4, "c": 5}
    compression = compression_of(domain, rng)
    merged = GraphicalModel(compression.domain, [("a", "b"), ("b", "c")], total=1000.0)
    merged.potentials = [rng.normal(size=p.shape) for p in merged.potentials]
    merged.marginals = merged._calibrate(merged.potentials)
    model = CompressedModel(merged, compression)
    joint = merged.project(("a", "b", "c"))[np.ix_(*(compression.codes[c] for c in domain))]
    joint = joint * np.einsum("i,j,k->ijk", *(compression.within[c] for c in domain))
    assert joint.sum() == pytest.approx(1000.0)
    for columns in itertools.chain.from_iterable(itertools.permutations(domain, k) for k in (1, 2, 3)):
        summed = joint.sum(axis=tuple(i for i, c in enumerate(domain) if c not in columns))
        kept = [c for c in domain if c in columns]
        expected = np.transpose(summed, [kept.index(c) for c in columns])
        np.testing.assert_allclose(model.project(columns), expected, rtol=1e-9, atol=1e-9)
    assert model.total == 1000.0


def test_rows_drawn_follow_the_model_on_the_original_codes():
    rng = np.random.default_rng(3)
    domain = {"a": 6, "b": 5}
    compression = compression_of(domain, rng)
    merged = GraphicalModel(compression.domain, [("a", "b")], total=1.0)
    merged.potentials = [rng.normal(size=p.shape) for p in merged.potentials]
    merged.marginals = merged._calibrate(merged.potentials)
    model = CompressedModel(merged, compression)
    rows = model.sample(200_000, random_source(4))
    observed = np.zeros((6, 5))
    np.add.at(observed, (rows["a"], rows["b"]), 1)
    expected = model.project(("a", "b")) * 200_000
    assert (np.abs(observed - expected) <= 5 * np.sqrt(expected) + 2).all()


@pytest.mark.parametrize("a_merges", [False, True])
def test_a_column_of_many_codes_costs_memory_in_proportion_to_its_codes(a_merges):
    """Review 13: one code x merged-code table a column (an identity where nothing merged) took 298 GiB for a
    column of 200,000 codes, after the budget was spent."""
    import tracemalloc

    rng = np.random.default_rng(5)
    size = 200_000
    a = np.full(size, 1e6) if not a_merges else np.where(np.arange(size) < 10, 1e6, 0.0)
    compression = DomainCompression.of_estimates({"a": a, "b": np.array([1e6, 0, 0, 1e6, 0])}, {"a": 1.0, "b": 1.0})
    assert compression.merges("a") is a_merges and compression.merges("b")
    counts = rng.integers(0, 100, (size, 5))
    tracemalloc.start()
    try:
        merged = compression.counts(counts, ("a", "b"))
        model = GraphicalModel(compression.domain, [("a",), ("b",)], total=1000.0)
        rows = CompressedModel(model, compression).sample(20_000, random_source(6))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert merged.sum() == counts.sum()
    assert rows["a"].max() < size and rows["b"].max() < 5
    assert peak < 20 * counts.nbytes
