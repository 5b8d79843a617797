"""Contribution bounding: no unit above K rows, whatever the input; the choice is uniform."""

from __future__ import annotations

import itertools
from collections import Counter

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.testing.util import assert_that
from hypothesis import given, settings
from hypothesis import strategies as st
from sampling import assert_follows

from beam_expmech.transforms.bounding import (
    PRIORITY,
    BoundContributions,
    KeepLowestPerUnit,
    split_by_shard,
    unit_hash,
    with_priorities,
)

units_strategy = st.one_of(
    st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=12),
    st.lists(st.text(max_size=6), min_size=1, max_size=12),
)


def bound(batches, k, shards, seed=None):
    """The transform's steps by hand: priorities, shards, then two partial combines merged."""
    combine = KeepLowestPerUnit("unit", k)
    accumulators = {}
    for i, batch in enumerate(batches):
        for shard, part in split_by_shard(with_priorities(batch, seed), "unit", shards):
            pair = accumulators.setdefault(shard, [combine.create_accumulator(), combine.create_accumulator()])
            pair[i % 2] = combine.add_input(pair[i % 2], part)
    tables = [combine.extract_output(combine.merge_accumulators(pair)) for pair in accumulators.values()]
    return pa.concat_tables([t.drop_columns([PRIORITY]) for t in tables if t is not None])


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
    per_unit = Counter(kept.column("unit").to_pylist())
    before = Counter(rows)
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
        kept = pipeline | beam.Create(table.to_batches(max_chunksize=97)) | BoundContributions("unit", 3, shards=4)
        assert_that(kept, check)
