"""Contribution bounding: at most K rows per privacy unit, optionally over at most L keys, as a
batched shuffle.

Each batch is split by a stable hash of the unit into S shards, and every row of a shard crosses the
runner's shuffle as bytes (``shard_parts``, ``encode_rows``). After it, a shard holds all the rows of
its units: it draws a uniform random priority a row and keeps each unit's K rows of lowest priority
(a vectorised sort and rank, ``KeepLowestPerUnit``): a uniform random subset of min(K, n) of a unit's
n rows, which depends on that unit's rows alone. Every count over the result then changes by at
most K * contribution when one unit is added or removed, and all counts move the same way.

With a key column and L (``max_keys``), each (unit, key) pair also gets a priority: a 64-bit mix
of the unit's hash, the key's hash and a salt drawn once per run. A unit keeps its L keys of lowest
priority (a uniform random L-subset of its keys), then its K lowest-priority rows among those keys'
rows. A unit then touches at most L keys with at most K rows in all: at most L per-key counts move,
each by at most K * contribution, and at most L keys' counts of distinct units move, each by 1.

A unit is known by its 64-bit hash (``unit_hash``): for numbers a bijection, so the hash is the unit;
text units of one hash are told apart by value wherever two meet (``_lowest``). A shard is ranked a
cache-sized bucket of the hash's top bits at a time (``_by_bucket``)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from beam_expmech import parameters
from beam_expmech.io import readers
from beam_expmech.io.validation import canonical_identity
from beam_expmech.mechanisms.randomness import RandomSource, stream_source
from beam_expmech.ordering import stable_order
from beam_expmech.predicates import CANDIDATE
from beam_expmech.transforms import lineage
from beam_expmech.transforms.lineage import validated_columns

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MULTIPLIER = np.uint64(0x100000001B3)  # FNV prime: the polynomial base for text units
PRIORITY = "__priority"
HASH = "__unit_hash"
_TOP = np.uint64(48)  # the unit hash's top 16 bits: which shard, and which bucket in it, a row is in
_BUCKET_ROWS = 1 << 14  # rows ranked at once (they stay in the cache): see _by_bucket
_NARROWED = b"beam_expmech.narrowed"  # field metadata of encode_rows: a narrowed column's least value
_NULL_KEY = np.uint64(0x6E756C6C6B6579)  # the hash of a null key
_PRIORITY_BITS = 20  # of a row's 32-bit priority, in _lowest's sort word (ties at a threshold: exact)


def unit_hash(units: pa.Array) -> np.ndarray:
    """A 64-bit hash of each unit's canonical form (canonical_identity), which every worker computes
    alike and which keep_lowest groups by: numbers and text vectorised."""
    if units.null_count:  # a null is no unit; and to numpy, a column with one would turn to floats
        raise ValueError("unit_hash needs values without nulls: route them to a dead letter (ValidateBatches)")
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
    # sum_j byte_j * P^j within each unit (uint64 arithmetic wraps, as intended)
    chunk, start = data[offsets[0] : offsets[-1]], offsets[:-1] - offsets[0]
    width = int(lengths.max())
    with np.errstate(over="ignore"):
        if width * lengths.size <= 4 * chunk.size:  # values of like lengths (keys, ids): a byte position at a time
            sums, power = np.zeros(lengths.size, np.uint64), np.uint64(1)
            for j in range(width):
                byte = chunk[np.minimum(start + j, chunk.size - 1)].astype(np.uint64)
                byte[lengths <= j] = 0
                sums += byte * power
                power *= _MULTIPLIER
        else:  # a few long values: by prefix sums over the bytes (5 times slower on short keys)
            powers = np.concatenate([[np.uint64(1)], np.cumprod(np.full(width - 1, _MULTIPLIER))])
            position = np.arange(chunk.size) - np.repeat(start, lengths)
            prefix = np.concatenate([[np.uint64(0)], np.cumsum(chunk.astype(np.uint64) * powers[position])])
            sums = prefix[start + lengths] - prefix[start]
    return _mix(sums ^ lengths.astype(np.uint64))


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: every input bit affects every output bit."""
    with np.errstate(over="ignore"):
        x = (x + _GOLDEN) & np.uint64(0xFFFFFFFFFFFFFFFF)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


DEFAULT_BOUNDING_SHARDS = 32


def shards_for(input_bytes: int) -> int:
    """How many shards bounding cuts the units into, from the input's size: one per 64 MiB, 1 to 256.

    A shard's rows are ranked in one call after the shuffle (KeepLowestPerUnit), which holds them all: about
    20 bytes a row, 64 MiB of input a shard up to 16 GiB of input, more beyond. Each batch is cut into a part
    a shard: more shards mean smaller parts, and each part costs its encoding and an element of the shuffle."""
    return max(1, min(256, -(-int(input_bytes) // (1 << 26))))


def _shard_starts(shards: int) -> np.ndarray:
    """Shard s holds the rows whose unit hash's top 16 bits are in [starts[s], starts[s + 1])."""
    return (np.arange(shards + 1) * (1 << 16) + shards - 1) // shards


def split_by_shard(batch: pa.RecordBatch, unit_column: str, shards: int) -> Iterable[tuple[int, pa.RecordBatch]]:
    """(shard, its rows), sorted by the unit hash's top 16 bits: a shard is a range of those bits, so the
    rows of one unit always go to one shard, and every part of a shard is ordered alike (what ``_by_bucket``
    reads them by). The unit column leaves in its canonical form (``canonical_identity``: one value a
    unit), so that nothing downstream can tell two spellings of one unit apart; its hash does not leave
    (the shard computes it again: a unit's number compresses, its hash does not), nor does a priority."""
    units = canonical_identity(batch.column(unit_column))
    top = (unit_hash(units) >> _TOP).astype(np.uint16)
    # every step after this one reads the unit as it is identified here (KeyCounts counts distinct units)
    batch = batch.set_column(batch.schema.get_field_index(unit_column), unit_column, units)
    order = np.argsort(top, kind="stable")  # a radix sort for 16-bit keys
    bounds = np.searchsorted(top[order], _shard_starts(shards))
    batch = _gather(batch, order)  # one take, then a slice a shard (a take a shard costs twice as much)
    for s in range(shards):
        if bounds[s + 1] > bounds[s]:
            yield s, batch.slice(bounds[s], bounds[s + 1] - bounds[s])


def shard_parts(batch: pa.RecordBatch, unit_column: str, shards: int) -> Iterable[tuple[int, bytes]]:
    """col: RecordBatch -> col: (shard, bytes): the batch's rows of each shard (``split_by_shard``), encoded
    (``encode_rows``). A part a batch and shard, not parts gathered over batches: a DoFn that emits what it
    gathered when its bundle ends loses it on Beam's Dask runner, which collects a bundle's output before."""
    for shard, rows in split_by_shard(batch, unit_column, shards):
        yield shard, encode_rows(pa.Table.from_batches([rows]))


def with_priorities(batch: pa.RecordBatch, seed: int | None = None) -> pa.RecordBatch:
    """The batch with a uniform random 32-bit priority per row (OS randomness unless a test seeds it), for
    ``keep_lowest``: one table at once (KeepLowestPerUnit draws its own after the shuffle)."""
    fingerprint = 0 if seed is None else int(unit_hash(batch.column(0)).sum(dtype=np.uint64)) ^ batch.num_rows
    return batch.append_column(PRIORITY, pa.array(stream_source(seed, fingerprint).uint32(batch.num_rows)))


def _seeded_priorities(
    table: pa.Table, unit_column: str, hashes: np.ndarray, seed: int
) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    """Tests only (not private): the rows sorted by unit hash, unit and content, and each row's priority a mix
    of the seed, its unit's hash and its place among its unit's rows. A unit's priorities then depend on its
    own rows alone, not on the other units of its shard, how the rows were cut into batches, or their order."""
    others = [name for name in table.column_names if name != unit_column]
    table = table.append_column(HASH, pa.array(hashes))
    table = table.sort_by([(name, "ascending") for name in [HASH, unit_column, *others]])
    hashes = _column(table, HASH).copy()
    table = table.drop_columns([HASH])
    new = np.ones(hashes.size, bool)  # where a unit's rows begin: its hash changes, or (text) its value
    new[1:] = hashes[1:] != hashes[:-1]
    units = table.column(unit_column).combine_chunks()
    if hashes.size > 1 and not _hash_is_identity(units.type):
        new[1:] |= ~np.asarray(pc.equal(units.slice(1), units.slice(0, hashes.size - 1)))
    place = _ranks(np.cumsum(new)).astype(np.uint64)
    return table, hashes, (_mix(_mix(hashes ^ np.uint64(key_salt(seed))) ^ place) >> np.uint64(32)).astype(np.uint32)


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
    """Each unit's ``max_rows`` rows of lowest priority (all its rows if it has fewer), grouped by unit,
    with their unit hash (column HASH), in the order of the hash.

    The priorities are iid uniform, so the rows kept are a uniform random subset of the
    unit's rows; and keeping the lowest is associative, so partial results can be merged.
    """
    if HASH not in table.column_names:
        table = table.append_column(HASH, pa.array(unit_hash(table.column(unit_column).combine_chunks())))
    table = table.combine_chunks()
    units = _text_units(table, unit_column)
    return table.take(_lowest(_column(table, HASH), _column(table, PRIORITY), max_rows, units))


def _lowest(hashes: np.ndarray, priorities: np.ndarray, k: int, units: pa.ChunkedArray | None = None) -> np.ndarray:
    """The positions of each unit's ``k`` rows of lowest priority, in the order of the unit hash.

    ``hashes`` is the unit's identity where ``units`` is None (numbers: unit_hash is then a bijection);
    text units (``units``, their column) are told apart by value where two share a hash.

    One sort of one 64-bit word a row (several times faster than an argsort or a lexsort): the hash
    (less the smallest, shifted to what fits), the priority's top _PRIORITY_BITS and the row number.
    Rows then come grouped by unit, each unit's by priority, and a row is kept if it is among the
    first k of its group. Where two units share the hash's kept bits, or a group holds two text
    units, or two priorities at a unit's threshold share their top bits, an exact lexsort decides
    (ties then go by position, a negligible tilt of which rows are kept, never of how many).
    """
    n = hashes.size
    if n == 0:
        return np.zeros(0, np.intp)
    index_bits = max(1, (n - 1).bit_length())
    hash_bits = 64 - _PRIORITY_BITS - index_bits
    if hash_bits < 16 or hashes.dtype != np.uint64 or priorities.dtype != np.uint32:
        # Too many rows to pack, or words of other widths, whose bits would spill over (review 6): exactly.
        return _lowest_exact(hashes, priorities, k, units)
    low = hashes.min()
    shift = np.uint64(max(0, int(hashes.max() - low).bit_length() - hash_bits))
    words = ((hashes - low) >> shift) << np.uint64(_PRIORITY_BITS + index_bits)
    words |= (priorities >> np.uint32(32 - _PRIORITY_BITS)).astype(np.uint64) << np.uint64(index_bits)
    words |= np.arange(n, dtype=np.uint64)
    words.sort()
    group = words >> np.uint64(_PRIORITY_BITS + index_bits)
    kept = np.ones(n, bool)  # a row is among its group's first k when the row k before it is of another group
    np.not_equal(group[k:], group[:-k], out=kept[k:])
    order = (words & np.uint64((1 << index_bits) - 1)).astype(np.intp)
    grouped = hashes[order]
    # Equal hashes share their word's bits: as many runs of hashes as of groups, unless two units share a group.
    if np.count_nonzero(grouped[1:] != grouped[:-1]) != np.count_nonzero(group[1:] != group[:-1]):
        return _lowest_exact(hashes, priorities, k, units)  # two units share the hash's kept bits
    if units is not None and _units_differ(units, order, group):
        return _lowest_exact(hashes, priorities, k, units)  # two text units of one hash
    boundary = np.flatnonzero(kept[:-1] & ~kept[1:]) + 1  # the first row past a unit's threshold
    if boundary.size and np.any((words[boundary] ^ words[boundary - 1]) >> np.uint64(index_bits) == 0):
        return _lowest_exact(hashes, priorities, k, units)  # priorities tie at a threshold in their top bits
    return order[kept]


def _units_differ(units: pa.ChunkedArray, order: np.ndarray, group: np.ndarray) -> bool:
    """Whether two rows grouped together (``group``, sorted, of the rows ``order``) hold different text units."""
    same = np.flatnonzero(group[1:] == group[:-1])  # row same + 1 continues the group of row same
    if not same.size:
        return False
    text = canonical_identity(units.combine_chunks())
    return not pc.all(pc.equal(text.take(order[same]), text.take(order[same + 1]))).as_py()


def _lowest_exact(hashes: np.ndarray, priorities: np.ndarray, k: int, units: pa.ChunkedArray | None) -> np.ndarray:
    """``_lowest`` by a lexsort: by hash, then (text units) by value, then by priority and position."""
    keys = [np.arange(hashes.size), priorities]
    if units is not None:
        keys.append(pc.dictionary_encode(canonical_identity(units.combine_chunks())).indices.to_numpy())
    order = np.lexsort([*keys, hashes])
    grouped = hashes[order]
    new = np.ones(hashes.size, bool)
    new[1:] = grouped[1:] != grouped[:-1]
    if units is not None:
        new[1:] |= keys[2][order][1:] != keys[2][order][:-1]
    return order[_ranks(np.cumsum(new)) < k]


def _hash_is_identity(kind: pa.DataType) -> bool:
    """Whether unit_hash tells every two units of this type apart: numbers (a bijection of their 64 bits)."""
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return pa.types.is_integer(kind) or pa.types.is_boolean(kind) or pa.types.is_floating(kind)


def _text_units(table: pa.Table, unit_column: str) -> pa.ChunkedArray | None:
    """The unit column where its hash is not its identity (text), for ``_lowest`` to compare; else None
    (numbers, or a table without the column)."""
    if unit_column not in table.column_names or _hash_is_identity(table.schema.field(unit_column).type):
        return None
    return table.column(unit_column)


def _gather(rows, positions: np.ndarray):
    """``rows.take(positions)`` for positions made here from the rows' own sort or ranking, hence in range:
    without Arrow's check of every index, which costs as much again as the take (on the hot path)."""
    return pc.take(rows, pa.array(positions), boundscheck=False)


def _column(table: pa.Table, name: str | int) -> np.ndarray:
    """The column as numpy, read-only; without a copy where it is one chunk (combine_chunks copies even then)."""
    column = table.column(name)
    return (column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()).to_numpy(zero_copy_only=False)


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
    """
    return table.take(_lowest_keys(table, unit_column, key_column, max_keys, max_rows, salt))


def _lowest_keys(table: pa.Table, unit_column: str, key_column: str, max_keys: int, max_rows: int, salt: int):
    """The positions of ``keep_lowest_keys``' rows, in the table's order.

    In three steps, each a sort of one 64-bit word (a 4-key lexsort of every row took most of a job's
    time): group the rows by (unit, key) pair; rank each unit's pairs, where it has more than L; rank
    each pair's rows by priority, where it has more than K. Key priorities are computed here, once a
    distinct pair, rather than carried by every row.
    """
    if table.num_rows == 0:
        return np.zeros(0, np.intp)
    units = pc.dictionary_encode(canonical_identity(table.column(unit_column).combine_chunks()))
    keys = pc.dictionary_encode(canonical_identity(table.column(key_column).combine_chunks()), null_encoding="encode")
    pair_value = units.indices.to_numpy(zero_copy_only=False).astype(np.uint64) * np.uint64(len(keys.dictionary))
    pair_value += keys.indices.to_numpy(zero_copy_only=False).astype(np.uint64)  # unit, then key
    order = stable_order(pair_value)
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
    return np.sort(rows)  # in the table's order


def _ranks(groups: np.ndarray) -> np.ndarray:
    """0, 1, 2, ... within each run of equal values of ``groups`` (sorted)."""
    new = np.ones(groups.size, bool)
    new[1:] = groups[1:] != groups[:-1]
    positions = np.arange(new.size)
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


def encode_rows(table: pa.Table) -> bytes:
    """A shard's part as it crosses the runner's shuffle: Arrow IPC compressed by zstd, as bytes.

    Bytes, not an object the runner pickles: the direct runner decodes every element it shuffles into its
    own table and encodes it again to hand it on, which for bytes is a copy (for a pickled table, a
    decompression and a compression more). A 64-bit integer column whose values span less than 2^32 (a
    unit number, most often) crosses as its offset from its least value, in 32 bits: a unit then takes
    about 3.3 bytes, against 5.3 as it was (zstd; LZ4: 6), and it is faster to compress."""
    for i, field in enumerate(table.schema):
        marked = field.metadata is not None and _NARROWED in field.metadata
        narrowed = _narrowed(table, i)
        if narrowed is not None:
            offsets, low = narrowed
            metadata = {**(field.metadata or {}), _NARROWED: str(low).encode()}
            table = table.set_column(i, field.with_type(pa.uint32()).with_metadata(metadata), pa.array(offsets))
        elif marked:  # the marker is ours alone: on a column that came with it, decode would shift its values
            table = table.set_column(i, field.with_metadata(_without_marker(field.metadata)), table.column(i))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def decode_rows(data: bytes) -> pa.Table:
    """The table ``encode_rows`` encoded, as it was (values, types, nullability, metadata)."""
    table = pa.ipc.open_stream(data).read_all()
    for i, field in enumerate(table.schema):
        if pa.types.is_uint32(field.type) and field.metadata is not None and _NARROWED in field.metadata:
            low = np.uint64(int(field.metadata[_NARROWED]) & ((1 << 64) - 1))
            values = (_column(table, i).astype(np.uint64) + low).view(np.int64)
            restored = field.with_type(pa.int64()).with_metadata(_without_marker(field.metadata))
            table = table.set_column(i, restored, pa.array(values))
    return table


def _narrowed(table: pa.Table, i: int) -> tuple[np.ndarray, int] | None:
    """Column ``i`` as uint32 offsets from its least value, and that value, where it is a 64-bit integer
    column without nulls that spans less than 2^32 (the offsets wrap alike in uint64: exact); else None."""
    column = table.column(i)
    if not pa.types.is_int64(column.type) or column.null_count or not len(column):
        return None
    values = _column(table, i)
    low = int(values.min())
    if int(values.max()) - low >= 1 << 32:
        return None
    return (values.view(np.uint64) - np.uint64(low & ((1 << 64) - 1))).astype(np.uint32), low


def _without_marker(metadata: dict) -> dict:
    return {k: v for k, v in metadata.items() if k != _NARROWED}


class KeepLowestPerUnit:
    """After the shuffle, one shard's rows (its parts, as shard_parts encodes them): each unit's
    ``max_rows`` rows of lowest priority, priorities drawn here, one a row (OS randomness unless a test
    seeds it). All a unit's rows are in its shard, so each unit keeps a uniform random subset of
    min(K, its rows) of its rows, whatever the other units hold.

    With ``key_column``, ``max_keys`` (L) and the run's ``salt`` (``key_salt``), each unit first keeps
    its L keys of lowest key priority (``keep_lowest_keys``), then its K lowest rows among theirs.
    """

    def __init__(
        self,
        unit_column: str,
        max_rows: int,
        key_column: str | None = None,
        max_keys: int | None = None,
        salt: int | None = None,
        seed: int | None = None,
    ):
        if key_column is not None and (max_keys is None or salt is None):
            raise ValueError("a key_column needs max_keys and the run's salt")
        self.unit_column, self.max_rows = unit_column, max_rows
        self.key_column, self.max_keys, self.salt, self.seed = key_column, max_keys, salt, seed

    def __call__(self, parts: Iterable[bytes]) -> pa.Table | None:
        """The kept rows of the shard's encoded ``parts``, with their unit hash (HASH) and priority (PRIORITY),
        in the order of the unit hash; None for no parts."""
        tables = [decode_rows(part) for part in parts]
        if not tables:
            return None
        table = pa.concat_tables(tables).combine_chunks()
        hashes = unit_hash(table.column(self.unit_column).combine_chunks())
        offsets = np.cumsum([0] + [t.num_rows for t in tables])  # each part sorted by the hash's top bits
        if self.seed is None:
            priorities = RandomSource().uint32(table.num_rows)
        else:  # sorted by hash: one part
            table, hashes, priorities = _seeded_priorities(table, self.unit_column, hashes, self.seed)
            offsets = np.array([0, table.num_rows])
        table = table.append_column(HASH, pa.array(hashes)).append_column(PRIORITY, pa.array(priorities))
        return _by_bucket(table, offsets, self._rule)

    def _rule(self, table: pa.Table, positions: np.ndarray, hashes: np.ndarray, priorities: np.ndarray) -> np.ndarray:
        """Which of ``positions`` (one bucket's rows of ``table``) stay, in the order of their unit hash."""
        if self.key_column is not None:  # the unit's L keys first, then its K rows among their rows
            needed = table.select([self.unit_column, self.key_column, PRIORITY]).take(positions)
            kept = _lowest_keys(needed, self.unit_column, self.key_column, self.max_keys, self.max_rows, self.salt)
            positions, hashes, priorities = positions[kept], hashes[kept], priorities[kept]
        units = _text_units(table, self.unit_column)
        return positions[_lowest(hashes, priorities, self.max_rows, None if units is None else units.take(positions))]


def _by_bucket(table: pa.Table, offsets: np.ndarray, rule) -> pa.Table:
    """The rows ``rule`` keeps of ``table`` (with columns HASH and PRIORITY), made of parts
    (``table[offsets[i]:offsets[i + 1]]``) each sorted by the unit hash's top 16 bits, in the order of the
    unit hash.

    The rows are ranked a bucket at a time, a range of the hash's top bits of about _BUCKET_ROWS rows
    (one unit's rows are all in one bucket): each bucket's arrays then stay in the processor's cache,
    which makes ranking several times faster than over the whole shard at once. A bucket's rows are
    gathered from every part by ranges (each part is sorted), not sorted again.
    """
    if table.num_rows == 0:
        return table
    hashes, priorities = _column(table, HASH), _column(table, PRIORITY)
    top = (hashes >> _TOP).astype(np.int64)
    tops = [top[a:b] for a, b in itertools.pairwise(offsets)]
    low = min(int(t[0]) for t in tops if t.size)
    high = max(int(t[-1]) for t in tops if t.size) + 1
    buckets = max(1, min(high - low, table.num_rows // _BUCKET_ROWS))
    edges = low + (np.arange(buckets + 1) * (high - low)) // buckets
    starts = offsets[:-1, None] + np.stack([np.searchsorted(t, edges) for t in tops])  # part x bucket edge
    runs = np.diff(starts, axis=1)  # part x bucket: how many rows of each part fall in each bucket
    lengths = runs.T.ravel()  # bucket by bucket, part by part
    order = np.repeat(starts[:, :-1].T.ravel() - (np.cumsum(lengths) - lengths), lengths) + np.arange(lengths.sum())
    bounds = np.concatenate([[0], np.cumsum(runs.sum(axis=0))])
    kept = [
        rule(table, order[a:b], hashes[order[a:b]], priorities[order[a:b]])
        for a, b in itertools.pairwise(bounds)
        if b > a
    ]
    return _gather(table, np.concatenate(kept) if kept else np.zeros(0, np.intp))


class BoundContributions(beam.PTransform):
    """At most ``max_rows`` rows per value of ``unit_column``; rows chosen uniformly at random.

    col: RecordBatch -> col: RecordBatch. With it, a count's sensitivity is ``max_rows`` times
    the predicate's contribution, and counts stay monotone. With ``key_column`` and ``max_keys``
    (L, both or neither), each unit also keeps rows of at most L distinct values of ``key_column``,
    chosen uniformly among its keys, and its ``max_rows`` rows among theirs: at most L per-key
    counts move, each by at most ``max_rows`` times the contribution. ``shards``: see ``shards_for``.
    Without ``keep_unit`` (and a key column), the output has no unit column: for counts that do not read it.
    ``seed`` (tests only) makes the choice repeatable; the guarantee does not rest on this randomness,
    but it is the OS's by default.
    """

    def __init__(
        self,
        unit_column: str,
        max_rows: int,
        *,
        shards: int = DEFAULT_BOUNDING_SHARDS,
        seed: int | None = None,
        key_column: str | None = None,
        max_keys: int | None = None,
        keep_unit: bool = True,
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
        self.key_column, self.max_keys, self.keep_unit = key_column, max_keys, keep_unit or key_column is not None
        # Drawn once, here, so every worker ranks a unit's keys alike.
        self.salt = None if key_column is None else key_salt(seed)

    def expand(self, batches):
        unit, shards, seed = self.unit_column, self.shards, self.seed
        require_validated(batches, [unit, *([self.key_column] if self.key_column else [])], "Bound", unit=unit)
        other = [m.unit for m in lineage.paths(batches, lineage.BOUNDED) if m is not None and m.unit != unit]
        if other:  # its bound would replace the first: a unit of the first holds many of this one's units
            raise ValueError(f"Bound: these rows are bounded by unit {other[0]!r} already: bound them by one unit")
        keep = KeepLowestPerUnit(unit, self.max_rows, self.key_column, self.max_keys, self.salt, seed)
        bounded = (
            batches
            | "Shard" >> beam.FlatMap(shard_parts, unit, shards)  # col: (shard, bytes: rows of the shard, encoded)
            | "Group" >> beam.GroupByKey()  # col: (shard, [bytes]): all the rows of a shard's units
            | "KeepLowest" >> beam.FlatMap(_kept_batches, keep, [] if self.keep_unit else [unit])  # col: batch
        )
        return lineage.mark(bounded, lineage.BOUNDED, self.bounds)

    @property
    def bounds(self) -> lineage.Bounds:
        """How far one unit reaches into the rows this step leaves: what every count after it is bounded by."""
        return lineage.Bounds(self.unit_column, self.max_rows, self.key_column, self.max_keys)


UNIT_KINDS = ("any", "int", "float")  # a unit read as text ("string": -0.0 as "-0") or as a label code is not one form


def require_validated(batches, columns: Sequence[str], step: str, unit: str | None = None) -> dict[str, str]:
    """The kinds of the columns validated alike on every path to ``batches`` (``lineage.validated_columns``); a
    ValueError, when the graph is built, if one of ``columns`` was not (validated on one path and not another,
    or typed differently on two: 5 in one, "5" in another), if ``unit`` was validated as a kind that does not
    give it one form, or if a validated column takes a name of the library's own columns. Without validation a
    unit could be spelled several ways (NaN payloads, -0.0, a null), and a later step that groups its rows by
    another rule than bounding's would count it more than once."""
    validated = validated_columns(batches)
    missing = [c for c in columns if c not in validated]
    if missing:
        raise ValueError(
            f"{step}: column {missing[0]!r} was not validated alike on every path here: put ValidateBatches(specs) "
            "after ReadRecordBatches (or read rows with RowsToBatches), declaring it, before bounding and counting, "
            "and read it as one type on every path"
        )
    if unit is not None and validated[unit][0] not in UNIT_KINDS:
        raise ValueError(f"{step}: the privacy unit {unit!r} is validated as kind {validated[unit][0]!r}: declare it "
                         "as kind 'any' (an identity), which gives a unit one form")  # fmt: skip
    reserved = [c for c in validated if c in (PRIORITY, HASH, CANDIDATE)]
    if reserved:
        raise ValueError(f"{step}: column {reserved[0]!r} has the name of a column the library adds; rename it")
    return {column: kind for column, (kind, _) in validated.items()}


def _kept_batches(shard: tuple[int, Iterable[bytes]], keep: KeepLowestPerUnit, drop: Sequence[str]):
    """col: (shard, [bytes]) -> col: RecordBatch: the shard's kept rows (``keep``), in batches."""
    yield from as_batches(keep(shard[1]), drop)


def as_batches(table: pa.Table | None, drop: Sequence[str] = ()):
    """The kept rows (in the order of their unit hash, as KeepLowestPerUnit leaves them) in batches of about
    BATCH_ROWS that never split a unit: a count of distinct units per batch then adds up over batches.
    Batches end where the hash changes (text units of one hash stay together)."""
    if table is None:
        return
    hashes = _column(table, HASH)
    table = table.drop_columns([HASH, PRIORITY, *(c for c in drop if c in table.column_names)])
    starts = np.flatnonzero(hashes[1:] != hashes[:-1]) + 1  # where a unit's rows begin
    wanted = np.arange(readers.BATCH_ROWS, table.num_rows, readers.BATCH_ROWS)
    cuts = np.unique(starts[np.minimum(np.searchsorted(starts, wanted), starts.size - 1)]) if starts.size else []
    for begin, end in zip([0, *cuts], [*cuts, table.num_rows], strict=True):
        # One batch a slice: past 2 GiB of text a column stays in several chunks, whose edges may fall
        # inside a unit; combined, a slice (about BATCH_ROWS rows) is one chunk again.
        batches = table.slice(begin, end - begin).combine_chunks().to_batches()
        if len(batches) > 1:
            raise ValueError("a batch of the kept rows holds over 2 GiB of text in one column: use shorter values")
        yield from batches
