"""Predicate counts across shards: per-batch count vectors summed by a CombineFn.

col: RecordBatch -> col: (candidate shard, int64 counts of that shard's candidates).

Small candidate sets use one shard and a dense vector per batch. Large ones are cut into
shards of ``shard_size`` candidates, and each batch ships only its nonzero counts to each
shard, so no worker ever holds the counts of every candidate.
"""

from __future__ import annotations

import dataclasses

import apache_beam as beam
import numpy as np
import pyarrow as pa

from beam_expmech.predicates import PredicateFamily
from beam_expmech.transforms import lineage

DEFAULT_SHARD_SIZE = 1 << 20


class SumCounts(beam.CombineFn):
    """Sums one shard's count vectors, dense or sparse (indices, counts), into a dense vector.

    Every shard also receives a zero vector of its full size, so the sum has that size.
    """

    def create_accumulator(self) -> np.ndarray:
        return np.zeros(0, dtype=np.int64)

    def add_input(self, total: np.ndarray, counts) -> np.ndarray:
        indices, values = counts if isinstance(counts, tuple) else (None, counts)
        needed = values.size if indices is None else int(indices.max(initial=-1)) + 1
        if needed > total.size:
            total = np.concatenate([total, np.zeros(needed - total.size, np.int64)])
        if indices is None:
            total[: values.size] += values
        else:
            np.add.at(total, indices, values)
        return total

    def merge_accumulators(self, totals) -> np.ndarray:
        merged = self.create_accumulator()
        for total in totals:
            merged = self.add_input(merged, total)
        return merged

    def extract_output(self, total: np.ndarray) -> np.ndarray:
        return total


def shard_sizes(num_candidates: int, shard_size: int) -> list[int]:
    """The number of candidates in each shard."""
    full, rest = divmod(num_candidates, shard_size)
    return [shard_size] * full + ([rest] if rest else [])


class PredicateCounts(beam.PTransform):
    """Counts of every candidate of ``predicate`` over all batches, keyed by candidate shard."""

    def __init__(self, predicate: PredicateFamily, *, shard_size: int = DEFAULT_SHARD_SIZE):
        super().__init__()
        self.predicate = predicate
        self.shard_size = shard_size

    def expand(self, batches):
        predicate, shard_size = self.predicate, self.shard_size
        bounded = lineage.the_one(batches, lineage.BOUNDED, "Counts") or lineage.Bounds(None)  # None: a row a unit
        moves = dataclasses.replace(bounded, sensitivity=bounded.max_rows * predicate.contribution, family=predicate)
        sizes = shard_sizes(predicate.num_candidates, shard_size)
        if len(sizes) == 1:
            counted = batches | "Count" >> beam.Map(lambda batch: (0, predicate.count(batch)))
        else:
            counted = batches | "Count" >> beam.FlatMap(_sparse_by_shard, predicate, shard_size)
        # col: (shard, int64[n] or (indices, counts)) per batch and shard
        # Every shard exists even where no row lands: the candidate set is public.
        zeros = (
            batches.pipeline
            | "Shards" >> beam.Create(list(enumerate(sizes)))  # sizes only: the zeros are made on workers
            | "Zeros" >> beam.MapTuple(lambda shard, size: (shard, np.zeros(size, np.int64)))
        )
        summed = (
            (zeros, counted)
            | "Together" >> beam.Flatten()
            | "Sum" >> beam.CombinePerKey(SumCounts())  # col: (shard, int64[shard size])
        )
        return lineage.mark(summed, lineage.COUNTED, moves)  # how far one unit moves a count: the final step checks


def _sparse_by_shard(batch: pa.RecordBatch, predicate: PredicateFamily, shard_size: int):
    indices, counts = predicate.sparse_count(batch)
    shard = indices // shard_size
    for s in np.unique(shard):
        mine = shard == s
        yield int(s), (indices[mine] - s * shard_size, counts[mine])


class GatherCounts(beam.PTransform):
    """col: (candidate shard, counts) -> col: one int64 vector with every candidate's count.

    For final steps whose candidates fit on one worker (a histogram, a pattern marginal).
    """

    def expand(self, counts):
        return (
            counts
            | "Gather" >> beam.combiners.ToList()  # col: [(shard, counts)], once
            | "InOrder" >> beam.Map(lambda shards: np.concatenate([c for _, c in sorted(shards, key=lambda kv: kv[0])]))
        )
