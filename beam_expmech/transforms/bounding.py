"""Contribution bounding: at most K rows per privacy unit, as a batched shuffle.

Every row gets a uniform random priority, and each batch is split by a stable hash of the unit
into S shards. Per shard, a CombineFn keeps each unit's K rows of lowest priority (a vectorised
sort and rank): a uniform random K-subset, and an associative rule, so Beam can apply it before
the shuffle and ship at most K rows per unit. Every count over the result then changes by at
most K * contribution when one unit is added or removed, and all counts move the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from beam_expmech.io import readers
from beam_expmech.io.validation import canonical_identity
from beam_expmech.mechanisms.randomness import random_source

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MULTIPLIER = np.uint64(0x100000001B3)  # FNV prime: the polynomial base for text units
PRIORITY = "__priority"
_COMPACT_ROWS = 1 << 17


def unit_hash(units: pa.Array) -> np.ndarray:
    """A 64-bit hash of each unit's canonical form (canonical_identity), which every worker computes
    alike and which keep_lowest groups by: numbers and text vectorised."""
    units = canonical_identity(units)
    if pa.types.is_integer(units.type):
        return _mix(units.to_numpy(zero_copy_only=False).astype(np.int64, copy=False).view(np.uint64))
    if pa.types.is_floating(units.type):
        return _mix(units.to_numpy(zero_copy_only=False).astype(np.float64, copy=False).view(np.uint64))
    text = units  # large_binary
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
    shard = (unit_hash(batch.column(unit_column)) % np.uint64(shards)).astype(np.uint16)
    order = np.argsort(shard, kind="stable")  # a radix sort for 16-bit keys
    bounds = np.searchsorted(shard[order], np.arange(shards + 1))
    for s in range(shards):
        if bounds[s + 1] > bounds[s]:
            # take, not slice: a pickled slice would carry the whole batch's buffers to every shard
            yield s, batch.take(pa.array(order[bounds[s] : bounds[s + 1]]))


def with_priorities(batch: pa.RecordBatch, seed: int | None = None) -> pa.RecordBatch:
    """The batch with a uniform random 32-bit priority per row (OS randomness unless a test seeds it).

    Seeded priorities depend on the batch's content, not on when it arrives, so tests see the
    same rows kept on every runner.
    """
    if seed is None:
        source = random_source(None)
    else:
        fingerprint = int(unit_hash(batch.column(0)).sum(dtype=np.uint64)) ^ batch.num_rows
        source = random_source(np.random.default_rng([seed, fingerprint]))  # test-only: seeded
    return batch.append_column(PRIORITY, pa.array(source.uint32(batch.num_rows)))


def keep_lowest(table: pa.Table, unit_column: str, max_rows: int) -> pa.Table:
    """Each unit's ``max_rows`` rows of lowest priority (all its rows if it has fewer).

    The priorities are iid uniform, so the rows kept are a uniform random subset of the
    unit's rows; and keeping the lowest is associative, so partial results can be merged.
    """
    if table.num_rows == 0:
        return table
    units = canonical_identity(table.column(unit_column).combine_chunks())  # the form unit_hash sharded by
    codes = pc.dictionary_encode(units).indices.to_numpy(zero_copy_only=False)
    # One sort key: the unit's code above its row's priority. (Equal priorities, 2^-32 a pair,
    # fall back on the sort's order: a negligible tilt of which rows are kept, not of how many.)
    order = np.argsort((codes.astype(np.uint64) << np.uint64(32)) | table.column(PRIORITY).to_numpy())
    unit = codes[order]
    first = np.ones(order.size, bool)
    first[1:] = unit[1:] != unit[:-1]
    rank = np.arange(order.size) - np.maximum.accumulate(np.where(first, np.arange(order.size), 0))
    return table.take(pa.array(order[rank < max_rows]))


@dataclass
class KeptRows:
    """KeepLowestPerUnit's accumulator: the compacted rows so far, and the batches not yet compacted."""

    kept: pa.Table | None = None
    pending: list = field(default_factory=list)  # record batches or tables
    pending_rows: int = 0


class KeepLowestPerUnit(beam.CombineFn):
    """Per shard: the ``max_rows`` lowest-priority rows of each unit, compacted as batches arrive.

    Beam lifts the combine before the shuffle, so each worker ships at most ``max_rows`` rows per unit.
    """

    def __init__(self, unit_column: str, max_rows: int):
        self.unit_column, self.max_rows = unit_column, max_rows

    def create_accumulator(self) -> KeptRows:
        return KeptRows()

    def add_input(self, accumulator: KeptRows, batch) -> KeptRows:
        accumulator.pending.append(batch)
        accumulator.pending_rows += batch.num_rows
        kept = 0 if accumulator.kept is None else accumulator.kept.num_rows
        if accumulator.pending_rows > max(_COMPACT_ROWS, kept):  # amortised: compact when pending outgrows kept
            self._compact(accumulator)
        return accumulator

    def merge_accumulators(self, accumulators) -> KeptRows:
        merged = self.create_accumulator()
        for accumulator in accumulators:
            if accumulator.kept is not None:
                merged.pending.append(accumulator.kept)
            merged.pending.extend(accumulator.pending)
        self._compact(merged)
        return merged

    def compact(self, accumulator: KeptRows) -> KeptRows:
        self._compact(accumulator)
        return accumulator

    def extract_output(self, accumulator: KeptRows) -> pa.Table | None:
        self._compact(accumulator)
        return accumulator.kept

    def _compact(self, accumulator: KeptRows) -> None:
        parts = ([] if accumulator.kept is None else [accumulator.kept]) + [
            p if isinstance(p, pa.Table) else pa.Table.from_batches([p]) for p in accumulator.pending
        ]
        if parts:
            accumulator.kept = keep_lowest(pa.concat_tables(parts).combine_chunks(), self.unit_column, self.max_rows)
        accumulator.pending, accumulator.pending_rows = [], 0


class BoundContributions(beam.PTransform):
    """At most ``max_rows`` rows per value of ``unit_column``; rows chosen uniformly at random.

    col: RecordBatch -> col: RecordBatch. With it, a count's sensitivity is ``max_rows`` times
    the predicate's contribution, and counts stay monotone. ``seed`` (tests only) makes the
    choice repeatable; the guarantee does not rest on this randomness, but it is the OS's by default.
    """

    def __init__(self, unit_column: str, max_rows: int, *, shards: int = 32, seed: int | None = None):
        super().__init__()
        if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
            raise ValueError(f"max_rows must be an integer >= 1, got {max_rows!r}")
        if not 1 <= shards <= 1 << 16:
            raise ValueError(f"shards must be between 1 and 65536, got {shards}")
        self.unit_column, self.max_rows, self.shards, self.seed = unit_column, max_rows, shards, seed

    def expand(self, batches):
        unit, shards, seed = self.unit_column, self.shards, self.seed
        return (
            batches
            | "Priorities" >> beam.Map(with_priorities, seed)  # col: RecordBatch + priority
            | "Shard" >> beam.FlatMap(split_by_shard, unit, shards)  # col: (shard, RecordBatch)
            | "KeepLowest" >> beam.CombinePerKey(KeepLowestPerUnit(unit, self.max_rows))  # col: (shard, Table)
            | "Batches" >> beam.FlatMapTuple(_as_batches)  # col: RecordBatch
        )


def _as_batches(_shard: int, table: pa.Table | None):
    if table is not None:
        yield from table.drop_columns([PRIORITY]).to_batches(max_chunksize=readers.BATCH_ROWS)
