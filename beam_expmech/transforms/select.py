"""The final step: a private selection from per-shard counts, as a distributed noisy max.

col: (candidate shard, int64 counts) -> col: one list of candidate indices, best first.

Each shard draws its candidates' noisy keys and keeps its own top k, exactly (docs/DESIGN.md
section 2: the exponential mechanism is a combine). The survivors travel with the state of
their partially sampled noise, and one global step refines them until the overall top k is
certain. The result is the same draw as one exponential mechanism (or permute-and-flip) over
every candidate, and no worker holds every score.
"""

from __future__ import annotations

from collections.abc import Iterable

import apache_beam as beam
import numpy as np

from beam_expmech import parameters
from beam_expmech.accounting import Release
from beam_expmech.mechanisms.exact import Noise, PartialKey, decide, noisy_top_k_keys
from beam_expmech.mechanisms.exponential import log_weights
from beam_expmech.mechanisms.randomness import stream_source
from beam_expmech.transforms import lineage
from beam_expmech.transforms.counts import DEFAULT_SHARD_SIZE

MECHANISMS = {"exponential": Noise.GUMBEL, "permute-and-flip": Noise.EXPONENTIAL}


class PrivateSelect(beam.PTransform):
    """Top ``k`` by the exponential mechanism; ``sensitivity`` checked against the bounding if marked, else trusted.

    The top ``k`` candidates by the exponential mechanism (or permute-and-flip, k = 1). Where the counts carry no
    bounding's mark (made by hand) it cannot tell a sensitivity too small; ``PrivateRelease`` derives it.

    Privacy: ``epsilon``-DP in total when every count has the given ``sensitivity`` (for
    bounded contributions: max rows per unit times the predicate's contribution); the
    exponential mechanism is also epsilon^2/8-zCDP, permute-and-flip is pure DP only. With
    k > 1 each of the k picks spends epsilon / k (``cost``, labelled ``label``). Arguments are validated here, when the
    pipeline is built, before any data is read. ``seed`` is for tests only (not private).
    """

    def __init__(
        self,
        *,
        epsilon: float,
        sensitivity: float,
        num_candidates: int,
        k: int = 1,
        mechanism: str = "exponential",
        monotonic: bool = True,
        shard_size: int = DEFAULT_SHARD_SIZE,
        label: str = "selection",
        seed: int | None = None,
    ):
        super().__init__()
        self.epsilon = parameters.positive_finite(epsilon, "epsilon")
        self.sensitivity = parameters.positive_finite(sensitivity, "sensitivity")
        self.num_candidates = parameters.count(num_candidates, "num_candidates")
        self.k = parameters.count(k, "k", at_most=self.num_candidates)
        if mechanism not in MECHANISMS:
            raise ValueError(f"mechanism must be one of {', '.join(MECHANISMS)}, got {mechanism!r}")
        if mechanism == "permute-and-flip" and self.k > 1:
            raise ValueError("permute-and-flip selects one candidate; use the exponential mechanism for k > 1")
        self.noise = MECHANISMS[mechanism]
        self.shard_size = parameters.count(shard_size, "shard_size")
        self.monotonic, self.seed = bool(monotonic), parameters.test_seed(seed)
        self.label = label

    @property
    def cost(self) -> Release:
        """What the release costs: epsilon-DP either way; the exponential mechanism is also bounded range
        (epsilon^2/8-zCDP; top-k composes k rounds of epsilon/k), permute-and-flip is pure DP only."""
        release = Release.exponential_mechanism if self.noise is Noise.GUMBEL else Release.pure
        return release(self.epsilon, self.label)

    def _shard_keys(self, shard: int, counts: np.ndarray) -> list[PartialKey]:
        """This shard's top k (at most its size), with global indices and the noise's state."""
        weights = log_weights(
            counts, epsilon=self.epsilon, sensitivity=self.sensitivity, monotonic=self.monotonic, rounds=self.k
        )
        keys = noisy_top_k_keys(weights, min(self.k, counts.size), self.noise, stream_source(self.seed, shard + 1))
        for key in keys:
            key.index += shard * self.shard_size
        return keys

    def _merge(self, keys: list[PartialKey]) -> list[int]:
        keys = sorted(keys, key=lambda key: key.index)  # refinement order must not depend on arrival order
        return [key.index for key in decide(keys, self.k, self.noise, stream_source(self.seed, 0))]

    def select(self, shards: Iterable[tuple[int, np.ndarray]]) -> list[int]:
        """The same draw in one process, from (candidate shard, counts) pairs (audits, small jobs)."""
        return self._merge([key for shard, counts in shards for key in self._shard_keys(shard, counts)])

    def expand(self, counts):
        lineage.check_sensitivity(counts, self.sensitivity, self.label)
        return (
            counts
            | "ShardTopK" >> beam.MapTuple(self._shard_keys)  # col: [PartialKey] per shard
            | "Gather" >> beam.CombineGlobally(beam.combiners.ToListCombineFn())  # col: [[PartialKey]]
            | "Decide" >> beam.Map(lambda lists: self._merge([key for keys in lists for key in keys]))
        )
