"""Contribution bounding: at most K rows per privacy unit, optionally over at most L keys, as a
batched shuffle.

Every row gets a uniform random priority, and each batch is split by a stable hash of the unit
into S shards. Per shard, a CombineFn keeps each unit's K rows of lowest priority (a vectorised
sort and rank): a uniform random K-subset, and an associative rule, so Beam can apply it before
the shuffle and ship at most K rows per unit. Every count over the result then changes by at
most K * contribution when one unit is added or removed, and all counts move the same way.

With a key column and L (``max_keys``), each (unit, key) pair also gets a priority: a 64-bit mix
of the unit's hash, the key's hash and a salt drawn once per run, so every batch, shard and
worker ranks a unit's keys alike, from that unit's rows and the salt alone. A unit keeps its L
keys of lowest priority (a uniform random L-subset of its keys), then its K lowest-priority rows
among those keys' rows. Partial results keep each unit's L lowest keys and, per (unit, key), the
K lowest rows (at most L * K rows a unit): enough to contain the final choice of any union of
parts, so merging stays associative; only the final output cuts each unit to K rows. A unit then
touches at most L keys with at most K rows in all: at most L per-key counts move, each by at most
K * contribution, and at most L keys' counts of distinct units move, each by 1.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from beam_expmech import parameters
from beam_expmech.io import readers
from beam_expmech.io.validation import canonical_identity
from beam_expmech.mechanisms.randomness import stream_source

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MULTIPLIER = np.uint64(0x100000001B3)  # FNV prime: the polynomial base for text units
PRIORITY = "__priority"
_COMPACT_ROWS = 1 << 17
_NULL_KEY = np.uint64(0x6E756C6C6B6579)  # the hash of a null key


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
    fingerprint = 0 if seed is None else int(unit_hash(batch.column(0)).sum(dtype=np.uint64)) ^ batch.num_rows
    return batch.append_column(PRIORITY, pa.array(stream_source(seed, fingerprint).uint32(batch.num_rows)))


def key_salt(seed: int | None = None) -> int:
    """The run's 64-bit salt for key priorities: OS randomness, or (tests only) derived from ``seed``."""
    return stream_source(seed, 0x4B4559).bits(64)


def key_priorities(units: pa.Array, keys: pa.Array, salt: int) -> np.ndarray:
    """Each (unit, key) pair's 64-bit priority: a mix of both hashes and the run's salt, so it depends
    on nothing but the pair and the salt (every batch, shard and worker computes it alike). A null
    key is one key of its own."""
    return _pair_priorities(unit_hash(units), _key_hashes(keys), salt)


def _key_hashes(keys: pa.Array) -> np.ndarray:
    """Each key's 64-bit hash (``unit_hash`` of its canonical form); a null key's is _NULL_KEY."""
    keys = canonical_identity(keys)
    if not keys.null_count:
        return unit_hash(keys)
    filler = pa.scalar(b"" if pa.types.is_large_binary(keys.type) else 0, keys.type)
    key_hashes = unit_hash(keys.fill_null(filler))
    key_hashes[np.asarray(keys.is_null())] = _NULL_KEY
    return key_hashes


def _pair_priorities(unit_hashes: np.ndarray, key_hashes: np.ndarray, salt: int) -> np.ndarray:
    """The priority of each pair (unit_hashes[i], key_hashes[i]) under ``salt``."""
    return _mix(_mix(unit_hashes ^ np.uint64(salt)) ^ key_hashes)


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
    return table.take(pa.array(order[_ranks(codes[order]) < max_rows]))


def keep_lowest_keys(
    table: pa.Table, unit_column: str, key_column: str, max_keys: int, max_rows: int, salt: int
) -> pa.Table:
    """Each unit's ``max_keys`` keys of lowest key priority (``key_priorities`` with ``salt``), and per
    (unit, key) its ``max_rows`` rows of lowest priority: the partial result (at most L * K rows a unit).

    It holds every row the final choice can want: a key among a unit's L lowest overall is among
    its L lowest in any part that holds it, and a row among its (unit, key)'s K lowest overall is
    among them in its part. So keep_lowest_keys(parts merged) == keep_lowest_keys(all rows), in any
    order, and the final rule, ``keep_lowest`` on top (each unit's K lowest rows among its kept
    keys' rows), gives the same rows as one pass. Then one unit contributes at most K rows in all,
    to at most L distinct keys, chosen uniformly among its keys (key priorities are a hash of the
    unit, the key and a random salt), and the rows uniformly among those keys' rows.

    In three steps, each a sort of one 64-bit word (a 4-key lexsort of every row took most of a job's
    time): group the rows by (unit, key) pair; rank each unit's pairs, where it has more than L; rank
    each pair's rows by priority, where it has more than K. Key priorities are computed here, once a
    distinct pair, rather than carried by every row: a quarter of the bytes an accumulator holds.
    """
    if table.num_rows == 0:
        return table
    units = pc.dictionary_encode(canonical_identity(table.column(unit_column).combine_chunks()))
    keys = pc.dictionary_encode(canonical_identity(table.column(key_column).combine_chunks()), null_encoding="encode")
    pair_value = units.indices.to_numpy(zero_copy_only=False).astype(np.uint64) * np.uint64(len(keys.dictionary))
    pair_value += keys.indices.to_numpy(zero_copy_only=False).astype(np.uint64)  # unit, then key
    order = _sorting_order(pair_value)
    pair_value = pair_value[order]
    starts = np.flatnonzero(np.diff(pair_value, prepend=pair_value[0] + np.uint64(1)))  # each pair's first row
    sizes = np.diff(np.append(starts, order.size))
    pair_unit, pair_key = np.divmod(pair_value[starts], np.uint64(len(keys.dictionary)))  # pairs by unit
    del pair_value
    # Each distinct unit and key hashed once, each pair's priority from theirs (as key_priorities does).
    pair_priority = _pair_priorities(
        unit_hash(units.dictionary)[pair_unit], _key_hashes(keys.dictionary)[pair_key], salt
    )
    kept_pair = _key_ranks(pair_unit, pair_priority, pair_key, keys.dictionary, max_keys) < max_keys
    # Pairs of at most K rows keep them all; the others rank their rows by priority.
    rows = order[np.repeat(kept_pair & (sizes <= max_rows), sizes)]
    crowded = np.flatnonzero(np.repeat(kept_pair & (sizes > max_rows), sizes))  # positions in ``order``
    if crowded.size:
        pair = np.repeat(np.arange(starts.size, dtype=np.uint64), sizes)[crowded]
        priority = table.column(PRIORITY).combine_chunks().to_numpy(zero_copy_only=False)[order[crowded]]
        by_priority = np.argsort((pair << np.uint64(32)) | priority)  # by pair, then row priority
        rank = _ranks(pair[by_priority])
        rows = np.concatenate([rows, order[crowded[by_priority[rank < max_rows]]]])
    return table.take(pa.array(np.sort(rows)))  # in the table's order


def _sorting_order(values: np.ndarray) -> np.ndarray:
    """An order that sorts ``values`` (uint64); equal values keep their order.

    Where the value and the row number fit in 64 bits together, a sort of both in one word (an
    argsort is several times slower than a sort of the words themselves)."""
    index_bits = max(1, (values.size - 1).bit_length())
    if int(values.max()).bit_length() + index_bits > 64:
        return np.argsort(values, kind="stable")
    words = np.sort((values << np.uint64(index_bits)) | np.arange(values.size, dtype=np.uint64))
    return (words & np.uint64((1 << index_bits) - 1)).astype(np.int64)


def _ranks(groups: np.ndarray) -> np.ndarray:
    """0, 1, 2, ... within each run of equal values of ``groups`` (sorted)."""
    positions = np.arange(groups.size)
    new = np.ones(groups.size, bool)
    new[1:] = groups[1:] != groups[:-1]
    return positions - np.maximum.accumulate(np.where(new, positions, 0))


def _key_ranks(
    unit: np.ndarray, priority: np.ndarray, key: np.ndarray, dictionary: pa.Array, max_keys: int
) -> np.ndarray:
    """Each distinct (unit, key) pair's rank among its unit's keys (0 for the lowest), by key priority,
    and between distinct keys of equal priority (2^-64 a pair) by key value: by the data, not row order.
    ``unit`` is sorted; units of at most ``max_keys`` keys keep them all, so their pairs rank 0.

    The others sort (unit << 64 - b | priority >> b), b the bits a unit number needs; where two
    pairs of a unit share that word, the dropped bits and the key value decide (a 3-key lexsort)."""
    ranks = np.zeros(unit.size, np.int64)
    new_unit = np.flatnonzero(np.diff(unit, prepend=unit[0] + np.uint64(1)))
    counts = np.diff(np.append(new_unit, unit.size))
    many = np.flatnonzero(np.repeat(counts > max_keys, counts))
    if not many.size:
        return ranks
    unit, priority, key = unit[many], priority[many], key[many]
    bits = max(1, int(unit[-1]).bit_length())
    word = (unit << np.uint64(64 - bits)) | (priority >> np.uint64(bits))  # bits <= 32: unit numbers are int32
    order = np.argsort(word)
    word = word[order]
    if np.any(word[1:] == word[:-1]):
        by_value = np.empty(len(dictionary), np.int64)
        by_value[pc.sort_indices(dictionary).to_numpy()] = np.arange(len(dictionary))
        order = np.lexsort((by_value[key.astype(np.int64)], priority, unit))
    ranks[many[order]] = _ranks(unit[order])
    return ranks


class PackedTable:
    """A table as Arrow IPC compressed by zstd (about 30% smaller, and 60% of its unit column): how
    an accumulator travels between workers, and waits, whole, in a runner's shuffle (the direct
    runner holds several copies of every accumulator there, its peak memory). Unpacked when used."""

    def __init__(self, table: pa.Table):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as writer:
            writer.write_table(table)
        self.data, self.num_rows = sink.getvalue().to_pybytes(), table.num_rows

    def unpack(self) -> pa.Table:
        return pa.ipc.open_stream(self.data).read_all()


def _as_table(part: pa.Table | pa.RecordBatch | PackedTable) -> pa.Table:
    if isinstance(part, PackedTable):
        return part.unpack()
    return part if isinstance(part, pa.Table) else pa.Table.from_batches([part])


def _packed(part: pa.Table | pa.RecordBatch | PackedTable) -> PackedTable:
    return part if isinstance(part, PackedTable) else PackedTable(_as_table(part))


@dataclass
class KeptRows:
    """KeepLowestPerUnit's accumulator: the compacted rows so far, and the batches not yet compacted
    (pickled packed: see PackedTable; then unpacked as they are used)."""

    kept: pa.Table | PackedTable | None = None
    pending: list = field(default_factory=list)  # record batches, tables or packed tables
    pending_rows: int = 0

    def __getstate__(self) -> dict:
        kept = None if self.kept is None else _packed(self.kept)
        return {"kept": kept, "pending": [_packed(p) for p in self.pending], "pending_rows": self.pending_rows}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)


class KeepLowestPerUnit(beam.CombineFn):
    """Per shard: the ``max_rows`` lowest-priority rows of each unit, compacted as batches arrive.

    Beam lifts the combine before the shuffle, so each worker ships at most ``max_rows`` rows per unit.
    With ``key_column``, ``max_keys`` (L) and the run's ``salt`` (``key_salt``), partial results keep
    each unit's L lowest keys with K rows each (``keep_lowest_keys``), and only ``extract_output``
    cuts each unit to K rows in all.
    """

    def __init__(
        self,
        unit_column: str,
        max_rows: int,
        key_column: str | None = None,
        max_keys: int | None = None,
        salt: int | None = None,
    ):
        if key_column is not None and (max_keys is None or salt is None):
            raise ValueError("a key_column needs max_keys and the run's salt")
        self.unit_column, self.max_rows = unit_column, max_rows
        self.key_column, self.max_keys, self.salt = key_column, max_keys, salt

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
        accumulators = [a for a in accumulators if a.kept is not None or a.pending]
        if len(accumulators) == 1:  # nothing to merge (the runner's usual case after the shuffle): a copy,
            one = accumulators[0]  # since Beam lets a merge modify only the first of its inputs
            return KeptRows(one.kept, list(one.pending), one.pending_rows)
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
        kept = None if accumulator.kept is None else _as_table(accumulator.kept)
        if self.key_column is None or kept is None:
            return kept
        return keep_lowest(kept, self.unit_column, self.max_rows)  # the final cut: K rows a unit

    def _compact(self, accumulator: KeptRows) -> None:
        if not accumulator.pending:  # kept is compact already: both rules are idempotent
            return
        parts = [_as_table(p) for p in ([] if accumulator.kept is None else [accumulator.kept]) + accumulator.pending]
        if parts:
            table = pa.concat_tables(parts).combine_chunks()
            if self.key_column is None:
                accumulator.kept = keep_lowest(table, self.unit_column, self.max_rows)
            else:
                accumulator.kept = keep_lowest_keys(
                    table, self.unit_column, self.key_column, self.max_keys, self.max_rows, self.salt
                )
        accumulator.pending, accumulator.pending_rows = [], 0


class BoundContributions(beam.PTransform):
    """At most ``max_rows`` rows per value of ``unit_column``; rows chosen uniformly at random.

    col: RecordBatch -> col: RecordBatch. With it, a count's sensitivity is ``max_rows`` times
    the predicate's contribution, and counts stay monotone. With ``key_column`` and ``max_keys``
    (L, both or neither), each unit also keeps rows of at most L distinct values of ``key_column``,
    chosen uniformly among its keys, and its ``max_rows`` rows among theirs: at most L per-key
    counts move, each by at most ``max_rows`` times the contribution. ``seed`` (tests only) makes
    the choice repeatable; the guarantee does not rest on this randomness, but it is the OS's by default.
    """

    def __init__(
        self,
        unit_column: str,
        max_rows: int,
        *,
        shards: int = 32,
        seed: int | None = None,
        key_column: str | None = None,
        max_keys: int | None = None,
    ):
        super().__init__()
        if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
            raise ValueError(f"max_rows must be an integer >= 1, got {max_rows!r}")
        if not 1 <= shards <= 1 << 16:
            raise ValueError(f"shards must be between 1 and 65536, got {shards}")
        if (key_column is None) != (max_keys is None):
            raise ValueError("key_column and max_keys go together: give both or neither")
        if key_column is not None:
            if not isinstance(key_column, str):
                raise ValueError(f"key_column must be a column name (str), got {key_column!r}")
            parameters.count(max_keys, "max_keys")
        self.unit_column, self.max_rows, self.shards, self.seed = unit_column, max_rows, shards, seed
        self.key_column, self.max_keys = key_column, max_keys
        # Drawn once, here, so every worker ranks a unit's keys alike.
        self.salt = None if key_column is None else key_salt(seed)

    def expand(self, batches):
        unit, shards, seed, key = self.unit_column, self.shards, self.seed, self.key_column
        batches = batches | "Priorities" >> beam.Map(with_priorities, seed)  # col: RecordBatch + priority
        combine = KeepLowestPerUnit(unit, self.max_rows, key, self.max_keys, self.salt)
        return (
            batches
            | "Shard" >> beam.FlatMap(split_by_shard, unit, shards)  # col: (shard, RecordBatch)
            | "KeepLowest" >> beam.CombinePerKey(combine)  # col: (shard, Table)
            | "Batches" >> beam.FlatMap(lambda kept: as_batches(*kept, unit))  # col: RecordBatch, a unit in one
        )


def as_batches(_shard: int, table: pa.Table | None, unit_column: str):
    """The kept rows (grouped by unit, as keep_lowest leaves them) in batches of about BATCH_ROWS that
    never split a unit: a count of distinct units per batch then adds up over batches."""
    if table is None:
        return
    table = table.drop_columns([PRIORITY]).combine_chunks()
    codes = pc.dictionary_encode(canonical_identity(table.column(unit_column).combine_chunks())).indices
    starts = np.flatnonzero(np.diff(codes.to_numpy(zero_copy_only=False))) + 1  # where a unit's rows begin
    wanted = np.arange(readers.BATCH_ROWS, table.num_rows, readers.BATCH_ROWS)
    cuts = np.unique(starts[np.minimum(np.searchsorted(starts, wanted), starts.size - 1)]) if starts.size else []
    for begin, end in zip([0, *cuts], [*cuts, table.num_rows], strict=True):
        # One batch a slice: past 2 GiB of text a column stays in several chunks, whose edges may fall
        # inside a unit; combined, a slice (about BATCH_ROWS rows) is one chunk again.
        batches = table.slice(begin, end - begin).combine_chunks().to_batches()
        if len(batches) > 1:
            raise ValueError("a batch of the kept rows holds over 2 GiB of text in one column: use shorter values")
        yield from batches
