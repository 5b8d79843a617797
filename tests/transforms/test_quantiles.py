"""PrivateQuantiles from a plain Beam pipeline (DirectRunner, seeded), and its checks when it is built."""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.testing.util import assert_that, equal_to

from beam_expmech.accounting import Release
from beam_expmech.predicates import CategoryCounts, HistogramCounts
from beam_expmech.transforms import GatherCounts, PredicateCounts, PrivateQuantiles

FAMILY = HistogramCounts("x", 0, 100, 1000)
VALUES = np.random.default_rng(41).normal(50, 10, 20_000)
HISTOGRAM = np.bincount(FAMILY.candidate_of(pa.record_batch({"x": VALUES})), minlength=1000)


@pytest.mark.parametrize("method", ["independent", "joint"])
def test_in_a_beam_pipeline_it_releases_what_it_releases_in_one_process(method):
    step = PrivateQuantiles(epsilon=1.0, quantiles=[0.9, 0.1, 0.5], family=FAMILY, method=method, seed=7)
    expected = step.release(HISTOGRAM)
    with beam.Pipeline() as pipeline:
        released = pipeline | beam.Create([HISTOGRAM]) | step  # col: one histogram -> one dict
        assert_that(released, equal_to([expected]))
    assert list(expected) == ["0.1", "0.5", "0.9"]  # in quantile order, values sorted
    assert list(expected.values()) == sorted(expected.values())
    np.testing.assert_allclose(list(expected.values()), np.quantile(VALUES, [0.1, 0.5, 0.9]), atol=1.0)


def test_composes_after_the_counts_of_record_batches():
    batches = [pa.record_batch({"x": VALUES[i : i + 5000]}) for i in range(0, VALUES.size, 5000)]
    step = PrivateQuantiles(epsilon=2.0, quantiles=[0.5], family=FAMILY, seed=3)
    with beam.Pipeline() as pipeline:
        released = pipeline | beam.Create(batches) | PredicateCounts(FAMILY, shard_size=128) | GatherCounts() | step
        assert_that(released, equal_to([step.release(HISTOGRAM)]))


def test_the_seed_fixes_the_draw_and_k_rows_per_unit_widen_it():
    one = PrivateQuantiles(epsilon=0.05, quantiles=[0.5], family=FAMILY, seed=11)
    assert one.release(HISTOGRAM) == one.release(HISTOGRAM)
    spread = {}
    for max_rows in (1, 50):
        draws = [
            PrivateQuantiles(epsilon=0.05, quantiles=[0.5], family=FAMILY, max_rows=max_rows, seed=s).release(HISTOGRAM)
            for s in range(40)
        ]
        spread[max_rows] = np.std([d["0.5"] for d in draws])
    assert spread[50] > 3 * spread[1]  # sensitivity K: the noise grows with K


@pytest.mark.parametrize("method", ["independent", "joint"])
def test_cost_is_epsilon_for_all_the_quantiles_together(method):
    step = PrivateQuantiles(epsilon=1.5, quantiles=[0.25, 0.5, 0.75], family=FAMILY, method=method)
    assert step.cost == Release.exponential_mechanism(1.5, "3 quantiles of x")


@pytest.mark.parametrize(
    "change,message",
    [
        ({"epsilon": 0}, "epsilon must be finite and > 0"),
        ({"epsilon": float("inf")}, "epsilon must be finite and > 0"),
        ({"quantiles": []}, "quantiles is empty"),
        ({"quantiles": "0.5"}, "quantiles must be a list of numbers"),
        ({"quantiles": [0.5, 1.0]}, "quantile 1.0 must be a number strictly between 0 and 1"),
        ({"quantiles": [0.5, 0.5]}, "quantiles has a duplicate"),
        ({"family": CategoryCounts("x", range(3))}, "family must be a HistogramCounts"),
        ({"method": "sorted"}, "method must be one of independent, joint"),
        ({"max_rows": 0}, "max_rows must be an integer >= 1"),
        ({"seed": "7"}, "seed must be None"),
        ({"quantiles": [5e-324]}, "these quantiles cannot be released on this grid"),  # found by the rehearsal
    ],
)
def test_bad_arguments_fail_when_the_transform_is_built(change, message):
    arguments = {"epsilon": 1.0, "quantiles": [0.5], "family": HistogramCounts("x", 0, 1, 8), **change}
    with pytest.raises(ValueError, match=message):
        PrivateQuantiles(**arguments)


def test_a_histogram_of_the_wrong_size_is_refused_naming_sizes_only():
    step = PrivateQuantiles(epsilon=1.0, quantiles=[0.5], family=FAMILY)
    with pytest.raises(ValueError, match=r"^expected a histogram of 1000 counts, got shape \(999,\)$"):
        step.release(HISTOGRAM[:-1])


def test_the_widest_bin_is_that_of_the_grid_the_mechanism_chooses_among():
    """JointExp regroups 3,000 bins into 1,024 uneven ones: the stated width is the widest (review 3)."""
    family = HistogramCounts("fare", 0.0, 600.0, 3_000)
    joint = PrivateQuantiles(epsilon=1, quantiles=[0.5], family=family, method="joint")
    independent = PrivateQuantiles(epsilon=1, quantiles=[0.5], family=family)
    assert joint.widest_bin == pytest.approx(0.6) and len(joint.cuts) == 1_025
    assert independent.widest_bin == pytest.approx(0.2) and len(independent.cuts) == 3_001
