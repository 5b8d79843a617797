"""PredicateCounts and GatherCounts: all marginals of a workload in one vector, summed across batches on Beam."""

from __future__ import annotations

import itertools

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.testing.util import assert_that, equal_to

from beam_expmech.predicates import MarginalWorkload
from beam_expmech.transforms import GatherCounts, PredicateCounts


def table(rows: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({"a": rng.integers(0, 3, rows), "b": rng.integers(0, 2, rows), "c": rng.integers(0, 4, rows)})


def test_workload_counts_every_marginal_in_one_vector():
    data = table(5000)
    domain = {"a": 3, "b": 2, "c": 4}
    workload = MarginalWorkload(list(itertools.combinations("abc", 2)), domain)
    assert workload.num_candidates == 3 * 2 + 3 * 4 + 2 * 4
    split = workload.split(workload.count(data.to_batches()[0]))
    for (x, y), counts in split.items():
        expected = np.zeros((domain[x], domain[y]), int)
        np.add.at(expected, (data.column(x).to_numpy(), data.column(y).to_numpy()), 1)
        np.testing.assert_array_equal(counts, expected)
    assert workload.labels([0, 6]) == ["a=0,b=0", "a=0,c=0"]


def test_workload_on_beam_sums_across_batches():
    data = table(20_000, seed=1)
    workload = MarginalWorkload([("a",), ("b", "c")], {"a": 3, "b": 2, "c": 4})
    expected = workload.count(data.combine_chunks().to_batches()[0]).tolist()
    with beam.Pipeline() as pipeline:
        counts = (
            pipeline
            | beam.Create(data.to_batches(max_chunksize=1500))
            | PredicateCounts(workload)
            | GatherCounts()
            | beam.Map(np.ndarray.tolist)
        )
        assert_that(counts, equal_to([expected]))
