"""Contribution bounding: at most K rows per privacy unit, as a batched shuffle.

Each batch is split by a stable hash of the unit into S shards; a shard's rows are grouped in
one place, where every unit keeps K of its rows chosen uniformly at random (a random priority
per row, then a vectorised rank within the unit). Every count over the result then changes by
at most K * contribution when one unit is added or removed, and all counts move the same way.
"""

from __future__ import annotations

from collections.abc import Iterable

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from beam_expmech import io
from beam_expmech.mechanisms.randomness import random_source

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MULTIPLIER = np.uint64(0x100000001B3)  # FNV prime: the polynomial base for text units


def unit_hash(units: pa.Array) -> np.ndarray:
    """A 64-bit hash of each unit that every worker computes alike (ints and text, vectorised)."""
    if pa.types.is_integer(units.type):
        return _mix(units.to_numpy(zero_copy_only=False).astype(np.int64).view(np.uint64))
    text = pc.cast(units, pa.large_binary(), safe=False)
    offsets = np.frombuffer(text.buffers()[1], dtype=np.int64)[text.offset : text.offset + len(text) + 1]
    data = np.frombuffer(text.buffers()[2], dtype=np.uint8) if text.buffers()[2] is not None else np.zeros(0, np.uint8)
    lengths = np.diff(offsets)
    if lengths.sum() == 0:
        return _mix(lengths.astype(np.uint64))
    # sum_j byte_j * P^j within each unit, by prefix sums (uint64 arithmetic wraps, as intended).
    chunk = data[offsets[0] : offsets[-1]].astype(np.uint64)
    position = np.arange(chunk.size) - np.repeat(offsets[:-1] - offsets[0], lengths)
    with np.errstate(over="ignore"):
        powers = np.concatenate([[np.uint64(1)], np.cumprod(np.full(int(lengths.max()) - 1, _MULTIPLIER))])
        prefix = np.concatenate([[np.uint64(0)], np.cumsum(chunk * powers[position], dtype=np.uint64)])
    start = offsets[:-1] - offsets[0]
    return _mix((prefix[start + lengths] - prefix[start]) ^ lengths.astype(np.uint64))


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: every input bit affects every output bit."""
    with np.errstate(over="ignore"):
        x = (x + _GOLDEN) & np.uint64(0xFFFFFFFFFFFFFFFF)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def split_by_shard(batch: pa.RecordBatch, unit_column: str, shards: int) -> Iterable[tuple[int, pa.RecordBatch]]:
    """(shard, rows of that shard): the rows of one unit always go to one shard."""
    shard = (unit_hash(batch.column(unit_column)) % np.uint64(shards)).astype(np.int64)
    order = np.argsort(shard, kind="stable")
    bounds = np.searchsorted(shard[order], np.arange(shards + 1))
    for s in range(shards):
        if bounds[s + 1] > bounds[s]:
            # take, not slice: a pickled slice would carry the whole batch's buffers to every shard
            yield s, batch.take(pa.array(order[bounds[s] : bounds[s + 1]]))


def keep_at_most(
    batches: Iterable[pa.RecordBatch], unit_column: str, max_rows: int, seed: int | None = None
) -> Iterable[pa.RecordBatch]:
    """The rows of one shard with at most ``max_rows`` per unit, chosen uniformly at random."""
    table = pa.Table.from_batches(list(batches))
    if table.num_rows == 0:
        return
    if seed is not None:  # tests: the same rows kept whatever order the batches arrived in
        table = table.sort_by([(name, "ascending") for name in table.column_names])
    units = pc.dictionary_encode(table.column(unit_column).combine_chunks()).indices
    codes = units.to_numpy(zero_copy_only=False)
    priority = random_source(seed).uint32(table.num_rows)  # OS randomness unless a test seeds it
    order = np.lexsort((priority, codes))
    sorted_codes = codes[order]
    first = np.ones(order.size, bool)
    first[1:] = sorted_codes[1:] != sorted_codes[:-1]
    group_start = np.maximum.accumulate(np.where(first, np.arange(order.size), 0))
    rank = np.arange(order.size) - group_start
    kept = table.take(pa.array(np.sort(order[rank < max_rows])))
    yield from kept.combine_chunks().to_batches(max_chunksize=io.BATCH_ROWS)


class BoundContributions(beam.PTransform):
    """At most ``max_rows`` rows per value of ``unit_column``; rows chosen uniformly at random.

    col: RecordBatch -> col: RecordBatch. With it, a count's sensitivity is ``max_rows`` times
    the predicate's contribution. ``seed`` (tests only) makes the choice repeatable; the
    choice needs no secrecy for the guarantee, but uses OS randomness by default all the same.
    """

    def __init__(self, unit_column: str, max_rows: int, *, shards: int = 32, seed: int | None = None):
        super().__init__()
        if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
            raise ValueError(f"max_rows must be an integer >= 1, got {max_rows!r}")
        self.unit_column, self.max_rows, self.shards, self.seed = unit_column, max_rows, shards, seed

    def expand(self, batches):
        unit, max_rows, shards, seed = self.unit_column, self.max_rows, self.shards, self.seed
        return (
            batches
            | "Shard" >> beam.FlatMap(split_by_shard, unit, shards)  # col: (shard, RecordBatch)
            | "Group" >> beam.GroupByKey()  # col: (shard, [RecordBatch])
            | "Keep"
            >> beam.FlatMapTuple(
                lambda shard, group: keep_at_most(group, unit, max_rows, None if seed is None else seed * 7919 + shard)
            )  # col: RecordBatch
        )
