"""PrivateSynthesis from a plain Beam pipeline (DirectRunner, seeded), its cost, and its checks when it is built."""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.testing.util import assert_that

from beam_expmech.accounting import Release, epsilon_to_zcdp
from beam_expmech.transforms import GatherCounts, PredicateCounts, PrivateSynthesis

DOMAIN = {"a": 2, "b": 3, "c": 2}
RNG = np.random.default_rng(7)
A = RNG.integers(0, 2, 3_000)
ROWS = pa.record_batch({"a": A, "b": (A + RNG.integers(0, 2, A.size)) % 3, "c": A})  # c copies a


def synthesized(step: PrivateSynthesis) -> tuple[dict, dict]:
    """What the step releases on ROWS, in one process."""
    return step.synthesize(step.family.count(ROWS))


@pytest.mark.parametrize("method,rows", [("aim", 500), ("mwem", 500), ("blr", 4)])
def test_in_a_beam_pipeline_it_releases_what_it_releases_in_one_process(method, rows):
    step = PrivateSynthesis(method=method, domain=DOMAIN, epsilon=2.0, delta=1e-6, rows=rows, seed=3)
    table, details = synthesized(step)
    assert details["rows"] == rows and all(v.min() >= 0 and v.max() < DOMAIN[c] for c, v in table.items())

    def same_draw(released: list) -> None:
        (beam_table, beam_details), = released  # fmt: skip
        assert beam_details == details
        for column in DOMAIN:
            np.testing.assert_array_equal(beam_table[column], table[column])

    with beam.Pipeline() as pipeline:
        released = pipeline | beam.Create([ROWS]) | PredicateCounts(step.family) | GatherCounts() | step
        assert_that(released, same_draw)


def test_the_rows_keep_what_the_data_says_at_a_large_epsilon():
    table, details = synthesized(PrivateSynthesis(method="mwem", domain=DOMAIN, epsilon=50.0, rows=2_000, seed=4))
    assert np.mean(table["a"] == table["c"]) > 0.9  # c copies a in the data: a 2-way marginal the model keeps
    assert ("a", "b", "c") in [tuple(m) for m in details["measured"]] or details["measured"]


def test_cost_is_rho_for_aim_and_pure_epsilon_for_mwem_and_blr():
    aim = PrivateSynthesis(method="aim", domain=DOMAIN, epsilon=1.0, delta=1e-9)
    assert aim.rho == epsilon_to_zcdp(1.0, delta=1e-9) and aim.cost == Release.zcdp(aim.rho, "synthetic data by aim")
    assert aim.delta == 1e-9
    for method in ("mwem", "blr"):
        step = PrivateSynthesis(method=method, domain=DOMAIN, epsilon=0.5, delta=1e-9, rows=10)
        assert step.cost == Release.pure(0.5, f"synthetic data by {method}") and step.delta == 0.0


def test_the_family_is_what_the_data_pass_must_count():
    assert PrivateSynthesis(domain=DOMAIN, epsilon=1, delta=1e-9).family.marginals == [("a", "b", "c")]
    two_way = PrivateSynthesis(method="mwem", domain=DOMAIN, epsilon=1, degree=2).family.marginals
    assert two_way == [("a", "b"), ("a", "c"), ("b", "c")]
    assert PrivateSynthesis(method="blr", domain=DOMAIN, epsilon=1, rows=5).family.marginals == [("a", "b", "c")]


@pytest.mark.parametrize(
    "change,message",
    [
        ({"method": "gan"}, "method must be one of aim, mwem, blr"),
        ({"domain": {}}, "the domain has no column"),
        ({"epsilon": 0}, "epsilon must be finite and > 0"),
        ({"delta": 0}, "delta must be a number strictly between 0 and 1"),
        ({"method": "blr"}, "blr needs rows"),
        ({"degree": 4}, "degree = 4 exceeds the number of columns (3)"),
        ({"max_rows": 0}, "max_rows must be an integer >= 1"),
        ({"rounds": -1}, "rounds must be an integer >= 1"),
        ({"domain": {f"c{i}": 1000 for i in range(4)}}, "cells: too many to hold"),
        ({"method": "blr", "rows": 10**6}, "candidate datasets, over the limit"),
        ({"seed": "x"}, "seed must be None"),
    ],
)
def test_each_bad_argument_is_refused_when_it_is_built(change, message):
    arguments = {"method": "aim", "domain": DOMAIN, "epsilon": 1.0, "delta": 1e-9} | change
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        PrivateSynthesis(**arguments)


def test_counts_of_another_family_are_refused():
    """Cells that do not line up with the step's marginals could move one marginal by more than K (review 3)."""
    step = PrivateSynthesis(method="mwem", domain={"a": 2, "b": 2}, epsilon=1.0, rounds=2, seed=1)
    with pytest.raises(ValueError, match="expected the 4 counts of this step's family"):
        step.synthesize(np.array([5, 3, 2, 1, 7, 7]))
