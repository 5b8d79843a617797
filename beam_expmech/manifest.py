"""What every release says about itself: one builder for the public fields each released artifact carries.

A release (a selection's JSON, the quantiles, a halfspace, a synthetic table's manifest) holds its
result and these fields, all public parameters or mechanism outputs, never a data value:

    mechanism           what drew the result
    epsilon, delta      the (epsilon, delta)-DP guarantee of this release (delta = 0: pure DP)
    rho                 its zCDP cost, as charged to the budget (accounting.Release)
    privacy_unit        the column that names a person (None: each row is one)
    max_rows_per_unit   K, the rows a unit keeps (None without a unit column: one row each)
    accuracy            what the result is within, with probability at least 1 - beta (None if unstated)
    private_randomness  False when a test seed drew it: then the release is NOT private
"""

from __future__ import annotations

from beam_expmech.accounting import Release

BETA = 0.05  # every accuracy statement of a release holds with probability at least 1 - BETA
FIXED_FIELDS = ("mechanism", "epsilon", "delta", "rho", "privacy_unit", "max_rows_per_unit", "accuracy",
                "private_randomness")  # fmt: skip


def rows_per_unit(max_rows_per_unit: int | None) -> int:
    """K, the most rows one privacy unit contributes: the factor of every count's sensitivity
    (1 when there is no unit column and each row is its own unit)."""
    return 1 if max_rows_per_unit is None else max_rows_per_unit


def manifest(
    *,
    mechanism: str,
    epsilon: float,
    delta: float,
    cost: Release,
    privacy_unit: str | None,
    max_rows_per_unit: int | None,
    accuracy: dict | None,
    beta: float | None = BETA,
    private_randomness: bool,
    **details: object,
) -> dict:
    """The fixed fields (module docstring), then the release's own public ``details``.

    ``accuracy`` gets its ``beta`` (None where it states no probabilistic bound, only e.g. a bin
    width); a detail may not overwrite a fixed field."""
    fixed = {
        "mechanism": mechanism,
        "epsilon": epsilon,
        "delta": delta,
        "rho": cost.rho,
        "privacy_unit": privacy_unit,
        "max_rows_per_unit": max_rows_per_unit,
        "accuracy": None if accuracy is None else ({} if beta is None else {"beta": beta}) | accuracy,
        "private_randomness": private_randomness,
    }
    assert tuple(fixed) == FIXED_FIELDS
    clash = sorted(set(fixed) & set(details))
    if clash:
        raise ValueError(f"a release's details may not redefine its fixed fields: {', '.join(clash)}")
    return fixed | details
