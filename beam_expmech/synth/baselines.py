"""Reference generators for benchmarks: what a synthetic-data method must beat."""

from __future__ import annotations

import numpy as np

from beam_expmech.accounting import Release
from beam_expmech.mechanisms.discrete_laplace import discrete_laplace_mechanism
from beam_expmech.mechanisms.randomness import RandomLike, random_source
from beam_expmech.synth import normalised
from beam_expmech.synth.mwem import FactoredModel


def independent_marginals(
    one_way: dict[str, np.ndarray], *, epsilon: float, max_rows: int = 1, rng: RandomLike = None
) -> tuple[FactoredModel, list[Release]]:
    """Each column's 1-way marginal with discrete Laplace noise (epsilon / d each), as independent columns.

    Privacy: epsilon-DP (pure), with at most ``max_rows`` rows per unit.
    """
    source = random_source(rng)
    each = epsilon / len(one_way)
    components, releases = [], []
    for column, counts in one_way.items():
        noisy = np.maximum(discrete_laplace_mechanism(counts, epsilon=each, sensitivity=max_rows, rng=source), 0)
        components.append(((column,), normalised(noisy.astype(np.float64))))
        releases.append(Release.pure(each, f"1-way marginal of {column}"))
    return FactoredModel({c: v.size for c, v in one_way.items()}, components), releases
