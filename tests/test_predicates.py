"""Predicate families against plain numpy counts."""

from __future__ import annotations

import warnings

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from beam_expmech.predicates import (
    CANDIDATE,
    CategoryCounts,
    ExpressionCounts,
    HistogramCounts,
    MarginalCounts,
    MarginalWorkload,
)


@pytest.fixture
def batch():
    rng = np.random.default_rng(0)
    return pa.record_batch(
        {
            "x": rng.integers(-2, 8, 5000),
            "y": rng.integers(0, 3, 5000),
            "s": pa.array(rng.choice(["red", "green", "blue", "teal"], 5000)),
        }
    )


def test_category_counts_over_a_range(batch):
    family = CategoryCounts("x", range(0, 5))
    x = batch.column("x").to_numpy()
    assert family.count(batch).tolist() == [int((x == v).sum()) for v in range(5)]
    indices, counts = family.sparse_count(batch)
    assert np.array_equal(family.count(batch)[indices], counts) and (counts > 0).all()
    assert family.labels([0, 4]) == ["0", "4"]


def test_category_counts_over_labels(batch):
    family = CategoryCounts("s", ["blue", "red", "gold"])
    s = np.array(batch.column("s").to_pylist())
    assert family.count(batch).tolist() == [int((s == "blue").sum()), int((s == "red").sum()), 0]
    assert family.contribution == 1 and family.monotonic


def test_marginal_counts(batch):
    family = MarginalCounts(["x", "y"], [4, 3])
    x, y = batch.column("x").to_numpy(), batch.column("y").to_numpy()
    expected = [int(((x == a) & (y == b)).sum()) for a in range(4) for b in range(3)]
    assert family.count(batch).tolist() == expected  # x outside 0..3 is in no cell
    assert family.labels([0, 11]) == ["x=0,y=0", "x=3,y=2"]


def test_expression_counts(batch):
    family = ExpressionCounts(
        [pc.field("x") > 3, (pc.field("s") == "red") & (pc.field("y") == 1)],
        columns=["x", "s", "y"],
        labels=["big", "red1"],
    )
    x, y, s = batch.column("x").to_numpy(), batch.column("y").to_numpy(), np.array(batch.column("s").to_pylist())
    assert family.count(batch).tolist() == [int((x > 3).sum()), int(((s == "red") & (y == 1)).sum())]
    assert family.labels([1]) == ["red1"]


@pytest.mark.parametrize(
    "family,kind",
    [
        (CategoryCounts("x", range(0, 5)), np.uint8),  # x in -2..7: some rows in no candidate
        (CategoryCounts("s", ["blue", "red", "gold"]), np.uint8),
        (CategoryCounts("x", range(-2, 254)), np.uint8),  # 256 candidates: indices up to 255
        (CategoryCounts("x", range(-2, 255)), np.uint16),
        (CategoryCounts("x", range(-1000, 1000)), np.uint16),
        (HistogramCounts("x", 0.0, 4.0, 1 << 16), np.uint16),  # clamped: every row counts; 2^16 bins in 2 bytes
        (MarginalCounts(["x", "y"], [4, 3]), np.uint8),
    ],
    ids=["range", "labels", "256", "257", "wide range", "histogram", "marginal"],
)
def test_compact_rows_count_as_the_rows_they_came_from(batch, family, kind):
    """What bounding carries: the rows in some candidate, each as its candidate's index alone, which the
    compacted family counts as the family counts the originals; other columns (the unit) stay."""
    batch = batch.append_column("unit", pa.array(np.arange(batch.num_rows)))
    compact = family.compact_rows(batch)
    counted = family.candidate_of(batch) >= 0
    assert compact.schema.names == [c for c in batch.schema.names if c not in family.columns] + [CANDIDATE]
    assert compact.column(CANDIDATE).type == pa.from_numpy_dtype(kind)
    assert compact.column("unit").to_pylist() == np.flatnonzero(counted).tolist()
    assert np.array_equal(family.compacted.count(compact), family.count(batch))
    indices, _ = family.compacted.sparse_count(compact)
    assert np.array_equal(indices, np.flatnonzero(family.count(batch)))
    assert family.compacted.labels([0, 1]) == family.labels([0, 1])
    assert (family.compacted.contribution, family.compacted.monotonic) == (family.contribution, family.monotonic)


def test_a_workload_carries_each_row_as_its_joint_cell_where_the_joint_domain_is_small():
    """Marginals in another column order than the joint cell's (the transpose), a 1-way, and a 3-way."""
    rng = np.random.default_rng(1)
    batch = pa.record_batch({"x": rng.integers(0, 4, 3000), "y": rng.integers(0, 3, 3000),
                             "z": rng.integers(0, 5, 3000), "unit": np.arange(3000)})  # fmt: skip
    family = MarginalWorkload([("y", "x"), ("z",), ("z", "x", "y")], {"x": 4, "y": 3, "z": 5})
    compact = family.compact_rows(batch)
    assert compact.schema.names == ["unit", CANDIDATE] and compact.column(CANDIDATE).type == pa.uint8()
    assert np.array_equal(family.compacted.count(compact), family.count(batch))
    assert family.compacted.labels([0, 12]) == family.labels([0, 12])
    outside = pa.record_batch({"x": [4], "y": [0], "z": [0]})  # validation sends such a row to the dead letter
    with pytest.raises(ValueError, match="outside its column's domain"):
        family.compact_rows(outside)


def test_a_workload_of_a_large_joint_domain_carries_its_rows_as_they_are(batch):
    family = MarginalWorkload([("x", "y")], {"x": 1 << 10, "y": 1 << 10})
    assert family.compact_rows(batch) is batch and family.compacted is family


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda: CategoryCounts("x", []), "empty"),
        (lambda: CategoryCounts("x", ["a", "b", "a"]), "duplicated: a"),
        (lambda: CategoryCounts("x", range(3, 3)), "non-empty range"),
        (lambda: MarginalCounts(["a"], [0]), "domain size"),
        (lambda: ExpressionCounts([], columns=[]), "empty"),
        (lambda: HistogramCounts("x", 0, 1e-310, 1024), "beyond floating point"),  # review 5, finding 3
        (lambda: HistogramCounts("x", -1e308, 1e308, 4), "beyond floating point"),
        (lambda: HistogramCounts("x", 1e12, 1e12 + 1, 1 << 16), "finer than floating point"),  # bins of 1/8 ulp
    ],
)
def test_bad_families(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_a_value_on_a_histogram_edge_is_in_the_bin_its_label_names():
    """Review 11: (v - lower) * bins / (upper - lower) rounds, and put edges a bin low; now every edge, and the
    floats either side of it, go to the bin whose [edges[i], edges[i + 1]) holds them."""
    rng = np.random.default_rng(11)
    for _ in range(200):
        lower = float(rng.uniform(-1e3, 1e3))
        family = HistogramCounts("x", lower, lower + float(rng.uniform(1e-3, 1e4)), int(rng.integers(1, 5000)))
        edges = family.edges
        values = np.concatenate([edges, np.nextafter(edges, -np.inf), np.nextafter(edges, np.inf), [-1e308, 1e308]])
        codes = family.candidate_of(pa.record_batch({"x": values}))
        expected = np.clip(np.searchsorted(edges, values, side="right") - 1, 0, family.num_candidates - 1)
        assert np.array_equal(codes, expected)


def test_histogram_codes_of_huge_values_warn_of_nothing():
    """A warning on stderr would tell of the data (review 11): 1e308 over a narrow grid overflows to inf."""
    family = HistogramCounts("x", 0.0, 1e-300, 1000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        codes = family.candidate_of(pa.record_batch({"x": [1e308, -1e308, 5.555e-301]}))
    assert codes.tolist() == [999, 0, 555]


def test_histogram_codes_of_nan_and_null_are_in_no_bin_and_warn_of_nothing():
    """Review 12: NaN and null reach the library's own callers (validation stops them on the command line):
    they were cast to an integer with a warning on stderr, and to a bin on platforms that cast NaN to 0."""
    family = HistogramCounts("x", 0.0, 1.0, 10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        codes = family.candidate_of(pa.record_batch({"x": pa.array([None, 0.55, float("nan"), 1.0], pa.float64())}))
    assert codes.tolist() == [-1, 5, -1, 9]
    assert family.count(pa.record_batch({"x": pa.array([None, 0.55], pa.float64())})).sum() == 1


def test_histogram_labels_tell_close_edges_apart_and_close_the_last_bin():
    """Review 12: six digits gave ten bins over [1e6, 1e6 + 1] one label; the last bin holds its upper edge."""
    family = HistogramCounts("x", 1e6, 1e6 + 1, 10)
    labels = family.labels(range(10))
    assert len(set(labels)) == 10
    assert labels[0] == "[1000000.0, 1000000.1)" and labels[-1] == "[1000000.9, 1000001.0]"
    assert HistogramCounts("x", 0, 1, 4).labels([0, 3]) == ["[0.0, 0.25)", "[0.75, 1.0]"]
