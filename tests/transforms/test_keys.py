"""Keys found in the data on Beam: per-key totals across shards, the top keys, partition selection."""

from __future__ import annotations

from collections import Counter

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.testing.util import assert_that, equal_to

from beam_expmech.accounting import Release
from beam_expmech.io.validation import ColumnSpec
from beam_expmech.transforms import BoundContributions, ValidateBatches
from beam_expmech.transforms.keys import (
    KEY,
    MECHANISMS,
    ROWS,
    UNITS,
    KeyCounts,
    PrivateKeys,
    PrivateTopKeys,
    batch_key_counts,
    shard_key_totals,
)


def batches(rows: int = 3_000, seed: int = 0) -> list[pa.RecordBatch]:
    """Zipf-like queries of 400 users, every user's rows in one batch (as BoundContributions leaves them)."""
    rng = np.random.default_rng(seed)
    users = np.sort(rng.integers(0, 400, rows))
    zipf = 1 / np.arange(1, 51) ** 1.6
    queries = rng.choice(np.arange(1, 51), rows, p=zipf / zipf.sum())
    cuts = np.searchsorted(users, [100, 200, 300])
    return [pa.record_batch({"user": part_u, "query": [f"q{q}" for q in part_q]})
            for part_u, part_q in zip(np.split(users, cuts), np.split(queries, cuts), strict=True)]  # fmt: skip


K, L = 30, 50  # above any user's rows and keys in ``batches``: the bounding keeps every row


def validated(pipeline: beam.Pipeline, parts: list[pa.RecordBatch], unit: str = "user", key: str = "query"):
    """The batches validated (KeyCounts refuses, when built, a graph that skips validation)."""
    specs = [ColumnSpec(unit, "any"), ColumnSpec(key, "string")]
    return (pipeline | beam.Create(parts) | ValidateBatches(specs)).good


def bounded(pipeline: beam.Pipeline, parts: list[pa.RecordBatch], unit: str = "user", key: str = "query"):
    """The batches as KeyCounts takes them to count units: validated, then bounded (K rows over L keys a unit)."""
    return validated(pipeline, parts, unit, key) | BoundContributions(unit, K, key_column=key, max_keys=L, seed=3)


def totals(parts) -> dict[str, tuple[int, int]]:
    rows, units = Counter(), {}
    for batch in parts:
        for user, query in zip(batch.column("user").to_pylist(), batch.column("query").to_pylist(), strict=True):
            rows[query] += 1
            units.setdefault(query, set()).add(user)
    return {q: (rows[q], len(units[q])) for q in rows}


def test_a_batchs_totals_cross_the_shuffle_as_bytes_smaller_than_their_data_and_sum_to_each_keys():
    # Pickled tables crossed the DirectRunner's shuffle decoded, and were held so: 10^8 distinct keys ran it
    # past 5 GB. Parts are bytes now, each shard's totals summed from them in one group-by.
    rows, part, shards = 300_000, 30_000, 4
    parts: dict[int, list[bytes]] = {}
    for start in range(0, rows, part):
        keys = [f"k{i % 200_000}" for i in range(start, start + part)]  # keys from 200,000 on held by two units
        units = np.arange(start, start + part) // 7
        batch = pa.record_batch({"query": keys, "user": units})
        for shard, data in batch_key_counts(batch, "query", "user", shards):
            assert isinstance(data, bytes)
            parts.setdefault(shard, []).append(data)
    found, decoded = {}, 0
    for shard, encoded in parts.items():
        same, table = shard_key_totals(shard, encoded)
        assert same == shard and table.column(KEY).num_chunks == 1
        counts = zip(table[ROWS].to_pylist(), table[UNITS].to_pylist(), strict=True)
        found.update(zip(table[KEY].to_pylist(), counts, strict=True))
        decoded += table.nbytes
    assert len(found) == 200_000 and set(found.values()) == {(1, 1), (2, 2)}
    assert sum(1 for v in found.values() if v == (2, 2)) == 100_000
    assert sum(len(data) for shard in parts.values() for data in shard) < decoded


def test_a_shard_holds_its_distinct_keys_not_every_batchs_part_of_them():
    # Keys found in every batch (a Zipf head) were held once a batch: memory grew with the input, not the keys.
    keys = pa.record_batch({"query": [f"q{i}" for i in range(2_000)], "user": np.arange(2_000)})
    (_, part), *_ = batch_key_counts(keys, "query", "user", 1)
    decoded = shard_key_totals(0, [part])[1].nbytes
    peak = [0]

    def parts(copies: int):
        for _ in range(copies):
            peak[0] = max(peak[0], pa.total_allocated_bytes())
            yield part

    before = pa.total_allocated_bytes()
    _, table = shard_key_totals(0, parts(500))
    assert table.num_rows == 2_000 and set(table[ROWS].to_pylist()) == set(table[UNITS].to_pylist()) == {500}
    assert peak[0] - before < 60 * decoded  # summed as they come: 23 times; 500 parts held decoded: 173 times


@pytest.mark.parametrize("shards", [1, 7])
def test_key_counts_are_each_keys_rows_and_distinct_units_whatever_the_shards(shards):
    parts = batches()
    with beam.Pipeline() as pipeline:
        counted = (
            bounded(pipeline, parts)
            | KeyCounts("query", unit_column="user", shards=shards)
            | beam.FlatMapTuple(
                lambda _, t: zip(t[KEY].to_pylist(), t[ROWS].to_pylist(), t[UNITS].to_pylist(), strict=True)
            )
        )
        assert_that(counted, equal_to([(q, r, u) for q, (r, u) in totals(parts).items()]))


def test_without_a_unit_column_each_row_is_a_unit():
    parts = batches()
    with beam.Pipeline() as pipeline:
        counted = (
            validated(pipeline, parts)
            | KeyCounts("query", shards=3)
            | beam.FlatMapTuple(lambda _, t: zip(t[ROWS].to_pylist(), t[UNITS].to_pylist(), strict=True))
        )
        assert_that(counted, equal_to([(r, r) for r, _ in totals(parts).values()]))


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_top_keys_on_beam_find_keys_that_stand_far_apart_best_first(mechanism):
    parts, truth = batches(), totals(batches())
    ranked = sorted(truth, key=lambda q: -truth[q][0])
    assert [truth[q][0] for q in ranked[:4]] == sorted([truth[q][0] for q in ranked[:4]], reverse=True)
    step = PrivateTopKeys(epsilon=2_000.0, delta=1e-6, k=3, max_rows=K, max_keys=L, mechanism=mechanism, seed=5)
    with beam.Pipeline() as pipeline:
        chosen = bounded(pipeline, parts) | KeyCounts("query", unit_column="user", shards=4) | step
        assert_that(chosen, equal_to([ranked[:3]]))  # q1, q2, q3: hundreds of rows apart at epsilon / K = 2


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_top_keys_on_beam_are_the_one_process_draw_under_a_test_seed(mechanism):
    parts = batches()
    step = PrivateTopKeys(epsilon=300.0, delta=1e-3, k=4, max_rows=K, max_keys=L, mechanism=mechanism, seed=11)
    shards: dict[int, list] = {}
    for batch in parts:
        for shard, data in batch_key_counts(batch, "query", "user", 4):
            shards.setdefault(shard, []).append(data)
    expected = step.release([shard_key_totals(shard, encoded) for shard, encoded in shards.items()])
    with beam.Pipeline() as pipeline:
        chosen = bounded(pipeline, parts) | KeyCounts("query", unit_column="user", shards=4) | step
        assert_that(chosen, equal_to([expected]))


def test_few_keys_that_stand_out_release_fewer_than_k():
    flat = [pa.record_batch({"user": np.arange(300), "query": [f"q{u}" for u in range(300)]})]  # each key once
    for mechanism in MECHANISMS:
        step = PrivateTopKeys(epsilon=1.0, delta=1e-6, k=5, max_rows=1, max_keys=1, mechanism=mechanism)
        with beam.Pipeline() as pipeline:
            keyed = validated(pipeline, flat) | BoundContributions("user", 1, key_column="query", max_keys=1)
            chosen = keyed | KeyCounts("query", unit_column="user") | step
            assert_that(chosen, equal_to([[]]))  # a key of one unit: released with probability ~1e-6


@pytest.mark.parametrize(("unit", "key"), [("user", "count_all"), ("user", "user_count_distinct"), ("units", "key")])
def test_no_column_name_collides_with_the_group_bys_own(unit, key):
    """pyarrow names a group-by's outputs count_all and COLUMN_count_distinct: a user column of such a name once
    failed the job after its charge (issue 34)."""
    parts = [pa.record_batch({unit: [1, 1, 2], key: ["a", "b", "a"]})]
    with beam.Pipeline() as pipeline:
        counted = (
            bounded(pipeline, parts, unit, key)
            | KeyCounts(key, unit_column=unit, shards=2)
            | beam.FlatMapTuple(
                lambda _, t: zip(t[KEY].to_pylist(), t[ROWS].to_pylist(), t[UNITS].to_pylist(), strict=True)
            )
        )
        assert_that(counted, equal_to([("a", 2, 2), ("b", 1, 1)]))


def test_key_counts_refuse_unvalidated_or_non_text_keys_when_built():
    pipeline = beam.Pipeline()
    parts = pipeline | beam.Create(batches())
    with pytest.raises(ValueError, match="'query' was not validated"):
        _ = parts | KeyCounts("query", unit_column="user")
    numbers = (parts | "Numbers" >> ValidateBatches([ColumnSpec("user", "any"), ColumnSpec("query", "any")])).good
    with pytest.raises(ValueError, match="kind 'string'"):  # bounding ranks keys by their bytes: keys are text
        _ = numbers | "Count" >> KeyCounts("query", unit_column="user")


def test_null_keys_are_refused_they_belong_in_the_dead_letter():
    with pytest.raises(ValueError, match="without nulls"):
        list(batch_key_counts(pa.record_batch({"user": [1, 2], "query": ["a", None]}), "query", "user", 2))


def test_the_accuracy_note_states_the_rule_and_the_second_stages_noise():
    few, many = (PrivateTopKeys(epsilon=1.0, delta=1e-6, k=3, max_rows=10, max_keys=L) for L in (1, 10))
    assert few.accuracy()["partition_selection"] == "optimal rule, per key"
    assert many.accuracy()["partition_selection"] == "gaussian thresholding"
    assert few.accuracy()["rows_noise_scale"] == 10 / 0.5  # K / (epsilon - the keys' share)
    halves = [few.accuracy()["units_for_a_key_to_be_released"][f"with_probability_{p}"] for p in ("0.5", "0.95")]
    assert halves == [few.keys.rule.units_needed(0.5), few.keys.rule.units_needed(0.95)] and halves[0] < halves[1]


def test_partition_selection_on_beam_keeps_the_keys_many_units_hold():
    parts = batches()
    step = PrivateKeys(epsilon=1.0, delta=1e-6, max_keys=L)
    truth = totals(parts)
    with beam.Pipeline() as pipeline:
        kept = (
            bounded(pipeline, parts)
            | KeyCounts("query", unit_column="user", shards=4)
            | step
            | beam.FlatMapTuple(lambda _, t: t[KEY].to_pylist())
            | beam.combiners.ToList()
        )

        def check(out):
            (keys,) = out
            assert {q for q, (_, u) in truth.items() if u >= step.rule.always} <= set(keys)
            assert not {q for q, (_, u) in truth.items() if u < step.rule.units_needed(0.5) // 2} & set(keys)

        assert_that(kept, check)


def test_costs_and_bad_arguments():
    assert PrivateTopKeys(epsilon=1.0, delta=1e-6, k=3, max_rows=5, max_keys=3, label="top").cost == (
        Release.approximate(1.0, 1e-6, "top")
    )
    assert PrivateKeys(epsilon=0.5, delta=1e-7, max_keys=2).cost == Release.approximate(0.5, 1e-7, "keys")
    good = {"epsilon": 1.0, "delta": 1e-6, "k": 3, "max_rows": 5, "max_keys": 3}
    bad_arguments = [({"delta": 0}, "delta"), ({"k": 0}, "k"), ({"kbar": 2}, "kbar"), ({"mechanism": "x"}, "mechanism"),
                     ({"keys_share": 1.0}, "keys_share"), ({"max_keys": 0}, "max_keys"),
                     ({"seed": 1.5}, "seed")]  # fmt: skip
    for bad, named in bad_arguments:
        with pytest.raises(ValueError, match=named):
            PrivateTopKeys(**(good | bad))
