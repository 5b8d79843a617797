"""PrivateSynthesis from a plain Beam pipeline (DirectRunner, seeded), its cost, and its checks when it is built."""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.testing.util import assert_that
from public_tables import load, marginals

from beam_expmech.accounting import Release, epsilon_to_zcdp
from beam_expmech.grids import NumericGrid
from beam_expmech.mechanisms import random_source
from beam_expmech.synth import MAX_MEMORY, aim, mwem
from beam_expmech.synth.row_fitting import synthetic_rows
from beam_expmech.transforms import GatherCounts, PredicateCounts, PrivateSynthesis
from beam_expmech.transforms.synthesis import DEFAULT_MAX_SYNTHETIC_ROWS, numbers_in_bins

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


@pytest.mark.parametrize("method", ["aim", "mwem"])
def test_the_rows_answer_the_workload_closer_to_the_model_than_rows_drawn_from_it(method):
    """The step's rows are its model's draw moved towards the model's answers on the workload (row_fitting)."""
    batch, domain = load("nltcs", 6)
    step = PrivateSynthesis(method=method, domain=domain, epsilon=1.0, delta=1e-9, rows=3_000, seed=8)
    counts = step.family.count(batch)
    table, _ = step.synthesize(counts)
    workload = step.family.split(counts)
    if method == "aim":
        model = aim.aim(workload, domain, rho=step.rho, rng=8).model
    else:
        model = mwem.mwem(workload, domain, epsilon=1.0, rounds=step.rounds, rng=8).model
    drawn = model.sample(3_000, random_source(9))  # the step's draw: its seed + 1

    def distance(rows: dict[str, np.ndarray]) -> float:
        answers = marginals(pa.record_batch(rows), domain, 3)
        return sum(float(np.abs(answers[m] - 3_000 * model.marginal(m)).sum()) for m in step.family.marginals)

    assert distance(table) < 0.5 * distance(drawn)


@pytest.mark.parametrize("epsilon,run", [(0.05, 0), (0.5, 3)])
def test_mwem_states_the_rounds_it_ran_not_the_rounds_asked(epsilon, run):
    """On 3,000 rows MWEM affords fewer rounds than its default 20 (none at epsilon 0.05): the release says so."""
    _, details = synthesized(PrivateSynthesis(method="mwem", domain=DOMAIN, epsilon=epsilon, rows=100, seed=2))
    assert details["rounds"] == len(details["measured"]) == run and details["rounds_asked"] == 20


def test_cost_is_rho_for_aim_and_pure_epsilon_for_mwem_and_blr():
    aim = PrivateSynthesis(method="aim", domain=DOMAIN, epsilon=1.0, delta=1e-9)
    assert aim.rho == epsilon_to_zcdp(1.0, delta=1e-9) and aim.cost == Release.zcdp(aim.rho, "synthetic data by aim")
    assert aim.delta == 1e-9
    for method in ("mwem", "blr"):
        step = PrivateSynthesis(method=method, domain=DOMAIN, epsilon=0.5, delta=1e-9, rows=10)
        assert step.cost == Release.pure(0.5, f"synthetic data by {method}") and step.delta == 0.0


def test_aim_beside_other_releases_takes_the_route_that_leaves_it_more_and_costs_what_that_route_charges():
    edges = [Release.exponential_mechanism(0.3, "edges")]
    step = PrivateSynthesis(method="aim", domain=DOMAIN, epsilon=1.0, delta=1e-9, elsewhere=edges)
    assert step.share.route == "basic" and step.rho == epsilon_to_zcdp(0.7, delta=1e-9)
    assert step.cost == Release.approximate(0.7, 1e-9, "synthetic data by aim")
    with pytest.raises(ValueError, match="elsewhere is for aim"):
        PrivateSynthesis(method="mwem", domain=DOMAIN, epsilon=1.0, elsewhere=edges)
    with pytest.raises(ValueError, match="nothing is left for synthetic data by aim"):
        PrivateSynthesis(method="aim", domain=DOMAIN, epsilon=1.0, delta=1e-9,
                         elsewhere=[Release.exponential_mechanism(1.0, "e")])  # fmt: skip
    with pytest.raises(ValueError, match="elsewhere is for aim"):  # auto takes what is left of epsilon
        PrivateSynthesis(domain=DOMAIN, epsilon=1.0, delta=1e-9, elsewhere=edges)


def test_an_epsilon_auto_cannot_spend_is_refused_when_it_is_built():
    """Review: an epsilon of 1e-300 was charged, then failed (the count's epsilon rounded to 0)."""
    with pytest.raises(ValueError, match="auto: epsilon=1e-300 at delta=1e-300 leaves its count or AIM nothing"):
        PrivateSynthesis(domain=DOMAIN, epsilon=1e-300, delta=1e-300)


def test_rows_the_run_cannot_hold_are_refused_when_it_is_built_and_the_rows_it_can_are_counted():
    """Issue 34: 10^9 rows were "at most 16 MiB" (the generator alone); they need about 90 GiB."""
    with pytest.raises(ValueError, match=r"1,000,000,000 synthetic rows of 3 columns would hold about \d\d\.\d GiB"):
        PrivateSynthesis(domain=DOMAIN, epsilon=1.0, delta=1e-9, rows=10**9)
    small, large = (PrivateSynthesis(domain=DOMAIN, epsilon=1.0, delta=1e-9, rows=n).memory for n in (10, 10**6))
    assert large - small > 10**6 * 3 * 2  # at least the rows' codes, drawn and fitted, a byte each


def test_without_rows_the_noisy_size_is_capped_at_a_public_maximum_that_fits_and_stated():
    step = PrivateSynthesis(method="mwem", domain=DOMAIN, epsilon=1.0)
    assert step.max_synthetic_rows == DEFAULT_MAX_SYNTHETIC_ROWS and step.memory <= MAX_MEMORY
    wide = {f"x{i}": 2 for i in range(60)}  # 60 numeric columns: 8 bytes a row each, and their codes
    grids = {c: NumericGrid(0, 1, 2) for c in wide}
    step = PrivateSynthesis(method="mwem", domain=wide, degree=1, grids=grids, epsilon=1.0)
    assert 10**6 < step.max_synthetic_rows < DEFAULT_MAX_SYNTHETIC_ROWS and step.memory <= MAX_MEMORY
    with pytest.raises(ValueError, match="draw fewer rows"):  # the default cap is the most that fit
        PrivateSynthesis(method="mwem", domain=wide, degree=1, grids=grids, epsilon=1.0,
                         max_synthetic_rows=step.max_synthetic_rows + 1)  # fmt: skip
    table, details = synthesized(PrivateSynthesis(method="mwem", domain=DOMAIN, epsilon=2.0, max_synthetic_rows=50,
                                                  seed=3))  # fmt: skip
    assert details["rows"] == 50 == len(table["a"]) and details["max_synthetic_rows"] == 50  # 3,000 noisy rows
    assert "max_synthetic_rows" not in synthesized(PrivateSynthesis(method="mwem", domain=DOMAIN, epsilon=2.0,
                                                                    rows=50, seed=3))[1]  # fmt: skip
    with pytest.raises(ValueError, match="caps the noisy size, drawn only without rows"):
        PrivateSynthesis(method="mwem", domain=DOMAIN, epsilon=2.0, rows=50, max_synthetic_rows=50)


def test_the_family_is_what_the_data_pass_must_count():
    assert PrivateSynthesis(domain=DOMAIN, epsilon=1, delta=1e-9).family.marginals == [("a", "b", "c")]
    two_way = PrivateSynthesis(method="mwem", domain=DOMAIN, epsilon=1, degree=2).family.marginals
    assert two_way == [("a", "b"), ("a", "c"), ("b", "c")]
    assert PrivateSynthesis(method="blr", domain=DOMAIN, epsilon=1, rows=5).family.marginals == [("a", "b", "c")]


@pytest.mark.parametrize(
    "change,message",
    [
        ({"method": "gan"}, "method must be one of auto, aim, mwem, blr"),
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


def test_numbers_drawn_in_an_integer_grid_are_integers_inside_their_bins_and_cover_them():
    grid = NumericGrid(17, 91, 16, integer=True)
    codes = np.repeat(np.arange(16), 500)
    values = numbers_in_bins(grid, codes, source=random_source(5))  # test-only seed
    first, last = grid.integer_ranges
    assert values.dtype == np.int64 and values.min() >= 17 and values.max() <= 91
    assert np.all((first[codes] <= values) & (values <= last[codes]))
    assert np.array_equal(grid.codes(values)[0], codes)  # binned again: the same bins
    assert set(values[codes == 0]) == set(range(17, 22)) and set(values[codes == 15]) == set(range(87, 92))


def test_numbers_drawn_in_a_float_grid_fall_back_in_their_bins_even_where_rounding_meets_an_edge():
    grid = NumericGrid(0.1, 0.7, 6)
    codes = np.repeat(np.arange(6), 2000)
    values = numbers_in_bins(grid, codes, source=random_source(6))  # test-only seed
    assert values.dtype == np.float64 and np.array_equal(grid.codes(values)[0], codes)
    assert np.all((grid.edges[codes] <= values) & (values <= grid.edges[codes + 1]))

    class Ones:  # a source whose floats are all just below 1: every draw rounds onto its bin's upper edge
        def unit_floats(self, n):
            return np.full(n, 1 - 2.0**-53)

    edge = numbers_in_bins(grid, np.arange(6), source=Ones())
    assert np.array_equal(grid.codes(edge)[0], np.arange(6)) and edge[-1] <= 0.7
    with pytest.raises(ValueError, match="codes must lie in"):
        numbers_in_bins(grid, np.array([6]), source=random_source(6))  # test-only seed


@pytest.mark.parametrize("method", ["mwem", "blr"])
def test_a_step_with_grids_releases_numbers_in_the_bins_it_drew(method):
    grids = {"a": NumericGrid(0, 1, 2), "b": NumericGrid(10, 40, 3, integer=True)}
    step = PrivateSynthesis(method=method, domain=DOMAIN, epsilon=2.0, rows=4 if method == "blr" else 300,
                            grids=grids, seed=3)  # fmt: skip
    table, _ = synthesized(step)
    codes, _ = synthesized(PrivateSynthesis(method=method, domain=DOMAIN, epsilon=2.0,
                                            rows=4 if method == "blr" else 300, seed=3))  # fmt: skip
    assert table["a"].dtype == np.float64 and table["b"].dtype == np.int64
    for column, grid in grids.items():
        assert np.array_equal(grid.codes(table[column])[0], codes[column])  # the same draw, then numbers in it
    assert np.array_equal(table["c"], codes["c"])


def test_aim_is_told_the_numeric_columns_so_that_their_rare_bins_are_spread_smoothly():
    """A merged code of a numeric column is spread over its bins as an ordered column's (smoothed)."""
    rng = np.random.default_rng(8)
    domain = {"x": 12, "y": 2}
    x = rng.binomial(11, 0.3, 400)
    rows = pa.record_batch({"x": x, "y": (x > 4).astype(np.int64)})
    grids = {"x": NumericGrid(0, 12, 12, integer=True)}
    step = PrivateSynthesis(method="aim", domain=domain, epsilon=0.3, delta=1e-9, rows=400, grids=grids, seed=5)
    counts = step.family.count(rows)
    table, _ = step.synthesize(counts)
    for ordered, same in [({"x"}, True), ((), False)]:
        result = aim.aim(step.family.split(counts), domain, rho=step.rho, ordered=ordered, rng=5)
        assert result.model.compression.merges("x")
        codes = synthetic_rows(result.model, domain, step.family.marginals, 400, source=random_source(6))["x"]
        assert np.array_equal(codes, grids["x"].codes(table["x"])[0]) == same


def test_a_grid_must_match_its_columns_domain():
    with pytest.raises(ValueError, match="grid of 5 bins"):
        PrivateSynthesis(domain=DOMAIN, epsilon=1, delta=1e-9, grids={"a": NumericGrid(0, 1, 5)})
    with pytest.raises(ValueError, match="must be a NumericGrid"):
        PrivateSynthesis(domain=DOMAIN, epsilon=1, delta=1e-9, grids={"a": (0, 1, 2)})
