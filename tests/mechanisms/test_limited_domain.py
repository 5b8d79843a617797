"""The limited-domain top-k: its arguments, its public margin, and releasing fewer than k when few keys stand out.

Its privacy and its sampler against the definition: tests/audit/test_audit_keys.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from beam_expmech.mechanisms.limited_domain import bottom_log_measure, limited_domain_top_k, margin


def test_bottom_is_rounded_up_and_the_margin_is_public():
    exact = math.log(2 * 3 / 1e-6)
    assert exact <= bottom_log_measure(k=3, kbar=5, delta=1e-6, max_keys=2) <= math.nextafter(exact, math.inf)
    assert bottom_log_measure(k=3, kbar=1, delta=1e-6, max_keys=2) < bottom_log_measure(
        k=3, kbar=5, delta=1e-6, max_keys=2
    )  # min(L, kbar)
    assert margin(k=1, kbar=1, epsilon=1.0, delta=1e-6, max_rows=5, max_keys=1) == pytest.approx(5 + 5 * math.log(1e6))


def test_bottom_does_not_move_with_the_number_of_keys_found():
    """kbar is public: one unit bringing a second key must not change bottom's margin (review 4, finding 1)."""
    rng = np.random.default_rng(2)
    alone = [limited_domain_top_k([600], 0, 2, kbar=2, epsilon=0.1, delta=1e-6, max_rows=2, max_keys=2, rng=rng)
             for _ in range(2_000)]  # fmt: skip
    rng = np.random.default_rng(3)
    beside = [limited_domain_top_k([600, 1], 0, 2, kbar=2, epsilon=0.1, delta=1e-6, max_rows=2, max_keys=2, rng=rng)
              for _ in range(2_000)]  # fmt: skip
    nothing = [sum(d == [] for d in draws) / 2_000 for draws in (alone, beside)]
    assert abs(nothing[0] - nothing[1]) < 0.05  # a margin sized by the keys found: 0.35 against 0.52


def test_a_key_far_above_the_rest_is_released_alone_and_first():
    rng = np.random.default_rng(0)
    for _ in range(200):
        drawn = limited_domain_top_k(
            [10_000, 3, 2], 1, 3, kbar=3, epsilon=1.0, delta=1e-6, max_rows=1, max_keys=1, rng=rng
        )
        assert drawn == [0]  # the others are far below bottom (1 + 1 + 3 ln(3e6) ~ 46.7)


def test_keys_that_clear_bottom_come_best_first():
    rng = np.random.default_rng(1)
    counts = [5_000, 7_000, 6_000]
    draws = {tuple(limited_domain_top_k(counts, 0, 3, kbar=3, epsilon=3.0, delta=1e-6, max_rows=1, max_keys=3, rng=rng))
             for _ in range(50)}  # fmt: skip
    assert draws == {(1, 2, 0)}


@pytest.mark.parametrize(
    "arguments,named",
    [
        ({"top_counts": []}, "non-empty"),
        ({"top_counts": [1.5, 2]}, "integers"),
        ({"top_counts": [3, -1]}, "integers"),
        ({"next_count": 9}, "next_count"),
        ({"k": 0}, "k"),
        ({"epsilon": 0}, "epsilon"),
        ({"delta": 0}, "delta"),
        ({"delta": 1}, "delta"),
        ({"max_rows": 0}, "max_rows"),
        ({"max_keys": 1.5}, "max_keys"),
        ({"kbar": 1}, "more than kbar"),
    ],
)
def test_bad_arguments_are_refused(arguments, named):
    given = {"top_counts": [5, 4], "next_count": 2, "k": 2, "kbar": 2, "epsilon": 1.0, "delta": 1e-6, "max_rows": 1,
             "max_keys": 1, "rng": 0} | arguments  # fmt: skip
    with pytest.raises(ValueError, match=named):
        limited_domain_top_k(given.pop("top_counts"), given.pop("next_count"), given.pop("k"), **given)
