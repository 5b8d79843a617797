"""Contribution bounding: no unit above K rows (and L keys, when asked), whatever the input; the choice
is uniform, and each unit's depends on its own rows alone."""

from __future__ import annotations

import itertools
from collections import Counter

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.testing.util import assert_that
from hypothesis import given, settings
from hypothesis import strategies as st
from sampling import assert_follows

from beam_expmech.io import readers
from beam_expmech.io.validation import ColumnSpec, canonical_identity
from beam_expmech.ordering import stable_order
from beam_expmech.transforms import ValidateBatches, bounding
from beam_expmech.transforms.bounding import (
    HASH,
    PRIORITY,
    BoundContributions,
    KeepLowestPerUnit,
    _key_ranks,
    _lowest,
    as_batches,
    decode_rows,
    encode_rows,
    keep_lowest,
    keep_lowest_keys,
    key_priorities,
    key_salt,
    shard_parts,
    split_by_shard,
    unit_hash,
    with_priorities,
)

units_strategy = st.one_of(
    st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=12),
    st.lists(st.text(max_size=6), min_size=1, max_size=12),
)


def shuffled_parts(batches, shards, order_seed=0) -> dict[int, list[bytes]]:
    """The transform's first step by hand: each shard's encoded parts (shard_parts), in an order of
    ``order_seed``, as a runner's shuffle may hand them on."""
    by_shard: dict[int, list[bytes]] = {}
    for batch in batches:
        for shard, part in shard_parts(batch, "unit", shards):
            by_shard.setdefault(shard, []).append(part)
    rng = np.random.default_rng(order_seed)
    return {shard: [parts[i] for i in rng.permutation(len(parts))] for shard, parts in by_shard.items()}


def bound(batches, k, shards, seed=None, max_keys=None, order_seed=0):
    """The transform's steps by hand: shard parts, shuffled, then each shard's kept rows. With ``max_keys``
    (L), at most L values of the column "key" a unit, as the transform does it."""
    salt = None if max_keys is None else key_salt(seed)
    keep = KeepLowestPerUnit("unit", k, None if max_keys is None else "key", max_keys, salt, seed)
    tables = [keep(parts) for parts in shuffled_parts(batches, shards, order_seed).values()]
    return pa.concat_tables([t.drop_columns([PRIORITY, HASH]) for t in tables if t is not None])


@settings(max_examples=60, deadline=None)
@given(
    units=units_strategy,
    repeats=st.lists(st.integers(1, 40), min_size=1, max_size=12),
    k=st.integers(1, 5),
    shards=st.integers(1, 7),
    batch_rows=st.integers(1, 50),
)
def test_no_unit_contributes_more_than_k_rows(units, repeats, k, shards, batch_rows):
    rows = [u for u, r in zip(units, itertools.cycle(repeats), strict=False) for _ in range(r)]
    table = pa.table({"unit": rows, "row": np.arange(len(rows))})
    kept = bound(table.to_batches(max_chunksize=batch_rows), k, shards)
    per_unit = Counter(kept.column("unit").to_pylist())  # in its canonical form: text as its bytes
    before = Counter(canonical_identity(pa.array(rows)).to_pylist())
    assert all(per_unit[u] == min(k, n) for u, n in before.items())  # at most k, and no fewer than it could
    assert len(set(kept.column("row").to_pylist())) == kept.num_rows  # each kept row is a distinct input row


def test_unit_hash_is_stable_across_batches_and_types():
    a = pa.array(["ann", "", "bob", "ann", "ünïcode"])
    b = pa.array(["bob", "ann", "", "ünïcode"]).cast(pa.large_string())
    ha, hb = unit_hash(a), unit_hash(b)
    assert ha[0] == ha[3] == hb[1] and ha[2] == hb[0] and ha[1] == hb[2] and ha[4] == hb[3]
    assert len({*ha.tolist()}) == 4
    ints = unit_hash(pa.array([1, 2, 1], pa.int32()))
    assert ints[0] == ints[2] != ints[1] and ints[0] == unit_hash(pa.array([1]))[0]
    floats = unit_hash(pa.array([1.5, -0.0, 0.0, 1.5, 2.0]))
    assert floats[0] == floats[3] and floats[1] == floats[2] and len({*floats.tolist()}) == 3
    assert len({*unit_hash(pa.array(NANS)).tolist()}) == 1  # NaNs of any bits: one unit
    assert (unit_hash(pa.array([5], pa.int32())) == unit_hash(pa.array([5], pa.uint8()))).all()
    assert (unit_hash(pa.array(["ann"])) == unit_hash(pa.array([b"ann"]))).all()  # text is its bytes
    when = unit_hash(pa.array([0, 10**9, 0], pa.timestamp("s")))
    assert when[0] == when[2] != when[1]
    raw = unit_hash(pa.array([b"caf\xe9", b"cafe", b"caf\xe9"]))  # bytes are identities, whatever the encoding
    assert raw[0] == raw[2] != raw[1]


def test_a_text_units_hash_is_the_same_beside_values_of_like_lengths_and_beside_a_long_one():
    # Two ways to one hash: a byte position at a time where lengths are alike, prefix sums beside a long value.
    rng = np.random.default_rng(4)
    short = ["".join(rng.choice(list("abcdé€"), n)) for n in rng.integers(0, 12, 500)]
    alike = unit_hash(pa.array(short))
    beside_a_long_one = unit_hash(pa.array([*short, "x" * 20_000]))[:-1]
    one_by_one = np.concatenate([unit_hash(pa.array([value])) for value in short])
    assert (alike == beside_a_long_one).all() and (alike == one_by_one).all()
    assert len(set(alike.tolist())) == len(set(short))


NANS = np.frombuffer(np.array([0x7FF8000000000000, 0xFFF8000000000000, 0x7FF8000000000001], np.uint64).tobytes())


def test_one_unit_whatever_form_its_value_takes_keeps_k_rows():
    # -0.0 and 0.0 are one unit, and so are NaNs of any bits: they share a hash, and must share a group.
    units = [-0.0, 0.0] * 3 + [*NANS.view(np.float64)] * 2
    table = pa.table({"unit": pa.array(units, pa.float64()), "row": np.arange(len(units))})
    for shards in (1, 7):
        kept = bound(table.to_batches(max_chunksize=2), 2, shards, seed=shards)
        zeros = np.asarray(kept.column("unit")) == 0
        assert zeros.sum() == 2 and (~zeros).sum() == 2


def test_kept_rows_are_chosen_uniformly():
    table = pa.table({"unit": [7] * 4, "row": [0, 1, 2, 3]})
    pairs = [tuple(sorted(bound(table.to_batches(), 2, 1, seed).column("row").to_pylist())) for seed in range(3000)]
    assert_follows(pairs, {pair: 1 / 6 for pair in itertools.combinations(range(4), 2)})


def test_bound_contributions_on_beam():
    rng = np.random.default_rng(1)
    units = np.repeat(np.arange(50), rng.integers(1, 30, 50))
    table = pa.table({"unit": units.astype(np.int64), "item": rng.integers(0, 5, units.size)})

    def check(batches):
        counts = Counter(u for b in batches for u in b.column("unit").to_pylist())
        assert set(counts) == set(range(50)) and max(counts.values()) <= 3
        assert all(counts[u] == min(3, int((units == u).sum())) for u in counts)

    with beam.Pipeline() as pipeline:
        batches = pipeline | beam.Create(table.to_batches(max_chunksize=97))
        validated = batches | ValidateBatches([ColumnSpec("unit", "any"), ColumnSpec("item", "int")])
        assert_that(validated.good | BoundContributions("unit", 3, shards=4), check)


def test_the_unit_leaves_bounding_in_its_canonical_form():
    """What reads the unit after bounding (KeyCounts' distinct units) sees one value a unit: -0.0 as 0.0, every
    NaN as one, int32 as int64, text as its bytes."""
    nans = NANS.view(np.float64)
    for values, expected in [
        (pa.array([-0.0, 0.0, *nans]), {0.0: 2, "nan": 3}),
        (pa.array([5, 5, 6], pa.int32()), {5: 2, 6: 1}),
        (pa.array(["a", "a", "b"]), {b"a": 2, b"b": 1}),
    ]:
        (_, rows), *_ = split_by_shard(pa.record_batch({"unit": values}), "unit", 1)
        unit = rows.column("unit")
        assert unit.type in (pa.float64(), pa.int64(), pa.large_binary())
        assert Counter("nan" if v != v else v for v in unit.to_pylist()) == expected
        if pa.types.is_floating(unit.type):  # one NaN, bit for bit: a group-by tells NaN payloads apart
            assert len({*unit.to_numpy()[np.isnan(unit.to_numpy())].view(np.uint64).tolist()}) == 1


def test_a_graph_that_skips_validation_is_refused_when_built():
    pipeline = beam.Pipeline()
    batches = pipeline | beam.Create([pa.record_batch({"unit": [1, 2], "key": ["a", "b"]})])
    with pytest.raises(ValueError, match=r"'unit' was not validated.*ValidateBatches"):
        _ = batches | BoundContributions("unit", 3)
    validated = (batches | "Validate" >> ValidateBatches([ColumnSpec("unit", "any")])).good
    with pytest.raises(ValueError, match="'key' was not validated"):  # the key must be validated too
        _ = validated | "Keyed" >> BoundContributions("unit", 3, key_column="key", max_keys=1)
    mixed = (validated, batches) | beam.Flatten()  # one path validated, one not: refused
    with pytest.raises(ValueError, match="'unit' was not validated"):
        _ = mixed | "Mixed" >> BoundContributions("unit", 3)
    _ = validated | "Shaped" >> beam.Map(lambda batch: batch) | "Bound" >> BoundContributions("unit", 3)  # trusted
    reserved = (batches | "Reserved" >> ValidateBatches([ColumnSpec("unit", "any"), ColumnSpec(PRIORITY, "int")])).good
    with pytest.raises(ValueError, match="name of a column the library adds"):
        _ = reserved | "BoundReserved" >> BoundContributions("unit", 3)


# L0 bounding: at most L keys (values of "key") a unit, and K rows among theirs.

keyed_rows_strategy = st.lists(  # (unit, key) per row: few units and keys, so units share keys and shards
    st.tuples(st.integers(0, 5), st.one_of(st.integers(-3, 3), st.none())), min_size=1, max_size=80
)


def keyed_table(rows, first_row: int = 0) -> pa.Table:
    # "row" first: the seeded priorities hash a batch's first column, so no two batches share them.
    return pa.table({
        "row": np.arange(first_row, first_row + len(rows)),
        "unit": pa.array([u for u, _ in rows], pa.int64()),
        "key": pa.array([k for _, k in rows], pa.int64()),
    })  # fmt: skip


def check_l0_bound(kept: pa.Table, table: pa.Table, k: int, max_keys: int) -> None:
    """At most K rows and L keys a unit, distinct input rows; a unit within both bounds keeps every row,
    and any unit keeps at least min(K, L, its keys) rows (its L keys hold at least one row each)."""
    rows = kept.column("row").to_pylist()
    assert len(set(rows)) == len(rows) and set(rows) <= set(table.column("row").to_pylist())
    before, after = _units_keys(table), _units_keys(kept)
    assert set(after) == set(before)
    for unit, (n, keys) in before.items():
        kept_n, kept_keys = after[unit]
        assert kept_n <= k and len(kept_keys) <= max_keys and kept_keys <= keys
        assert kept_n >= min(k, max_keys, len(keys))
        if n <= k and len(keys) <= max_keys:
            assert kept_n == n


def _units_keys(table: pa.Table) -> dict:
    out: dict = {}
    for unit, key in zip(table.column("unit").to_pylist(), table.column("key").to_pylist(), strict=True):
        n, keys = out.get(unit, (0, set()))
        out[unit] = (n + 1, keys | {key})
    return out


@settings(max_examples=60, deadline=None)
@given(
    rows=keyed_rows_strategy,
    k=st.integers(1, 5),
    max_keys=st.integers(1, 4),
    shards=st.integers(1, 4),
    batch_rows=st.integers(1, 30),
    seed=st.integers(0, 2**32),
)
def test_no_unit_exceeds_k_rows_or_l_keys(rows, k, max_keys, shards, batch_rows, seed):
    table = keyed_table(rows)
    kept = bound(table.to_batches(max_chunksize=batch_rows), k, shards, seed, max_keys)
    check_l0_bound(kept, table, k, max_keys)


@settings(max_examples=4, deadline=None)
@given(rows=keyed_rows_strategy, k=st.integers(1, 4), max_keys=st.integers(1, 3), batch_rows=st.integers(1, 30))
def test_no_unit_exceeds_k_rows_or_l_keys_on_beam(rows, k, max_keys, batch_rows):
    table = keyed_table(rows)
    valid = table.filter(table.column("key").is_valid())  # validation rejects a null key

    def check(batches):
        check_l0_bound(pa.Table.from_batches(batches, table.schema), valid, k, max_keys)

    specs = [ColumnSpec("row", "int"), ColumnSpec("unit", "any"), ColumnSpec("key", "int")]
    with beam.Pipeline() as pipeline:
        kept = (
            pipeline | beam.Create(table.to_batches(max_chunksize=batch_rows)) | ValidateBatches(specs)
        ).good | BoundContributions("unit", k, shards=3, key_column="key", max_keys=max_keys)
        assert_that(kept, check)


def one_pass_reference(table: pa.Table, k: int, max_keys: int, salt: int) -> set:
    """The rule, row by row: each unit's L keys of lowest key priority (distinct keys of a unit have distinct
    priorities: the mixes are bijections), then its K lowest-priority rows among those keys' rows."""
    columns = table.to_pydict()
    key_priority_column = key_priorities(table.column("unit"), table.column("key"), salt).tolist()
    by_unit: dict = {}
    for unit, priority, key_priority, row in zip(
        columns["unit"], columns[PRIORITY], key_priority_column, columns["row"], strict=True
    ):
        by_unit.setdefault(unit, []).append((key_priority, priority, row))
    kept = set()
    for rows in by_unit.values():
        chosen = set(sorted({key_priority for key_priority, _, _ in rows})[:max_keys])  # distinct keys: no ties
        kept |= {row for _, row in sorted((p, row) for kp, p, row in rows if kp in chosen)[:k]}
    return kept


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 80),
    k=st.integers(1, 4),
    max_keys=st.integers(1, 3),
    pieces=st.integers(2, 8),
    order_seed=st.integers(0, 2**32),
)
def test_kept_rows_follow_the_rule_whatever_the_batches_parts_and_their_order(n, k, max_keys, pieces, order_seed):
    """Seeded, the rows kept are the one-pass rule's (each unit's L lowest keys, then its K lowest rows among
    theirs), however the rows are cut into batches and parts and in whatever order the parts arrive."""
    rng = np.random.default_rng(order_seed)
    rows = zip(rng.integers(0, 3, n).tolist(), rng.integers(0, 6, n).tolist(), strict=True)  # units of many keys
    whole = keyed_table(list(rows))
    keep = KeepLowestPerUnit("unit", k, "key", max_keys, key_salt(1), seed=1)
    every = KeepLowestPerUnit("unit", n, "key", n, key_salt(1), seed=1)(shuffled_parts(whole.to_batches(), 1)[0])
    assert every.num_rows == n  # every row, with the priority the seed gives it
    reference = one_pass_reference(every, k, max_keys, key_salt(1))
    one_pass = keep(shuffled_parts(whole.to_batches(), 1)[0])
    assert set(one_pass.column("row").to_pylist()) == reference

    shuffled = whole.take(pa.array(rng.permutation(whole.num_rows)))
    cuts = np.sort(rng.integers(0, whole.num_rows + 1, pieces - 1))
    pieces = [shuffled.slice(a, c - a) for a, c in zip([0, *cuts], [*cuts, whole.num_rows], strict=True)]
    batches = [batch for piece in pieces for batch in piece.to_batches()]
    parts = shuffled_parts(batches, 1, order_seed=order_seed).get(0, [])
    assert sorted(keep(parts).column("row").to_pylist()) == sorted(reference)


def reference_keep_lowest_keys(table: pa.Table, max_keys: int, max_rows: int, key_priority: list) -> set:
    """keep_lowest_keys spelled out, given each row's key priority: per unit, its keys by (key priority,
    key value, null last), the first L; per (unit, key), its rows by priority, the first K. The rows
    kept, by their "row"."""
    columns = table.to_pydict()
    pairs: dict = {}
    for unit, key, pair_priority, priority, row in zip(
        columns["unit"], columns["key"], key_priority, columns[PRIORITY], columns["row"], strict=True
    ):
        pairs.setdefault(unit, {}).setdefault(key, (pair_priority, []))[1].append((priority, row))
    kept = set()
    for keys in pairs.values():
        ranked = sorted(keys, key=lambda key: (keys[key][0], key is None, 0 if key is None else key))
        for key in ranked[:max_keys]:
            kept |= {row for _, row in sorted(keys[key][1])[:max_rows]}
    return kept


@pytest.mark.parametrize("seed", range(40))
def test_keep_lowest_keys_follows_the_rule_spelled_out(seed):
    """Many units sharing keys, null keys, text or numbers, units with more rows than K or keys than L."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    units = rng.integers(0, int(rng.integers(1, 30)), n)
    key_numbers = rng.integers(0, int(rng.integers(1, 12)), n)
    nulls = rng.random(n) < (0.2 if seed % 3 else 0.0)
    text = seed % 2 == 1
    keys = [None if null else (f"k{k}" if text else int(k) - 5) for k, null in zip(key_numbers, nulls, strict=True)]
    table = pa.table({
        "row": np.arange(n),
        "unit": pa.array([f"u{u}" for u in units] if seed % 5 == 2 else units),
        "key": pa.array(keys, pa.string() if text else pa.int64()),
        PRIORITY: pa.array(rng.permutation(n).astype(np.uint32) * np.uint32(7919)),  # distinct: one right answer
    })  # fmt: skip
    salt = key_salt(seed)
    key_priority = key_priorities(table.column("unit").combine_chunks(), table.column("key").combine_chunks(), salt)
    for max_keys, max_rows in [(1, 1), (2, 3), (3, 1), (1, 5), (4, 4)]:
        kept = keep_lowest_keys(table, "unit", "key", max_keys, max_rows, salt)
        rows = kept.column("row").to_pylist()
        assert len(rows) == len(set(rows))
        assert set(rows) == reference_keep_lowest_keys(table, max_keys, max_rows, key_priority.tolist())
        assert kept.schema == table.schema


@pytest.mark.parametrize("seed", range(20))
def test_keys_of_equal_priority_rank_by_value(seed):
    """Key priorities that tie in full (the key's value decides, null last), in their top bits only
    (the packed sort's fallback), or not at all; units of at most L keys rank all theirs first."""
    rng = np.random.default_rng(seed)
    dictionary = pa.array([None, *(f"k{i}" for i in rng.permutation(12))])  # as dictionary_encode leaves it
    unit, key = [], []
    for u in range(int(rng.integers(1, 40))):
        mine = rng.choice(len(dictionary), int(rng.integers(1, 8)), replace=False)
        unit += [u] * mine.size
        key += mine.tolist()
    choices = np.array([0, 1, 1 << 40, (1 << 40) + 1, (1 << 63) + 7, 2**64 - 1], np.uint64)
    priority = rng.choice(choices, len(unit)) if seed % 4 else rng.integers(0, 2**64, len(unit), dtype=np.uint64)
    max_keys = int(rng.integers(1, 5))
    ranks = _key_ranks(np.array(unit, np.uint64), priority, np.array(key), dictionary, max_keys)
    values = dictionary.to_pylist()
    for u in set(unit):
        mine = [i for i, v in enumerate(unit) if v == u]
        order = sorted(mine, key=lambda i: (int(priority[i]), values[key[i]] is None, values[key[i]] or ""))
        expected = [order.index(i) for i in mine] if len(mine) > max_keys else [0] * len(mine)
        assert ranks[mine].tolist() == expected


def test_the_sorting_order_is_a_stable_argsort_whatever_the_values():
    rng = np.random.default_rng(0)
    for high in (4, 1 << 40, 2**64 - 1):  # packed with the row number, then too wide to pack
        values = rng.integers(0, high, 1000, dtype=np.uint64, endpoint=True)
        assert np.array_equal(stable_order(values), np.argsort(values, kind="stable"))


@pytest.mark.parametrize(
    "column",
    [
        pa.array([5, -3, 2**32 - 4], pa.int64()),  # spans under 2^32: crosses narrowed
        pa.array([-(2**63), -(2**63) + 5, 2**63 - 1], pa.int64()),  # spans all 64 bits
        pa.array([-(2**63), -(2**63) + 5, -(2**63) + 1], pa.int64()),  # narrowed, at the least int64
        pa.array([1, None, 3], pa.int64()),
        pa.array(["a", "", "b"], pa.large_binary()),
        pa.array([0.5, -0.0, 1e300]),
    ],
)
def test_parts_cross_the_shuffle_as_bytes_and_decode_as_they_were(column):
    table = pa.table({"unit": column, "row": pa.array([0, 1, 2], pa.uint16())}).replace_schema_metadata({"a": "b"})
    encoded = encode_rows(table)
    assert isinstance(encoded, bytes) and decode_rows(encoded).equals(table, check_metadata=True)


def test_a_part_decodes_with_its_fields_as_they_were_whatever_metadata_it_came_with():
    """Review of issue 36: the narrowing's marker is the encoder's alone (a column that came with it is not
    shifted, a unit not split in two), and a narrowed column comes back nullable or not as it was, so parts
    narrowed and not concatenate."""
    marker = {b"beam_expmech.narrowed": b"1", b"PARQUET:field_id": b"3"}
    wide = pa.array([1 << 40, 42, 42], pa.int64())  # spans over 2^32: not narrowed
    for column in (wide, pa.array([42, 43, 42], pa.int64()), pa.array([1.5, 2.5, 3.5])):
        field = pa.field("unit", column.type, nullable=False, metadata=marker)
        table = pa.table([column], schema=pa.schema([field]))
        decoded = decode_rows(encode_rows(table))
        assert decoded.column("unit").equals(table.column("unit"))
        assert not decoded.schema.field("unit").nullable
        assert decoded.schema.field("unit").metadata == {b"PARQUET:field_id": b"3"}
    narrow = pa.table([pa.array([42, 43], pa.int64())], schema=pa.schema([pa.field("unit", pa.int64(), False)]))
    both = [decode_rows(encode_rows(t)) for t in (narrow, pa.table([wide], schema=narrow.schema))]
    assert pa.concat_tables(both).column("unit").to_pylist() == [42, 43, 1 << 40, 42, 42]


def test_seeded_text_units_of_one_hash_choose_by_their_own_rows(monkeypatch):
    """With a test seed, a unit's rows depend on its own rows alone, though another unit shares its hash."""
    monkeypatch.setattr(bounding, "unit_hash", lambda units: np.zeros(len(units), np.uint64))
    chosen = set()
    for others in range(4):
        table = pa.table({"unit": ["a"] * 6 + ["0"] * others, "row": range(6 + others)})
        kept = KeepLowestPerUnit("unit", 2, seed=1)([encode_rows(table)])
        chosen.add(
            tuple(sorted(r for u, r in zip(kept["unit"].to_pylist(), kept["row"].to_pylist(), strict=True) if u == "a"))
        )
    assert len(chosen) == 1


def test_a_unit_number_crosses_the_shuffle_in_about_half_its_width():
    units = np.random.default_rng(0).integers(0, 20_000_000, 100_000)
    assert len(encode_rows(pa.table({"unit": units}))) < units.nbytes * 0.6


def test_kept_keys_are_chosen_uniformly():
    table = pa.table({"unit": [7] * 8, "key": [0, 1, 2, 3] * 2, "row": range(8)})
    chosen = []
    for seed in range(2000):
        kept = bound(table.to_batches(), 8, 1, seed, max_keys=2)
        assert kept.num_rows == 4  # every row of the two keys kept
        chosen.append(tuple(sorted(set(kept.column("key").to_pylist()))))
    assert_follows(chosen, {pair: 1 / 6 for pair in itertools.combinations(range(4), 2)})


@settings(max_examples=30, deadline=None)
@given(others=keyed_rows_strategy, seed=st.integers(0, 2**32), shards=st.integers(1, 4))
def test_other_units_do_not_change_a_units_choice(others, seed, shards):
    """Unit 9's keys depend on its rows and the salt alone; its rows too, when its batches are unchanged
    (the seeded row priorities hash each batch's content)."""
    alone = keyed_table([(9, key) for key in (0, 1, 2, 3, 4) for _ in range(3)])
    batches = alone.to_batches(max_chunksize=4)
    other_batches = keyed_table(others, first_row=100).to_batches(max_chunksize=7)

    def unit_9(kept):
        mine = np.asarray(kept.column("unit")) == 9
        return sorted(kept.column("row").filter(pa.array(mine)).to_pylist()), set(
            kept.column("key").filter(pa.array(mine)).to_pylist()
        )

    rows, keys = unit_9(bound(batches, 4, shards, seed, max_keys=2))
    assert unit_9(bound(other_batches + batches, 4, shards, seed, max_keys=2)) == (rows, keys)
    mixed = pa.concat_tables([keyed_table(others, first_row=100), alone]).to_batches(max_chunksize=5)
    assert unit_9(bound(mixed, 4, shards, seed, max_keys=2))[1] == keys


@pytest.mark.parametrize(
    "arguments",
    [
        {"key_column": "key"},
        {"max_keys": 2},
        {"key_column": "key", "max_keys": 0},
        {"key_column": "key", "max_keys": -1},
        {"key_column": "key", "max_keys": 1.5},
        {"key_column": "key", "max_keys": True},
        {"key_column": 3, "max_keys": 2},
    ],
)
def test_bad_key_bounds_are_refused(arguments):
    with pytest.raises(ValueError, match=r"key_column|max_keys"):
        BoundContributions("unit", 3, **arguments)


def test_a_units_kept_rows_never_straddle_two_batches(monkeypatch):
    """KeyCounts counts distinct units per batch and adds them up: a unit split over two batches would count twice."""
    monkeypatch.setattr(readers, "BATCH_ROWS", 7)
    rng = np.random.default_rng(0)
    units = np.repeat(np.arange(40), rng.integers(1, 4, 40))
    table = pa.table({"unit": units, "x": np.arange(units.size), PRIORITY: np.zeros(units.size, np.uint32)})
    out = list(as_batches(keep_lowest(table, "unit", 3)))
    seen = [set(batch.column("unit").to_pylist()) for batch in out]
    assert sum(len(s) for s in seen) == len(set().union(*seen)) == 40  # each unit in exactly one batch
    assert sum(batch.num_rows for batch in out) == units.size and max(b.num_rows for b in out) <= 7 + 2
    assert len(out) > 5 and PRIORITY not in out[0].schema.names and HASH not in out[0].schema.names


def thue_morse_pair(length: int = 1024) -> tuple[str, str]:
    """Two texts of one length whose polynomial hashes modulo 2^64 are equal (for any odd base)."""
    bits = [0]
    while len(bits) < length:
        bits += [1 - b for b in bits]
    return "".join("ab"[b] for b in bits[:length]), "".join("ba"[b] for b in bits[:length])


@pytest.mark.parametrize("shards", [1, 3])
def test_text_units_of_one_hash_are_still_two_units(shards):
    first, second = thue_morse_pair()
    assert unit_hash(pa.array([first]))[0] == unit_hash(pa.array([second]))[0]
    units = [first, second, "other"] * 5
    table = pa.table({"unit": units, "row": np.arange(len(units))})
    for seed in range(5):
        kept = bound(table.to_batches(max_chunksize=4), 2, shards, seed)
        assert Counter(kept.column("unit").to_pylist()) == {first.encode(): 2, second.encode(): 2, b"other": 2}
    kept = keep_lowest(pa.Table.from_batches([with_priorities(table.to_batches()[0], 1)]), "unit", 3)
    assert Counter(kept.column("unit").to_pylist()) == {first: 3, second: 3, "other": 3}


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3)), min_size=1, max_size=60),
    k=st.integers(1, 4),
    base=st.sampled_from([0, 2**40, 2**64 - 16]),
)
def test_lowest_keeps_what_a_lexsort_keeps(rows, k, base):
    """Units whose hashes differ in low bits only (which the fast path's first sort does not see) and
    priorities that tie: each unit's k lowest (priority, position), as a lexsort ranks them."""
    hashes = np.array([base + unit for unit, _ in rows], np.uint64)
    priorities = np.array([p for _, p in rows], np.uint32)
    order = np.lexsort((np.arange(len(rows)), priorities, hashes))
    rank = Counter()
    expected = set()
    for position in order:
        rank[hashes[position]] += 1
        if rank[hashes[position]] <= k:
            expected.add(int(position))
    kept = _lowest(hashes, priorities, k)
    assert sorted(kept.tolist()) == sorted(expected)
    assert np.all(np.diff(hashes[kept].astype(np.float64)) >= 0) or base == 0  # in the order of the hash


def lexsort_lowest(hashes: np.ndarray, priorities: np.ndarray, k: int) -> set[int]:
    """Each unit's k lowest (priority, position): the rule, by a lexsort and a count."""
    rank, kept = Counter(), set()
    for position in np.lexsort((np.arange(hashes.size), priorities, hashes)):
        rank[hashes[position]] += 1
        if rank[hashes[position]] <= k:
            kept.add(int(position))
    return kept


@pytest.mark.parametrize("seed", range(20))
def test_lowest_tells_apart_units_a_bit_apart_among_hashes_far_apart(seed):
    """_lowest's sort word holds the hash's high bits only when hashes spread far: units one bit apart
    then share their word, and priorities that share their top bits at a threshold too."""
    rng = np.random.default_rng(seed)
    far = rng.integers(0, 2**63, 40, dtype=np.uint64) * np.uint64(2)  # even hashes over 64 bits
    units = np.concatenate([far, far[:10] + np.uint64(1)])  # and 10 neighbours one bit away
    hashes = units[rng.integers(0, units.size, 2_000)]
    priorities = rng.integers(0, 2**32, hashes.size, dtype=np.uint64).astype(np.uint32)
    if seed % 2:  # priorities at the thresholds apart in their low bits only
        priorities = (priorities & np.uint32(0xFFFFFF00)) | rng.integers(0, 4, hashes.size).astype(np.uint32)
        priorities = np.where(rng.random(hashes.size) < 0.5, priorities & np.uint32(0xFF0000FF), priorities)
    kept = _lowest(hashes, priorities, 3)
    assert set(kept.tolist()) == lexsort_lowest(hashes, priorities, 3)
    assert np.all(np.diff(hashes[kept].astype(np.float64)) >= 0)  # in the order of the hash


def test_lowest_ranks_priorities_of_other_widths_exactly():
    """Priorities beyond 32 bits would spill into the sort word's hash bits (review 6, finding 2)."""
    hashes = np.full(4, 5, np.uint64)
    for priorities in ([2**32, 0, 2**32 + 5 * 4096, 4096], [-1, 0, -20480, 4096]):
        priorities = np.array(priorities, np.int64)
        assert _lowest(hashes, priorities, 1).tolist() == [int(np.argmin(priorities))]


def test_lowest_ranks_priorities_that_share_their_top_bits_by_all_their_bits():
    """Two rows of a unit whose priorities differ below the sort word's top bits, at the threshold."""
    hashes = np.full(4, 7, np.uint64)
    for low, high in ((0x100, 0x1FF), (0x1FF, 0x100)):
        priorities = np.array([5 << 24, high, low, 9 << 24], np.uint32)
        assert _lowest(hashes, priorities, 1).tolist() == [2 if low < high else 1]
        assert sorted(_lowest(hashes, priorities, 2).tolist()) == [1, 2]


@pytest.mark.parametrize("shards", [1, 3])
def test_text_units_of_one_hash_stay_two_units_where_the_unit_column_is_dropped(shards):
    """The pipelines' path (keep_unit=False): a text unit column stays until the kept rows are cut into batches."""
    first, second = thue_morse_pair()
    units = [first, second, "other"] * 5
    table = pa.table({"unit": units, "row": np.arange(len(units))})
    keep = KeepLowestPerUnit("unit", 2)
    out = [b for parts in shuffled_parts(table.to_batches(max_chunksize=4), shards).values()
           for b in as_batches(keep(parts), ["unit"])]  # fmt: skip
    assert all(b.schema.names == ["row"] for b in out)
    assert Counter(units[r] for b in out for r in b.column("row").to_pylist()) == {first: 2, second: 2, "other": 2}


def test_tied_priorities_are_ranked_exactly_where_hashes_differ_in_their_high_bits():
    """The fast path (units apart in the hash's high bits), with priorities that tie at the threshold."""
    rng = np.random.default_rng(5)
    for _ in range(200):
        units = rng.integers(0, 4, 30)
        hashes = (units.astype(np.uint64) << np.uint64(60)) | np.uint64(12345)
        kept = _lowest(hashes, rng.integers(0, 3, 30).astype(np.uint32), 2)
        assert Counter(hashes[kept].tolist()) == {h: min(2, c) for h, c in Counter(hashes.tolist()).items()}


@pytest.mark.parametrize("kind", [pa.int64(), pa.string()])
def test_a_null_unit_is_refused_not_hashed(kind):
    """One null would turn an integer column to floats on its way to numpy, and two units to one hash."""
    batch = pa.record_batch({"unit": pa.array([2**53 + 1, None] if kind == pa.int64() else ["a", None], kind)})
    with pytest.raises(ValueError, match="without nulls"):
        list(split_by_shard(batch, "unit", 2))
