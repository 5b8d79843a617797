"""PrivateSelect and sharded PredicateCounts on Beam: the same answer as one shard, top-k that follows peeling."""

from __future__ import annotations

from collections import Counter

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.util import assert_that, equal_to
from sampling import assert_follows, peeling_pmf

from beam_expmech.accounting import Release
from beam_expmech.predicates import CategoryCounts
from beam_expmech.transforms import PredicateCounts, PrivateSelect


def test_sharded_counts_and_selection_match_the_unsharded_answer():
    rng = np.random.default_rng(3)
    values = rng.integers(0, 1000, 30_000)
    batches = [__import__("pyarrow").record_batch({"v": values[i : i + 4000]}) for i in range(0, values.size, 4000)]
    family = CategoryCounts("v", range(1000))
    expected = np.bincount(values, minlength=1000)
    with beam.Pipeline() as pipeline:
        counts = pipeline | beam.Create(batches) | PredicateCounts(family, shard_size=128)
        dense = (
            counts
            | beam.combiners.ToList()
            | beam.Map(lambda shards: np.concatenate([c for _, c in sorted(shards, key=lambda kv: kv[0])]).tolist())
        )
        assert_that(dense, equal_to([expected.tolist()]), label="counts")
        chosen = counts | PrivateSelect(epsilon=1e5, sensitivity=1, num_candidates=1000, k=5, shard_size=128)
        best_counts = sorted(expected, reverse=True)[:5]  # ties may come in either order
        assert_that(chosen | beam.Map(lambda c: expected[c].tolist()), equal_to([best_counts]), label="top5")


def test_distributed_noisy_max_follows_peeling():
    """Shards of 2 candidates, merged exactly: the same law as top-k over all of them."""
    scores = np.array([0, 1, 1, 2, 3], dtype=np.int64)
    select_transform = PrivateSelect(epsilon=2.0, sensitivity=1, num_candidates=5, k=2, shard_size=2, monotonic=False)
    draws = []
    for seed in range(4000):
        select_transform.seed = seed
        keys = [key for s in range(3) for key in select_transform._shard_keys(s, scores[2 * s : 2 * s + 2])]
        draws.append(tuple(select_transform._merge(keys)))
    assert_follows(draws, peeling_pmf(scores.astype(float), 2, 2.0, 1))
    assert Counter(d[0] for d in draws)[4] > 1000


@pytest.mark.parametrize("shard_size", [7, 3])
def test_top_2_on_tied_counts_follows_peeling(shard_size):
    """Issue 12's reproduction: survivors that the first screen already orders keep their own noise.

    (Each key once carried the noise of the candidate at its position among all candidates: on
    D = [3,3,0,0,0,3,3], P([1, 5]) was 0 against 0.0765 by peeling.)
    """
    counts = np.array([3, 3, 0, 0, 0, 3, 3], dtype=np.int64)
    step = PrivateSelect(epsilon=2, sensitivity=1, num_candidates=7, k=2, monotonic=True, shard_size=shard_size)
    shards = [(s, counts[s * shard_size : (s + 1) * shard_size]) for s in range(-(-7 // shard_size))]
    draws = []
    for seed in range(3000):
        step.seed = seed
        draws.append(tuple(step.select(shards)))
    assert_follows(draws, peeling_pmf(counts.astype(float), 2, 2.0, 1, monotonic=True))


@pytest.mark.parametrize("mechanism,k,rho", [("exponential", 3, 0.5), ("permute-and-flip", 1, 2.0)])
def test_cost_is_epsilon_and_bounded_range_only_for_the_exponential_mechanism(mechanism, k, rho):
    step = PrivateSelect(epsilon=2.0, sensitivity=1, num_candidates=5, k=k, mechanism=mechanism, label="top of x")
    assert step.cost == Release("top of x", 2.0, rho)  # epsilon^2/8 for k rounds of epsilon/k; epsilon^2/2
