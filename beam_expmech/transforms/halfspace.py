"""The final step of the private halfspace learner: the weights pi that fit the most records, privately.

col: one int64 vector of bit-pattern counts over (x_1 .. x_d, y) (a ``MarginalCounts`` of d + 1
bit columns, as ``GatherCounts`` emits it) -> col: one list of d weights, the chosen candidate.

Every public candidate pi (``halfspaces.Candidates``) is scored by the number of records it fits
(pi . x >= y, decided exactly by ``halfspaces.fit_counts``), and one is picked by the exponential
mechanism. The pattern counts are small (2^(d+1) of them): one worker holds them.
"""

from __future__ import annotations

import apache_beam as beam
import numpy as np

from beam_expmech import halfspaces, parameters
from beam_expmech.accounting import Release
from beam_expmech.mechanisms import exponential_mechanism
from beam_expmech.mechanisms.randomness import random_source
from beam_expmech.transforms import lineage


class PrivateHalfspace(beam.PTransform):
    """The best-fitting halfspace; ``max_rows`` checked against the bounding above if marked, else trusted.

    The halfspace among ``candidates`` that fits the most records, by the exponential mechanism. Where the counts
    carry no bounding's mark (made by hand) it cannot tell a ``max_rows`` too small; ``PrivateRelease`` derives it.

    Privacy: ``epsilon``-DP (and epsilon^2/8-zCDP: ``cost``) when each privacy unit has at most
    ``max_rows`` = K records in the counts: a score counts records, so one unit moves it by at most K
    (sensitivity K), and adding records never lowers it (monotone: exp(epsilon * q / K)). Only the
    chosen weights come out, not how many records they fit. Arguments are validated here, when the
    pipeline is built. ``seed`` is for tests only (not private).
    """

    def __init__(
        self,
        *,
        epsilon: float,
        candidates: halfspaces.Candidates,
        max_rows: int = 1,
        seed: int | None = None,
    ):
        super().__init__()
        self.epsilon = parameters.positive_finite(epsilon, "epsilon")
        if not isinstance(candidates, halfspaces.Candidates):
            raise ValueError(
                "candidates must be a halfspaces.Candidates (from weight_grid or check_candidates), "
                f"got {type(candidates).__name__}"
            )
        if len(candidates) == 0:
            raise ValueError("candidates is empty: give at least one weight vector")
        self.candidates = candidates
        self.sensitivity = parameters.count(max_rows, "max_rows")
        self.seed = parameters.test_seed(seed)

    @property
    def cost(self) -> Release:
        """What the release costs: one exponential mechanism, epsilon-DP and epsilon^2/8-zCDP."""
        return Release.exponential_mechanism(self.epsilon, f"halfspace over {self.candidates.num_features} features")

    def release(self, pattern_counts: np.ndarray) -> list[float]:
        """What ``expand`` draws, in one process (audits, small jobs): the chosen candidate's weights."""
        scores = halfspaces.fit_counts(np.asarray(pattern_counts), self.candidates)
        chosen = exponential_mechanism(
            scores, epsilon=self.epsilon, sensitivity=self.sensitivity, monotonic=True, rng=random_source(self.seed)
        )
        return self.candidates.weights(chosen)

    def expand(self, pattern_counts):
        # col: one int64 vector of pattern counts -> col: one list of weights
        lineage.check_sensitivity(pattern_counts, self.sensitivity, "PrivateHalfspace")
        counted = lineage.counted_by(pattern_counts, "PrivateHalfspace")
        patterns = 2 ** (self.candidates.num_features + 1)
        if (
            counted is not None
            and counted.family is not None
            and (lineage.family_of(counted.family)[0] != "MarginalCounts" or counted.family.num_candidates != patterns)
        ):  # a pattern's count must be the records of that (features, label) pattern, one a record
            raise ValueError(f"PrivateHalfspace: the counts above are not the {patterns} bit patterns' "
                             "MarginalCounts of (features, label)")  # fmt: skip
        return pattern_counts | "Halfspace" >> beam.Map(self.release)
