"""A final step refuses, when the graph is built, counts that one unit can move further than its noise covers."""

from __future__ import annotations

import apache_beam as beam
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from beam_expmech.io.validation import ColumnSpec
from beam_expmech.predicates import CategoryCounts, HistogramCounts, MarginalCounts
from beam_expmech.transforms import (
    BoundContributions,
    GatherCounts,
    PredicateCounts,
    PrivateQuantiles,
    PrivateSelect,
    ValidateBatches,
)
from beam_expmech.transforms.keys import KeyCounts, PrivateKeys, PrivateTopKeys
from beam_expmech.transforms.lineage import Bounds, upstream

SPECS = [ColumnSpec("user", "any"), ColumnSpec("query", "string"), ColumnSpec("item", "int"), ColumnSpec("x", "float")]


def validated(pipeline: beam.Pipeline, name: str = "Rows"):
    batch = pa.record_batch({"user": [1, 1, 2], "query": ["a", "b", "a"], "item": [0, 1, 2], "x": [0.1, 0.5, 0.9]})
    return (pipeline | f"Create {name}" >> beam.Create([batch]) | f"Validate {name}" >> ValidateBatches(SPECS)).good


def test_key_counts_refuse_a_unit_that_no_bounding_bounded():
    """The adversarial review's case: without unit_column, each of a unit's K rows counted as a unit of its own
    ("secret" released 1,894 times in 2,000); without bounding, a unit of 1,000 rows."""
    pipeline = beam.Pipeline()
    keyed = validated(pipeline) | BoundContributions("user", 30, key_column="query", max_keys=1)
    with pytest.raises(ValueError, match="count distinct units of it"):
        _ = keyed | "NoUnit" >> KeyCounts("query")
    with pytest.raises(ValueError, match="no BoundContributions by 'user'"):
        _ = validated(pipeline, "Again") | "Unbounded" >> KeyCounts("query", unit_column="user")
    rows_only = validated(pipeline, "Once more") | "Bound rows" >> BoundContributions("user", 3)
    with pytest.raises(ValueError, match="bounded over keys of None"):
        _ = rows_only | "RowsOnly" >> KeyCounts("query", unit_column="user")
    counts = keyed | "Counted" >> KeyCounts("query", unit_column="user")
    assert upstream(counts, "_beam_expmech_counted") == [Bounds("user", 30, "query", 1)]


@pytest.mark.parametrize(("max_rows", "max_keys"), [(29, 1), (30, 0)])
def test_the_keys_final_steps_refuse_bounds_below_the_bounding(max_rows, max_keys):
    pipeline = beam.Pipeline()
    keyed = validated(pipeline) | BoundContributions("user", 30, key_column="query", max_keys=2)
    counts = keyed | KeyCounts("query", unit_column="user")
    with pytest.raises(ValueError, match="the noise would not cover it"):
        _ = counts | "Top" >> PrivateTopKeys(epsilon=1.0, delta=1e-6, k=2, max_rows=max_rows, max_keys=max_keys + 1)
    if max_keys == 0:
        with pytest.raises(ValueError, match="the noise would not cover it"):
            _ = counts | "Keys" >> PrivateKeys(epsilon=1.0, delta=1e-6, max_keys=1)
    _ = counts | "Enough" >> PrivateTopKeys(epsilon=1.0, delta=1e-6, k=2, max_rows=30, max_keys=2)


def test_a_selection_refuses_a_sensitivity_below_the_bounding():
    """Issue 35's case: BoundContributions(max_rows=8) | PredicateCounts | PrivateSelect(sensitivity=1) built and
    released an answer with an eighth of the noise it needed."""
    pipeline = beam.Pipeline()
    bounded = validated(pipeline) | BoundContributions("user", 8)
    counts = bounded | PredicateCounts(CategoryCounts("item", range(3)))
    with pytest.raises(ValueError, match="move by up to 8"):
        _ = counts | "Under" >> PrivateSelect(epsilon=1.0, sensitivity=1, num_candidates=3)
    _ = counts | "Right" >> PrivateSelect(epsilon=1.0, sensitivity=8, num_candidates=3)
    unbounded = validated(pipeline, "Unbounded") | "Each row" >> PredicateCounts(CategoryCounts("item", range(3)))
    _ = unbounded | "A row a unit" >> PrivateSelect(epsilon=1.0, sensitivity=1, num_candidates=3)


def test_quantiles_refuse_max_rows_below_the_bounding_through_gather_counts():
    pipeline = beam.Pipeline()
    histogram = validated(pipeline) | BoundContributions("user", 5) | PredicateCounts(HistogramCounts("x", 0, 1, 8))
    gathered = histogram | GatherCounts()
    with pytest.raises(ValueError, match="move by up to 5"):
        _ = gathered | PrivateQuantiles(epsilon=1.0, quantiles=[0.5], family=HistogramCounts("x", 0, 1, 8), max_rows=4)


class TwiceEach(MarginalCounts):
    contribution = 2  # a row adds 2 to its count


def test_counts_of_a_family_whose_rows_count_twice_need_twice_the_sensitivity():
    family = TwiceEach(["item"], [3])
    pipeline = beam.Pipeline()
    counts = validated(pipeline) | BoundContributions("user", 3) | PredicateCounts(family)
    with pytest.raises(ValueError, match="move by up to 6"):
        _ = counts | PrivateSelect(epsilon=1.0, sensitivity=3, num_candidates=3)


def test_two_bounded_paths_that_meet_are_refused():
    """The second review's case: monthly exports each bounded, then flattened: one unit's K rows on each (its key
    counted as 2 units, a count moved by 2K); a bounded PCollection flattened with itself alike."""
    pipeline = beam.Pipeline()
    months = [validated(pipeline, m) | f"Bound {m}" >> BoundContributions("user", 5, key_column="query", max_keys=1)
              for m in ("jan", "feb")]  # fmt: skip
    both = months | "Both" >> beam.Flatten()
    with pytest.raises(ValueError, match="rows bounded on 2 paths meet here"):
        _ = both | "Keys" >> KeyCounts("query", unit_column="user")
    with pytest.raises(ValueError, match="rows bounded on 2 paths meet here"):
        _ = both | "Items" >> PredicateCounts(CategoryCounts("item", range(3)))
    twice = (months[0], months[0]) | "Twice" >> beam.Flatten()
    with pytest.raises(ValueError, match="rows bounded on 2 paths meet here"):
        _ = twice | "Twice keys" >> KeyCounts("query", unit_column="user")
    _ = (
        both
        | "Again" >> BoundContributions("user", 5, key_column="query", max_keys=1)
        | "Once" >> KeyCounts("query", unit_column="user")
    )  # merged, then bounded again by the same unit: K rows a unit in all
    counted = [months[1] | f"Count {i}" >> PredicateCounts(CategoryCounts("item", range(3))) for i in range(2)]
    with pytest.raises(ValueError, match="counts of 2 counting steps"):
        _ = counted | "Sum" >> beam.Flatten() | PrivateSelect(epsilon=1.0, sensitivity=5, num_candidates=3)


def test_bounding_again_by_another_unit_is_refused():
    """The second review's case: bounded by user (K 5), then by session (K 1): one user moved a count by 5 against
    a sensitivity of 1."""
    pipeline = beam.Pipeline()
    by_user = validated(pipeline) | BoundContributions("user", 5)
    with pytest.raises(ValueError, match="bounded by unit 'user' already"):
        _ = by_user | "Session" >> BoundContributions("item", 1)


def test_a_final_step_refuses_counts_of_another_family():
    """The second review's case: ExpressionCounts (a row in up to 100 counts) read as a HistogramCounts."""
    from beam_expmech.predicates import ExpressionCounts

    pipeline = beam.Pipeline()
    grid = HistogramCounts("x", 0, 1, 8)
    edges = (0.0, 0.25, 0.5, 0.75, 0.8, 0.85, 0.9, 0.95)
    steps = ExpressionCounts([pc.field("x") >= e for e in edges], columns=["x"])
    histogram = validated(pipeline) | PredicateCounts(steps) | GatherCounts()
    with pytest.raises(ValueError, match="over other candidates than the HistogramCounts"):
        _ = histogram | PrivateQuantiles(epsilon=1.0, quantiles=[0.5], family=grid, max_rows=1)
