"""RowsToBatches: rows of a PCollection (dicts, beam.Row, NamedTuples) into the library, on the DirectRunner.

The rows path must release what the file path releases from the same data and send bad rows to the dead
letter with reasons that quote no value (each unit's count, on both paths, is audited in
tests/audit/test_audit_rows.py).
"""

from __future__ import annotations

import json
import logging
import typing
from decimal import Decimal
from pathlib import Path

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.typehints import typehints

from beam_expmech.io.validation import REASON, ColumnSpec, MalformedRows, validate
from beam_expmech.predicates import CategoryCounts
from beam_expmech.transforms import (
    BoundContributions,
    GatherCounts,
    PredicateCounts,
    PrivateSelect,
    ReadRecordBatches,
    RowsToBatches,
    ValidateBatches,
    WriteDeadLetter,
)
from beam_expmech.transforms.rows import rows_as_batches

K = 2
ITEMS = 20
SPECS = [ColumnSpec("item", "int"), ColumnSpec("user", "any")]
SECRET = "SECRET-7f3a"
ABSENT = object()  # a field a row lacks


def purchases_by_unit(units: int = 300, seed: int = 0) -> list[dict]:
    """Rows whose units each buy one item, 1 to 5 times: the counts after bounding, min(K, rows) per unit,
    do not depend on which rows bounding keeps, so both paths must give equal counts under one seed."""
    rng = np.random.default_rng(seed)
    item = np.minimum(rng.zipf(1.5, units) - 1, ITEMS - 1)
    times = rng.integers(1, 6, units)
    rows = [
        {"user": int(u), "item": int(item[u]), "amount": float(u) / 4} for u in range(units) for _ in range(times[u])
    ]
    return [rows[i] for i in rng.permutation(len(rows))]


def release(batches, out: str):
    """Bound, count and select from ``batches``; write the counts and the selection to ``out``."""
    counts = (
        batches
        | BoundContributions("user", K, shards=4, seed=5)
        | PredicateCounts(CategoryCounts("item", range(ITEMS)), shard_size=8)
    )
    selected = counts | PrivateSelect(epsilon=1.0, sensitivity=K, num_candidates=ITEMS, k=3, shard_size=8, seed=11)
    _ = (
        (
            counts | GatherCounts() | "Counts" >> beam.Map(lambda c: ("counts", c.tolist())),
            selected | "Selected" >> beam.Map(lambda s: ("selected", s)),
        )
        | beam.Flatten()
        | beam.combiners.ToDict()
        | beam.Map(lambda result: Path(out).write_text(json.dumps(result)))
    )


def read(path) -> dict:
    return json.loads(Path(path).read_text())


class Purchase(typing.NamedTuple):
    user: int
    item: int
    amount: float


@pytest.mark.parametrize("form", ["dict", "beam.Row", "NamedTuple"])
def test_rows_give_the_release_the_parquet_file_gives_under_a_test_seed(tmp_path, form):
    rows = purchases_by_unit()
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "data.parquet", row_group_size=500)
    with beam.Pipeline() as pipeline:
        files = pipeline | ReadRecordBatches([str(tmp_path / "data.parquet")], None, ["item", "user"])
        release((files | ValidateBatches(SPECS)).good, str(tmp_path / "files.json"))
    elements = {"dict": rows, "beam.Row": [beam.Row(**r) for r in rows], "NamedTuple": [Purchase(**r) for r in rows]}
    with beam.Pipeline() as pipeline:
        checked = (
            pipeline
            | beam.Create(elements[form])
            | RowsToBatches(schema=SPECS, batch_size=300, identity_types={"user": int})
        )
        release(checked.good, str(tmp_path / "rows.json"))
    from_files, from_rows = read(tmp_path / "files.json"), read(tmp_path / "rows.json")
    expected = np.zeros(ITEMS, int)
    for unit in {r["user"]: r for r in rows}.values():
        expected[unit["item"]] += min(K, sum(r["user"] == unit["user"] for r in rows))
    assert from_files["counts"] == expected.tolist()  # the bounding bites: fewer than the rows
    assert sum(expected) < len(rows)
    assert from_rows == from_files


def test_bad_rows_go_to_the_dead_letter_with_reasons_that_quote_no_value(tmp_path, caplog):
    specs = [ColumnSpec("item", "int", domain=(0, 10)), ColumnSpec("user", "any"),
             ColumnSpec("amount", "float"), ColumnSpec("colour", "label", labels=("red", "blue")),
             ColumnSpec("note", "string")]  # fmt: skip
    good = {"item": 3, "user": 1, "amount": 2.5, "colour": "red", "note": "ok"}
    bad = {  # the reason each bad row must get
        "item: not an integer": {"item": SECRET},
        "item: outside the domain [0, 10)": {"item": 12},
        "item: out of the 64-bit range": {"item": 2**70 + 7},
        "item: null": {"item": None},
        "item: missing": {"item": ABSENT},
        "item: not None, a bool, an int, a float, a str or bytes": {"item": {SECRET: 1}},
        "user: not None, a bool, an int, a float, a str or bytes": {"user": Decimal("12345")},
        "user: not of the declared identity type int": {"user": SECRET},
        "amount: NaN or infinite": {"amount": float("nan")},
        "amount: not a number": {"amount": SECRET},
        "colour: not one of the domain's 2 labels": {"colour": SECRET},
        "note: not UTF-8 text": {"note": SECRET.encode() + b"\xff"},
    }  # fmt: skip
    rows = [dict(good)] * 5 + [
        {k: v for k, v in {**good, **change}.items() if v is not ABSENT} for change in bad.values()
    ]
    rows.append(None)  # no row at all
    dead_letter = tmp_path / "dead.csv"
    caplog.set_level(logging.DEBUG)
    pipeline = beam.Pipeline()
    checked = pipeline | beam.Create(rows) | RowsToBatches(schema=specs, batch_size=8, identity_types={"user": int})
    _ = checked.dead | WriteDeadLetter(str(dead_letter), [s.name for s in specs])
    _ = (
        checked.good
        | PredicateCounts(CategoryCounts("item", range(10)))
        | PrivateSelect(epsilon=1.0, sensitivity=1, num_candidates=10, seed=1)
        | beam.Map(lambda s: (tmp_path / "release.json").write_text(json.dumps(s)))
    )
    result = pipeline.run()
    result.wait_until_finish()
    assert json.loads((tmp_path / "release.json").read_text()) == [3]  # good rows still released
    dead = pacsv.read_csv(dead_letter, convert_options=pacsv.ConvertOptions(strings_can_be_null=True))
    assert dead.column_names == [s.name for s in specs] + [REASON]
    assert sorted(dead.column(REASON).to_pylist()) == sorted([*bad, "not a row (None)"])
    assert SECRET in dead_letter.read_text()  # the dead letter holds raw data: an operator's file
    assert not any(SECRET in reason for reason in dead.column(REASON).to_pylist())
    # Beam's own DEBUG records dump elements (a dead-letter table, in any pipeline): at INFO and above, and in
    # the library's records at any level, nothing may quote a value.
    ours = [r for r in caplog.records if r.levelno >= logging.INFO or r.name.startswith("beam_expmech")]
    assert ours and not any(SECRET in r.getMessage() or SECRET in str(r.exc_info) for r in ours)
    metrics = result.metrics().query(MetricsFilter().with_name("dead_letter_rows"))["counters"]
    assert sum(m.committed for m in metrics) == len(bad) + 1
    read_ = result.metrics().query(MetricsFilter().with_name("rows_read"))["counters"]
    assert sum(m.committed for m in read_) == len(rows)


def test_rows_travel_in_batches_of_at_most_batch_size(tmp_path):
    rows = [{"item": i % 7, "user": i} for i in range(1000)]
    with beam.Pipeline() as pipeline:
        checked = (
            pipeline | beam.Create(rows) | RowsToBatches(schema=SPECS, batch_size=64, identity_types={"user": int})
        )
        _ = (
            checked.good
            | beam.Map(lambda batch: batch.num_rows)
            | beam.combiners.ToList()
            | beam.Map(lambda sizes: (tmp_path / "sizes.json").write_text(json.dumps(sizes)))
        )
    sizes = read(tmp_path / "sizes.json")
    assert sum(sizes) == 1000 and max(sizes) == 64  # every row, never more than a batch, not row by row


def test_text_that_is_no_utf8_goes_to_the_dead_letter_without_its_value():
    """A lone surrogate cannot cross a Beam coder, but reaches the transform from a step fused with it."""
    rows = [{"note": "fine"}, {"note": SECRET + "\ud800"}]
    (dead, batch) = rows_as_batches(rows, [ColumnSpec("note", "string")], {})
    assert dead.rows.column(REASON).to_pylist() == ["note: not UTF-8 text (a lone surrogate)"]
    assert dead.rows.column("note").to_pylist() == [SECRET + "\\ud800"]
    assert batch.column("note").to_pylist() == ["fine"]


def test_a_value_too_large_to_print_goes_to_the_dead_letter_and_the_job_goes_on():
    """str() refuses ints beyond 4,300 digits: one person's row must cost that row, not the release (review 3)."""
    rows = [{"item": 1, "user": 1}, {"item": 10**5000, "user": 2}, {"item": [10**5000], "user": 3}]
    out = list(rows_as_batches(rows, [ColumnSpec("item", "int"), ColumnSpec("user", "any")], {"user": int}))
    (dead,) = [o for o in out if isinstance(o, MalformedRows)]
    assert dead.rows.column("user").to_pylist() == ["2", "3"]
    assert [o.num_rows for o in out if isinstance(o, pa.RecordBatch)] == [1]


def test_a_value_keeps_its_own_type_whatever_its_neighbours_in_the_batch():
    """An int beside a float in one column must not become a float (2^60 + 1 would lose its last digit)."""
    rows = [{"n": 2**60 + 1}, {"n": 2.0}, {"n": "7"}, {"n": True}, {"n": None}]
    batches = list(rows_as_batches(rows, [ColumnSpec("n", "int")], {}))
    values = []
    for batch in batches:
        good, _ = validate(batch, [ColumnSpec("n", "int")])
        values += good.column("n").to_pylist()
    assert sorted(values) == [1, 2, 7, 2**60 + 1]


@pytest.mark.parametrize(
    "arguments,message",
    [
        ({"schema": []}, "schema must be a non-empty list of ColumnSpec"),
        ({"schema": [("item", "int")]}, "schema must be a non-empty list of ColumnSpec"),
        ({"schema": [ColumnSpec("a", "int")] * 2}, "schema declares column 'a' more than once"),
        ({"schema": SPECS, "identity_types": {"user": int}, "batch_size": 0}, "batch_size must be an integer >= 1"),
        ({"schema": SPECS, "identity_types": {"user": int}, "batch_size": -3}, "batch_size must be an integer >= 1"),
        ({"schema": SPECS, "identity_types": {"user": int}, "batch_size": 2.5}, "batch_size must be an integer >= 1"),
        ({"schema": SPECS}, "column 'user' is of kind 'any': identity_types must give its values' type"),
        ({"schema": SPECS, "identity_types": {"user": list}}, "column 'user' is of kind 'any'"),
        ({"schema": SPECS, "identity_types": {"user": int, "item": int}}, "identity_types names 'item'"),
    ],
)
def test_bad_arguments_are_one_line_value_errors(arguments, message):
    with pytest.raises(ValueError, match=message) as error:
        RowsToBatches(**arguments)
    assert "\n" not in str(error.value)


def test_an_unknown_kind_is_a_value_error():
    with pytest.raises(ValueError, match=r"kind must be one of string, int, float, label, any .*did you mean 'int'"):
        RowsToBatches(schema=[ColumnSpec("item", "integer")])


@pytest.mark.parametrize("elements", [[(1, {"item": 3})], [(1, 3)], [3], ["item"], [[3, 1]], [{"item": 3}, (1, 3)]])
def test_elements_it_cannot_read_are_refused_when_the_graph_is_built(elements):
    """Issue 34: plain tuples or (key, dict) pairs went to the dead letter, every one, and a release came out."""
    pipeline = beam.Pipeline()
    created = pipeline | beam.Create(elements)
    with pytest.raises(ValueError, match=r"reads dicts, beam\.Row or NamedTuples"):
        _ = created | RowsToBatches(schema=[ColumnSpec("item", "int")])


def test_elements_it_cannot_read_stop_the_job_when_their_type_is_unknown_until_run(tmp_path):
    """Where the element type is not known when the graph is built (Any), the first tuple stops the job, and nothing
    is released."""
    pipeline = beam.Pipeline()
    _ = (
        (
            pipeline
            | beam.Create([{"item": 3, "user": 1}] * 3)
            | beam.Map(lambda row: (row["user"], row)).with_output_types(typehints.Any)  # (key, value) pairs
            | RowsToBatches(schema=[ColumnSpec("item", "int")])
        ).good
        | PredicateCounts(CategoryCounts("item", range(10)))
        | PrivateSelect(epsilon=1.0, sensitivity=1, num_candidates=10, seed=1)
        | beam.Map(lambda s: (tmp_path / "release.json").write_text(json.dumps(s)))
    )
    with pytest.raises(Exception, match="not tuple"):
        pipeline.run().wait_until_finish()
    assert not (tmp_path / "release.json").exists()


def test_numpy_scalars_are_read_as_the_numbers_they_are(tmp_path):
    """The second review's case: {"item": np.int64(3)} went to the dead letter, every row, and a release came out."""
    rows = [{"user": int(u), "item": np.int64(u % 3), "x": np.float32(0.5)} for u in range(30)]
    specs = [ColumnSpec("user", "any"), ColumnSpec("item", "int"), ColumnSpec("x", "float")]
    with beam.Pipeline() as pipeline:
        checked = pipeline | beam.Create(rows) | RowsToBatches(schema=specs, identity_types={"user": int})
        _ = checked.good | beam.Map(lambda b: (tmp_path / "good").write_text(str(b.num_rows)))
    assert (tmp_path / "good").read_text() == "30"
