"""Validation of privacy parameters and scores, in one place.

Every public mechanism calls these before it touches randomness, so a bad argument fails
with a ``ValueError`` that names it, and never half-way through a draw.
"""

from __future__ import annotations

import math
import numbers

import numpy as np


def positive_finite(value: object, name: str) -> float:
    """``value`` as a float, if it is a real number, finite and > 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    try:
        value = float(value)
    except OverflowError:  # an int beyond any float
        raise ValueError(f"{name} must be finite, got an integer of {int(value).bit_length()} bits") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    return value


def positive(value: object, name: str) -> float:
    """``value`` as a float, if it is a real number > 0; infinity allowed (a bound that may be lifted)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    try:
        value = float(value)
    except OverflowError:  # an int beyond any float: no bound
        value = math.inf
    if not value > 0:  # nan too
        raise ValueError(f"{name} must be > 0 (math.inf: no bound), got {value!r}")
    return value


def non_negative_finite(value: object, name: str) -> float:
    """``value`` as a float, if it is a real number, finite and >= 0 (a tolerance)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
    return value


def probability(value: object, name: str) -> float:
    """``value`` as a float strictly between 0 and 1."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < float(value) < 1:
        raise ValueError(f"{name} must be a number strictly between 0 and 1, got {value!r}")
    return float(value)


def finite_range(lower: object, upper: object, lower_name: str, upper_name: str) -> tuple[float, float]:
    """(``lower``, ``upper``) as floats, if both are real, finite, and lower < upper (a public range)."""
    for value, name in ((lower, lower_name), (upper, upper_name)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ValueError(f"{name} must be a real number, got {value!r}")
    if not (math.isfinite(float(upper) - float(lower)) and float(lower) < float(upper)):
        raise ValueError(f"{lower_name} must be below {upper_name}, both finite; got {lower} and {upper}")
    return float(lower), float(upper)


def count(value: object, name: str, *, at_most: int | None = None, of: str = "candidates") -> int:
    """``value`` as an int >= 1 (and <= ``at_most``, the number of ``of``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if at_most is not None and value > at_most:
        raise ValueError(f"{name} = {value} exceeds the number of {of} ({at_most})")
    return int(value)


def test_seed(value: object) -> int | None:
    """A final step's ``seed``: None (OS randomness: private) or an int >= 0 (tests only: NOT private).

    Not a generator or a random source: a step is pickled to every worker and every run, and a
    source's state would travel with it, so separate releases would draw the same noise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"seed must be None (OS randomness) or an int >= 0 (tests only), got {type(value).__name__}")
    return int(value)


def scores_array(scores: object) -> np.ndarray:
    """The scores as a non-empty 1-d array of finite ints or floats (ints stay ints, so stay exact)."""
    array = np.asarray(scores)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"scores must be a non-empty 1-d sequence, got shape {array.shape}")
    if array.dtype.kind in "iu":
        return array
    if array.dtype.kind == "f":
        array = array.astype(np.float64, copy=False)
        if not np.isfinite(array).all():
            raise ValueError("scores must be finite: found NaN or infinity")
        return array
    if array.dtype.kind == "O" and all(isinstance(s, numbers.Integral) and not isinstance(s, bool) for s in array):
        return array  # Python ints beyond 64 bits: exact, on the slow path
    raise ValueError(f"scores must be ints or floats, got dtype {array.dtype}")


def log_measure_array(log_measure: object, size: int) -> np.ndarray | None:
    """The log base measure as float64: finite or -inf (measure zero), not all -inf."""
    if log_measure is None:
        return None
    array = np.asarray(log_measure, dtype=np.float64)
    if array.shape != (size,):
        raise ValueError(f"log_measure must have one entry per score ({size}), got shape {array.shape}")
    if np.isnan(array).any() or (array == np.inf).any():
        raise ValueError("log_measure must be finite or -inf (measure zero), found NaN or +inf")
    if (array == -np.inf).all():
        raise ValueError("log_measure is -inf everywhere: no candidate has positive measure")
    return array
