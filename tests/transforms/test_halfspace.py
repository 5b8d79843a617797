"""PrivateHalfspace from a plain Beam pipeline (DirectRunner, seeded), and its checks when it is built."""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.testing.util import assert_that, equal_to

from beam_expmech import halfspaces
from beam_expmech.accounting import Release
from beam_expmech.predicates import MarginalCounts
from beam_expmech.transforms import GatherCounts, PredicateCounts, PrivateHalfspace

CANDIDATES = halfspaces.weight_grid(["-1", "0", "1"], 2, max_candidates=100)  # 9 weight vectors over (a, b)
PATTERNS = MarginalCounts(["a", "b", "y"], [2, 2, 2])
# y = a OR b: fit by a + b >= y (weights 1, 1) on every record, by no other candidate on more than 3 in 4.
ROWS = pa.record_batch({"a": [1, 1, 0, 0] * 50, "b": [0, 1, 0, 1] * 50, "y": [1, 1, 0, 1] * 50})
COUNTS = PATTERNS.count(ROWS)


def test_in_a_beam_pipeline_it_releases_what_it_releases_in_one_process():
    step = PrivateHalfspace(epsilon=0.5, candidates=CANDIDATES, seed=5)
    expected = step.release(COUNTS)
    with beam.Pipeline() as pipeline:
        released = pipeline | beam.Create([COUNTS]) | step  # col: one vector of pattern counts -> one list
        assert_that(released, equal_to([expected]))
    assert len(expected) == 2


def test_composes_after_the_counts_of_record_batches_and_finds_the_separator():
    step = PrivateHalfspace(epsilon=1.0, candidates=CANDIDATES, seed=1)
    with beam.Pipeline() as pipeline:
        released = pipeline | beam.Create([ROWS]) | PredicateCounts(PATTERNS) | GatherCounts() | step
        assert_that(released, equal_to([[1.0, 1.0]]))  # it fits 50 more records than any other: e^-50 odds


def test_sensitivity_is_k_rows_per_unit():
    fits = halfspaces.fit_counts(COUNTS, CANDIDATES)
    best = int(np.argmax(fits))
    chosen = []
    for max_rows in (1, 1000):
        step = PrivateHalfspace(epsilon=0.1, candidates=CANDIDATES, max_rows=max_rows, seed=0)
        assert step.sensitivity == max_rows
        draws = [
            PrivateHalfspace(epsilon=0.1, candidates=CANDIDATES, max_rows=max_rows, seed=s).release(COUNTS)
            for s in range(200)
        ]
        chosen.append(sum(d == CANDIDATES.weights(best) for d in draws))
    assert chosen[0] > 150 and chosen[1] < 60  # at K = 1000 the scores barely matter: about 1 in 9


def test_cost_is_one_exponential_mechanism():
    step = PrivateHalfspace(epsilon=0.7, candidates=CANDIDATES)
    assert step.cost == Release.exponential_mechanism(0.7, "halfspace over 2 features")


@pytest.mark.parametrize(
    "change,message",
    [
        ({"epsilon": -1}, "epsilon must be finite and > 0"),
        ({"epsilon": float("nan")}, "epsilon must be finite and > 0"),
        ({"candidates": [[1, -1], [0, 1]]}, "candidates must be a halfspaces.Candidates"),
        ({"max_rows": 0}, "max_rows must be an integer >= 1"),
        ({"max_rows": 2.5}, "max_rows must be an integer >= 1"),
        ({"seed": 1.5}, "seed must be None"),
    ],
)
def test_bad_arguments_fail_when_the_transform_is_built(change, message):
    with pytest.raises(ValueError, match=message):
        PrivateHalfspace(**{"epsilon": 1.0, "candidates": CANDIDATES, **change})


def test_pattern_counts_of_the_wrong_size_are_refused_naming_sizes_only():
    with pytest.raises(ValueError, match=r"^expected 8 pattern counts for 2 features$"):
        PrivateHalfspace(epsilon=1.0, candidates=CANDIDATES).release(np.zeros(4, dtype=np.int64))


def test_no_candidate_is_refused_when_it_is_built():
    empty = halfspaces.Candidates(numerators=np.zeros((0, 2), dtype=np.int64), denominator=1)
    with pytest.raises(ValueError, match="candidates is empty"):
        PrivateHalfspace(epsilon=1.0, candidates=empty)
