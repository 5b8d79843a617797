"""Private synthetic data: generators that touch the data only through mechanisms. No Beam."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from beam_expmech.accounting import Release


@dataclass
class SynthesisResult:
    """What a workload generator returns: a model to sample rows from, and what it released."""

    model: object  # has .sample(rows, source) -> {column: codes}
    measured: list[tuple[str, ...]]  # the marginals measured, in order (a private output)
    releases: list[Release]  # what was spent, for the budget
    rows: int  # the noisy size estimate (a private output)


def check_workload(marginals: dict[tuple[str, ...], np.ndarray], domain: dict[str, int]) -> None:
    """A generator's workload: at least one marginal, each shaped by its columns' domain sizes."""
    if not marginals:
        raise ValueError("the workload has no marginal")
    for columns, counts in marginals.items():
        if counts.shape != tuple(domain[c] for c in columns):
            raise ValueError(f"marginal {columns} does not match the domain")
