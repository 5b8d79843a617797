"""Partition selection's rule: public thresholds, one draw per key, and its arguments.

Its privacy (exact) and its sampler: tests/audit/test_audit_keys.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from beam_expmech.mechanisms.partition_selection import PartitionSelection
from beam_expmech.mechanisms.randomness import random_source


def test_more_keys_per_unit_need_more_units_and_the_thresholds_grow():
    one, three = (PartitionSelection(epsilon=1.0, delta=1e-6, max_keys=L) for L in (1, 3))
    assert one.units_needed(0.5) < one.units_needed(0.95) < one.always
    assert three.units_needed(0.5) > one.units_needed(0.5)
    probabilities = [one.probability(n) for n in range(one.always + 3)]
    assert probabilities == sorted(probabilities) and probabilities[0] == 0 and probabilities[-1] == 1


def test_keys_held_by_enough_units_are_always_kept_and_a_lone_unit_almost_never():
    rule = PartitionSelection(epsilon=1.0, delta=1e-6)
    source = random_source(0)
    kept = rule.keep(np.array([rule.always] * 1000 + [1] * 1000), source)
    assert kept[:1000].all() and not kept[1000:].any()  # a lone unit's key: probability 1e-6 each


def test_the_best_rule_is_the_optimal_one_for_one_key_a_unit_and_gaussian_thresholding_for_many():
    one, many = (PartitionSelection(epsilon=1.0, delta=1e-6, max_keys=L) for L in (1, 30))
    assert one.rule == "optimal" and one.gaussian is None
    assert many.rule == "gaussian" and many.gaussian.threshold > 1
    split = PartitionSelection(epsilon=1.0, delta=1e-6, max_keys=30, rule="optimal")
    assert many.units_needed(0.5) < split.units_needed(0.5) / 2  # noise grows as sqrt(L), not L


@pytest.mark.parametrize("epsilon,delta", [(1.0, 1e-18), (60.0, 1e-6), (800.0, 1e-6)])
def test_the_best_rule_is_the_optimal_one_where_gaussian_thresholding_cannot_be_calibrated(epsilon, delta):
    rule = PartitionSelection(epsilon=epsilon, delta=delta, max_keys=5)
    assert rule.rule == "optimal" and rule.units_needed(0.5) >= 1
    with pytest.raises(ValueError, match="Gaussian thresholding"):
        PartitionSelection(epsilon=epsilon, delta=delta, max_keys=5, rule="gaussian")


def test_gaussian_thresholding_releases_more_as_more_units_hold_a_key():
    rule = PartitionSelection(epsilon=1.0, delta=1e-6, max_keys=5, rule="gaussian")
    probabilities = [rule.probability(n) for n in range(rule.always + 2)]
    assert probabilities == sorted(probabilities) and probabilities[0] == 0 and probabilities[-1] == 1
    assert rule.probability(rule.gaussian.threshold) == pytest.approx(0.5, abs=0.02)  # n = T: noise >= 0


def test_a_key_must_be_held_by_a_unit():
    with pytest.raises(ValueError, match="at least one unit"):
        PartitionSelection(epsilon=1.0, delta=1e-6).keep(np.array([3, 0]), random_source(0))


@pytest.mark.parametrize(
    "arguments,named",
    [({"epsilon": 0}, "epsilon"), ({"epsilon": float("inf")}, "epsilon"), ({"delta": 0}, "delta"),
     ({"delta": 1.0}, "delta"), ({"max_keys": 0}, "max_keys"), ({"rule": "laplace"}, "rule")],
)  # fmt: skip
def test_bad_arguments_are_refused(arguments, named):
    with pytest.raises(ValueError, match=named):
        PartitionSelection(**({"epsilon": 1.0, "delta": 1e-6} | arguments))
