"""Private synthetic data: generators that touch the data only through mechanisms. No Beam."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from beam_expmech import parameters
from beam_expmech.accounting import Release

Progress = Callable[[str, float, float], None]
"""Told how far a run is: (what, done, total), the last call with done == total. Only what is public or what
the mechanisms may release reaches it (the bytes of the files read, rounds and the budget they spent, the row
fitting's work: post-processing), never a count of the data; a terminal draws it: ints as counts ("3 of 10"),
floats as a share."""


@dataclass
class SynthesisResult:
    """What a workload generator returns: a model to sample rows from, and what it released."""

    model: object  # has .sample(rows, source) -> {column: codes} and .marginal(columns) -> probabilities
    measured: list[tuple[str, ...]]  # the marginals measured, in order (a private output)
    releases: list[Release]  # what was spent, for the budget
    rows: int  # the noisy size estimate (a private output)
    generator: str = ""  # which generator made it, where a release chose (a private output)


MAX_MEMORY = 4 * 2**30
"""Bytes a generator may hold at once. It runs in one process on one worker, after the counts are
gathered; 4 GiB leaves room for Beam on a worker of 7.5 GB (Dataflow's n1-standard-2)."""

EXACT_CELL_BYTES = 200
"""Bytes per cell of a marginal handled in Python integers (exact scores, exact noise); ~130 measured."""

_INTERPRETER_BYTES = 16 * 2**20  # a run's lists, dicts and small arrays beside its large ones (~1 MiB measured)


def check_memory(arrays: int, method: str, advice: str) -> int:
    """The bytes a run holds: its large ``arrays`` and the interpreter's small objects; a
    ValueError naming it when that is over ``MAX_MEMORY``.

    Generators call it from their public parameters only, so a pipeline can refuse a run
    before it spends any budget.
    """
    needed = arrays + _INTERPRETER_BYTES
    if needed > MAX_MEMORY:
        raise ValueError(
            f"{method} would hold about {needed / 2**30:,.1f} GiB, over the limit of {MAX_MEMORY / 2**30:g} GiB: "
            f"{advice}"
        )
    return needed


def workload_cells(domain: dict[str, int], workload: Sequence[Sequence[str]]) -> list[int]:
    """The cells of each workload marginal; ValueError if there is none, or a column has no domain size >= 1."""
    if not workload:
        raise ValueError("the workload has no marginal")
    for size in domain.values():
        parameters.count(size, "domain size")
    unknown = sorted({c for columns in workload for c in columns} - set(domain))
    if unknown:
        raise ValueError(f"no domain given for column {unknown[0]!r}")
    return [math.prod(domain[c] for c in columns) for columns in workload]


def check_workload(marginals: dict[tuple[str, ...], np.ndarray], domain: dict[str, int]) -> None:
    """A generator's workload counts: each shaped by its columns' domain sizes."""
    for columns, counts in marginals.items():
        if counts.shape != tuple(domain[c] for c in columns):
            raise ValueError(f"marginal {columns} does not match the domain")


def sqrt_split(cells: dict[str, int], epsilon: float) -> dict[str, float]:
    """``epsilon`` split among marginals in proportion to the square root of their ``cells``: Laplace noise of scale
    K / epsilon_m leaves an expected L1 error of cells_m K / epsilon_m in each, whose sum this split makes least."""
    total = math.fsum(math.sqrt(n) for n in cells.values())
    return {m: epsilon * math.sqrt(n) / total for m, n in cells.items()}


def normalised(counts: np.ndarray) -> np.ndarray:
    """Counts (>= 0) as probabilities along the last axis; a row of zeros uniform."""
    totals = counts.sum(axis=-1, keepdims=True)
    return np.where(totals > 0, counts / np.where(totals > 0, totals, 1), 1 / counts.shape[-1])
