"""Argument validation in one place: each check accepts what it should, and names what it refuses."""

from __future__ import annotations

import numpy as np
import pytest

from beam_expmech import halfspaces, parameters
from beam_expmech.mechanisms.randomness import RandomSource
from beam_expmech.predicates import HistogramCounts
from beam_expmech.transforms import PrivateHalfspace, PrivateQuantiles, PrivateSelect, PrivateSynthesis


@pytest.mark.parametrize("value", [1, 0.5, 1e-300, np.float32(2.0), np.int64(3)])
def test_positive_finite_takes_every_real_number_above_zero(value):
    assert parameters.positive_finite(value, "epsilon") == float(value)


@pytest.mark.parametrize("value", [0, -1.0, float("inf"), float("nan"), True, "1", None, 1j])
def test_positive_finite_names_the_argument_it_refuses(value):
    with pytest.raises(ValueError, match=r"^epsilon must be"):
        parameters.positive_finite(value, "epsilon")


def test_positive_takes_infinity_and_an_int_beyond_any_float_as_no_bound():
    assert parameters.positive(np.int64(3), "work") == 3.0
    assert parameters.positive(float("inf"), "work") == parameters.positive(10**400, "work") == float("inf")
    for bad in (0, -1e-300, float("-inf"), float("nan"), True, "1", None):
        with pytest.raises(ValueError, match=r"^work must be"):
            parameters.positive(bad, "work")


@pytest.mark.parametrize("value", [0, 1, 1.5, -0.1, True, float("nan"), "0.5"])
def test_probability_is_strictly_between_zero_and_one(value):
    with pytest.raises(ValueError, match=r"^q must be a number strictly between 0 and 1"):
        parameters.probability(value, "q")
    assert parameters.probability(0.25, "q") == 0.25


def test_count_is_an_integer_of_at_least_one_and_at_most_the_limit():
    assert parameters.count(np.int64(3), "k", at_most=3) == 3
    for bad in (0, -2, 1.0, True, "2"):
        with pytest.raises(ValueError, match=r"^k must be an integer >= 1"):
            parameters.count(bad, "k")
    with pytest.raises(ValueError, match=r"^k = 4 exceeds the number of shards \(3\)"):
        parameters.count(4, "k", at_most=3, of="shards")


def test_scores_keep_integers_exact_and_refuse_what_a_mechanism_cannot_rank():
    big = [2**70, -(2**70), 5]
    assert parameters.scores_array(big).tolist() == big  # Python ints beyond 64 bits stay exact
    assert parameters.scores_array(np.array([1, 2], dtype=np.int32)).dtype == np.int32
    assert parameters.scores_array([0.5, 1]).dtype == np.float64
    refused = [([], "non-empty"), ([[1, 2]], "non-empty 1-d"), ([1.0, np.nan], "finite"), ([1.0, -np.inf], "finite"),
               (["a"], "ints or floats"), (np.array([True, False]), "ints or floats")]  # fmt: skip
    for bad, message in refused:
        with pytest.raises(ValueError, match=message):
            parameters.scores_array(bad)


def test_log_measure_is_finite_or_minus_infinity_and_not_all_zero_measure():
    assert parameters.log_measure_array(None, 3) is None
    np.testing.assert_array_equal(parameters.log_measure_array([0.0, -np.inf], 2), [0.0, -np.inf])
    for bad, message in [([0.0], "one entry per score"), ([0.0, np.nan], "NaN or \\+inf"),
                         ([0.0, np.inf], "NaN or \\+inf"), ([-np.inf, -np.inf], "no candidate")]:  # fmt: skip
        with pytest.raises(ValueError, match=message):
            parameters.log_measure_array(bad, 2)


@pytest.mark.parametrize("value", [RandomSource(), np.random.default_rng(1), -1, 1.0, True, "3"])
def test_a_final_steps_seed_is_none_or_an_int_never_a_source_it_would_copy_into_every_run(value):
    with pytest.raises(ValueError, match=r"^seed must be None \(OS randomness\) or an int >= 0"):
        parameters.test_seed(value)
    assert parameters.test_seed(None) is None and parameters.test_seed(np.int64(7)) == 7


@pytest.mark.parametrize("build", [
    lambda seed: PrivateSelect(epsilon=1, sensitivity=1, num_candidates=3, seed=seed),
    lambda seed: PrivateQuantiles(epsilon=1, quantiles=[0.5], family=HistogramCounts("x", 0, 1, 8), seed=seed),
    lambda seed: PrivateHalfspace(epsilon=1, candidates=halfspaces.weight_grid([0, 1], 1, max_candidates=2), seed=seed),
    lambda seed: PrivateSynthesis(method="mwem", domain={"a": 2, "b": 2}, epsilon=1, seed=seed),
], ids=["select", "quantiles", "halfspace", "synthesis"])  # fmt: skip
def test_every_final_step_refuses_a_random_source_as_its_seed(build):
    """A source pickled with the step would give every run the same bits (review 3): refused when built."""
    with pytest.raises(ValueError, match="seed must be None"):
        build(RandomSource())
    assert build(None).seed is None
