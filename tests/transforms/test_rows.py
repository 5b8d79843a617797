"""RowsToBatches: rows of a PCollection (dicts, beam.Row, NamedTuples, or tuples and (key, value) pairs through
extractors) into the library, on the DirectRunner.

The rows path must release what the file path releases from the same data and send bad rows to the dead
letter with reasons that quote no value (each unit's count, on both paths, is audited in
tests/audit/test_audit_rows.py).
"""

from __future__ import annotations

import json
import logging
import operator
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

from beam_expmech.io.validation import REASON, ColumnKind, ColumnSpec, MalformedRows, validate
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


# Elements that are no rows, and how to read them: (user, item, amount) tuples and (user, {item, amount}) pairs.
BY_POSITION = {"user": operator.itemgetter(0), "item": operator.itemgetter(1), "amount": operator.itemgetter(2)}
BY_PAIR = {"user": lambda kv: kv[0], "item": lambda kv: kv[1]["item"], "amount": lambda kv: kv[1]["amount"]}


def as_tuple(row: dict) -> tuple:
    return row["user"], row["item"], row["amount"]


def as_pair(row: dict) -> tuple:
    return row["user"], {"item": row["item"], "amount": row["amount"]}


@pytest.mark.parametrize("form", ["dict", "beam.Row", "NamedTuple", "tuple", "(key, dict)"])
def test_rows_give_the_release_the_parquet_file_gives_under_a_test_seed(tmp_path, form):
    rows = purchases_by_unit()
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "data.parquet", row_group_size=500)
    with beam.Pipeline() as pipeline:
        files = pipeline | ReadRecordBatches([str(tmp_path / "data.parquet")], None, ["item", "user"])
        release((files | ValidateBatches(SPECS)).good, str(tmp_path / "files.json"))
    elements = {"dict": rows, "beam.Row": [beam.Row(**r) for r in rows], "NamedTuple": [Purchase(**r) for r in rows],
                "tuple": list(map(as_tuple, rows)), "(key, dict)": list(map(as_pair, rows))}  # fmt: skip
    extractors = {"tuple": BY_POSITION, "(key, dict)": BY_PAIR}.get(form)
    if extractors is not None:
        extractors = {spec.name: extractors[spec.name] for spec in SPECS}  # the declared columns' only
    with beam.Pipeline() as pipeline:
        checked = (
            pipeline
            | beam.Create(elements[form])
            | RowsToBatches(schema=SPECS, batch_size=300, identity_types={"user": int}, extractors=extractors)
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
        ({"schema": SPECS, "identity_types": {"user": int}, "extractors": {"item": len}},
         "extractors has none for column 'user': with extractors, each declared column needs one"),
        ({"schema": SPECS, "identity_types": {"user": int}, "extractors": {}}, "extractors has none for column 'item'"),
        ({"schema": SPECS, "identity_types": {"user": int}, "extractors": {"item": len, "user": len, "amount": len}},
         "extractors names 'amount', which is no column of the schema"),
        ({"schema": SPECS, "identity_types": {"user": int}, "extractors": {"item": 1, "user": len}},
         "the extractor of column 'item' is not callable"),
        ({"schema": SPECS, "identity_types": {"user": int}, "extractors": [len, len]},
         "extractors must map each declared column to a function of the element"),
    ],
)  # fmt: skip
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


def test_an_element_it_cannot_read_is_a_dead_row_when_its_type_is_unknown_until_run(tmp_path):
    """Where the element type is not known when the graph is built (Any), a tuple among the dicts is a dead row, as
    None is: the job runs to the same release with or without it (one person's element does not stop it), and the
    dead letter says why without its value."""

    def release(elements: list, name: str) -> list:
        pipeline = beam.Pipeline()
        checked = (
            pipeline
            | beam.Create(elements).with_output_types(typehints.Any)
            | RowsToBatches(schema=[ColumnSpec("item", "int")])
        )
        _ = checked.dead | WriteDeadLetter(str(tmp_path / f"{name}.csv"), ["item"])
        _ = (
            checked.good
            | PredicateCounts(CategoryCounts("item", range(10)))
            | PrivateSelect(epsilon=1.0, sensitivity=1, num_candidates=10, seed=1)
            | beam.Map(lambda s: (tmp_path / f"{name}.json").write_text(json.dumps(s)))
        )
        pipeline.run().wait_until_finish()
        return json.loads((tmp_path / f"{name}.json").read_text())

    rows = [{"item": 3}] * 3
    assert release([*rows, (7, {"item": 3})], "with") == release(rows, "without")
    dead = (tmp_path / "with.csv").read_text()
    assert "not a row (not a dict, beam.Row or NamedTuple: give extractors)" in dead and "7" not in dead.split("\n")[1]


EQUIVALENT_SPECS = [ColumnSpec("item", ColumnKind.INT, domain=(0, 10)), ColumnSpec("user", ColumnKind.ANY),
                    ColumnSpec("amount", ColumnKind.FLOAT)]  # fmt: skip


def checked_outputs(elements: list | beam.PTransform, tmp_path, **arguments) -> dict:
    """RowsToBatches' good rows (sorted), their Arrow schemas, its dead rows with their reasons (sorted), and the
    non-private dead_letter_rows counter, run on the DirectRunner over ``elements`` (a list, or a transform that
    makes them)."""
    out = tmp_path / "outputs.json"
    out.unlink(missing_ok=True)
    pipeline = beam.Pipeline()
    create = elements if isinstance(elements, beam.PTransform) else beam.Create(elements)
    checked = pipeline | create | RowsToBatches(schema=EQUIVALENT_SPECS, batch_size=4, **arguments)
    _ = (
        (
            checked.good | "Good" >> beam.FlatMap(lambda b: [("good", r) for r in b.to_pylist()]),
            checked.good | "Schema" >> beam.Map(lambda b: ("schema", str(b.schema))),
            checked.dead | "Dead" >> beam.FlatMap(lambda t: [("dead", r) for r in t.to_pylist()]),
        )
        | beam.Flatten()
        | beam.combiners.ToList()
        | beam.Map(lambda pairs: out.write_text(json.dumps(pairs)))
    )
    result = pipeline.run()
    result.wait_until_finish()
    outputs = {"good": [], "schema": [], "dead": []}
    for name, value in json.loads(out.read_text()):
        outputs[name].append(json.dumps(value, sort_keys=True))
    metrics = result.metrics().query(MetricsFilter().with_name("dead_letter_rows"))["counters"]
    return {name: sorted(set(v)) if name == "schema" else sorted(v) for name, v in outputs.items()} | {
        "dead_letter_rows": sum(m.committed for m in metrics)
    }


@pytest.mark.parametrize("form", ["tuple", "typed tuple", "(key, dict)", "beam.Row"])
def test_elements_read_through_extractors_give_the_batches_and_dead_rows_dicts_give(tmp_path, form):
    """The same values, read by name from dicts or through extractors from tuples, pairs or beam.Row, pass the same
    checks: the same good rows in the same canonical types, the same dead rows with the same reasons."""
    good = [{"user": u, "item": u % 10, "amount": u / 4} for u in range(20)]
    bad = [  # a value of each kind validation or the value checks refuse
        {"user": 20, "item": SECRET, "amount": 1.0},  # item: not an integer
        {"user": 21, "item": 12, "amount": 1.0},  # item: outside the domain
        {"user": 22, "item": 2**70, "amount": 1.0},  # item: out of the 64-bit range
        {"user": 23, "item": None, "amount": 1.0},  # item: null
        {"user": 24, "item": Decimal("3"), "amount": 1.0},  # item: not a plain type
        {"user": SECRET, "item": 3, "amount": 1.0},  # user: not of the declared identity type
        {"user": 26, "item": 3, "amount": float("nan")},  # amount: NaN
        {"user": 27, "item": np.int64(4), "amount": np.float32(0.5)},  # numpy's scalars: good rows
    ]
    rows = good + bad
    from_dicts = checked_outputs(rows, tmp_path, identity_types={"user": int})
    assert len(from_dicts["good"]) == len(good) + 1 and from_dicts["dead_letter_rows"] == len(bad) - 1
    elements = {
        "tuple": list(map(as_tuple, rows)),
        "typed tuple": list(map(as_tuple, rows)),
        "(key, dict)": list(map(as_pair, rows)),
        "beam.Row": [beam.Row(**r) for r in rows],
    }[form]
    extractors = {
        "tuple": BY_POSITION,
        "typed tuple": BY_POSITION,
        "(key, dict)": BY_PAIR,
        "beam.Row": {name: operator.attrgetter(name) for name in ("user", "item", "amount")},
    }[form]
    if form == "typed tuple":  # an element type the by-name path refuses when built: extractors read it
        elements = beam.Create(elements).with_output_types(typehints.Tuple[typehints.Any, typehints.Any, typehints.Any])
    from_extractors = checked_outputs(elements, tmp_path, identity_types={"user": int}, extractors=extractors)
    assert from_extractors == from_dicts
    assert not any(SECRET in json.loads(r)[REASON] for r in from_extractors["dead"])


class Unreadable:
    """A value whose attribute, read, raises with a message that quotes the data."""

    @property
    def item(self):
        raise AttributeError(f"no item for {SECRET}")


def read_item(element) -> object:
    _, value = element
    if isinstance(value, str):
        return int(value)  # a ValueError whose message quotes the value
    if isinstance(value, dict):
        return value["item"]
    return value.item


def test_an_extractor_that_raises_makes_a_dead_row_whose_reason_names_the_column_and_the_exception_type_only(
    tmp_path, caplog
):
    """Each element's fate is its own: an element an extractor cannot read costs that element, never the release,
    and neither the reason nor a log line quotes the exception's message (it may hold the data)."""
    specs = [ColumnSpec("user", "any"), ColumnSpec("item", "int")]
    extractors = {"user": lambda element: element[0], "item": read_item}
    good = [(u, {"item": 3}) for u in range(5)]
    bad = {  # the reason each bad element must get
        "user: extractor raised IndexError": (),
        "user: extractor raised TypeError": None,
        "item: extractor raised ValueError": (7, SECRET),
        "item: extractor raised KeyError": (8, {SECRET: 1}),
        "item: extractor raised AttributeError": (9, Unreadable()),
    }
    caplog.set_level(logging.DEBUG)
    pipeline = beam.Pipeline()
    checked = (
        pipeline
        | beam.Create([*good, *bad.values()]).with_output_types(typehints.Any)
        | RowsToBatches(schema=specs, batch_size=4, identity_types={"user": int}, extractors=extractors)
    )
    _ = checked.dead | WriteDeadLetter(str(tmp_path / "dead.csv"), ["user", "item"])
    _ = (
        checked.good
        | PredicateCounts(CategoryCounts("item", range(10)))
        | PrivateSelect(epsilon=1.0, sensitivity=1, num_candidates=10, seed=1)
        | beam.Map(lambda s: (tmp_path / "release.json").write_text(json.dumps(s)))
    )
    result = pipeline.run()
    result.wait_until_finish()
    assert json.loads((tmp_path / "release.json").read_text()) == [3]  # the good elements still released
    dead = pacsv.read_csv(tmp_path / "dead.csv", convert_options=pacsv.ConvertOptions(strings_can_be_null=True))
    assert sorted(dead.column(REASON).to_pylist()) == sorted(bad)
    assert dead.filter(pa.compute.equal(dead.column(REASON), "user: extractor raised TypeError")).to_pylist() == [
        {"user": None, "item": None, REASON: "user: extractor raised TypeError"}  # what could not be read: null
    ]
    ours = [r for r in caplog.records if r.levelno >= logging.INFO or r.name.startswith("beam_expmech")]
    assert ours and not any(SECRET in r.getMessage() or SECRET in str(r.exc_info) for r in ours)
    metrics = result.metrics().query(MetricsFilter().with_name("dead_letter_rows"))["counters"]
    assert sum(m.committed for m in metrics) == len(bad)


def test_extractors_wrong_for_every_element_make_every_row_dead_and_never_stop_the_job():
    """The choice RowsToBatches' docstring explains: failing is per element, whatever the others do, even when none
    can be read (a dict's key read from tuples). A rule that stopped the job on a whole batch of failures would let
    one person's rows decide whether anything is released."""
    specs = [ColumnSpec("user", "any"), ColumnSpec("item", "int")]
    rows = [(u, u % 3) for u in range(6)]
    extractors = {"user": operator.itemgetter(0), "item": operator.itemgetter("item")}
    out = list(rows_as_batches(rows, specs, {"user": int}, extractors=extractors))
    (dead,) = out  # no batch of good rows
    assert isinstance(dead, MalformedRows)
    assert dead.rows.column(REASON).to_pylist() == ["item: extractor raised TypeError"] * len(rows)
    assert dead.rows.column("user").to_pylist() == [str(u) for u, _ in rows]  # what was read: in the dead letter


@pytest.mark.parametrize(
    "element_type,elements",
    [
        (typehints.Tuple[int, int], [(1, 3)]),
        (typehints.KV[int, typehints.Dict[str, int]], [(1, {"item": 3})]),
        (typehints.Tuple[int, ...], [(1, 3)]),
        (int, [3]),
        (typehints.Union[typehints.Dict[str, int], typehints.Tuple[int, int]], [{"item": 3}]),
    ],
)
def test_a_typed_pcollection_of_no_rows_is_refused_without_extractors_when_built_and_read_with_them(
    element_type, elements
):
    """The element type is the pipeline's shape (public): without extractors nothing in it can be read by name, so
    the graph is refused before anything runs; the same PCollection, with extractors, builds."""
    pipeline = beam.Pipeline()
    created = pipeline | beam.Create(elements).with_output_types(element_type)
    with pytest.raises(ValueError, match=r"reads dicts, beam\.Row or NamedTuples, and this PCollection holds .*"
                       r"or give extractors"):  # fmt: skip
        _ = created | "By name" >> RowsToBatches(schema=[ColumnSpec("item", "int")])
    checked = created | "Extracted" >> RowsToBatches(schema=[ColumnSpec("item", "int")], extractors={"item": len})
    assert checked.good.element_type is not None


def test_numpy_scalars_are_read_as_the_numbers_they_are(tmp_path):
    """The second review's case: {"item": np.int64(3)} went to the dead letter, every row, and a release came out."""
    rows = [{"user": int(u), "item": np.int64(u % 3), "x": np.float32(0.5)} for u in range(30)]
    specs = [ColumnSpec("user", "any"), ColumnSpec("item", "int"), ColumnSpec("x", "float")]
    with beam.Pipeline() as pipeline:
        checked = pipeline | beam.Create(rows) | RowsToBatches(schema=specs, identity_types={"user": int})
        _ = checked.good | beam.Map(lambda b: (tmp_path / "good").write_text(str(b.num_rows)))
    assert (tmp_path / "good").read_text() == "30"


class _Secretive(dict):
    """A row whose field, read by name, raises with its value in the message (a row's own code)."""

    def get(self, key, default=None):
        raise ValueError(f"secret value {dict.get(self, key)}")


def test_an_element_whose_fields_raise_when_read_is_a_dead_row_and_its_message_is_not_kept(tmp_path):
    rows = [{"item": 3, "user": 1}, _Secretive({"item": 4, "user": 2}), {"item": np.timedelta64(3, "ns"), "user": 3}]
    dead_letter = tmp_path / "dead.csv"
    pipeline = beam.Pipeline()
    checked = pipeline | beam.Create(rows) | RowsToBatches(schema=[ColumnSpec("item", "int")])
    _ = checked.dead | WriteDeadLetter(str(dead_letter), ["item"])
    pipeline.run().wait_until_finish()
    dead = dead_letter.read_text()
    assert "item: reading it raised ValueError" in dead and "secret" not in dead
    assert "item: not None, a bool, an int, a float, a str or bytes" in dead  # a duration is no integer
