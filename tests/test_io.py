"""Reading every format, validating batches into good rows and a dead letter, atomic writes."""

from __future__ import annotations

import os

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from beam_data import pages_zeroed, purchases, write

from beam_expmech import io

SECRET = "secret-ssn-123-45-6789"


@pytest.mark.parametrize("fmt", io.FORMATS)
def test_every_format_reads_back_the_needed_columns(tmp_path, fmt):
    table = purchases(1000)
    path = write(table, tmp_path / f"data.{fmt}", fmt)
    assert io.match_files(str(tmp_path / "*")) == [str(path)]
    assert set(io.column_types(str(path), fmt)) == {"user_id", "item", "amount"}
    batches = [b for split in io.splits(str(path), fmt) for b in io.read_split(split, ["item", "amount"])]
    read = pa.Table.from_batches(batches)
    assert read.column_names == ["item", "amount"]
    item, _ = io.validate(read.combine_chunks().to_batches()[0], [io.ColumnSpec("item", "int")])
    np.testing.assert_array_equal(item.column("item").to_numpy(), table.column("item").to_numpy())


def test_format_from_extension_or_declared():
    assert io.file_format("gs://b/x.PARQUET") == "parquet"
    assert io.file_format("a/b.csv.gz") == "csv"
    assert io.file_format("a/b.data", "avro") == "avro"
    with pytest.raises(io.InputError, match="--format"):
        io.file_format("a/b.data")


def test_schema_problems_name_the_file_and_column(tmp_path):
    path = write(purchases(10), tmp_path / "a.parquet", "parquet")
    with pytest.raises(io.InputError, match=r"a\.parquet: missing column 'region'"):
        io.check_columns([str(path)], None, ["item", "region"])
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1 not really")
    with pytest.raises(io.InputError, match=r"broken\.parquet: unreadable parquet"):
        io.check_columns([str(broken)], None, ["item"])
    with pytest.raises(io.InputError, match="no file matches"):
        io.match_files(str(tmp_path / "*.avro"))


def test_a_missing_column_is_named_never_the_header_which_may_be_a_row(tmp_path):
    headerless = tmp_path / "headerless.csv"
    headerless.write_text(f"{SECRET},1\nu2,2\n")
    with pytest.raises(io.InputError) as raised:
        io.check_columns([str(headerless)], None, ["user", "item"])
    assert str(raised.value) == f"{headerless}: missing column 'user'"


def test_a_malformed_csv_row_is_set_aside_by_its_row_number_never_quoted(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text(f'user,item\n1,2\n"{SECRET}",30,EXTRA\n7\n3,4\n')
    assert io.column_types(str(path), "csv") == {"user": pa.binary(), "item": pa.binary()}  # despite the bad rows
    read = list(io.read_split((str(path), "csv", None), ["user", "item"]))
    rows = pa.Table.from_batches([b for b in read if isinstance(b, pa.RecordBatch)])
    assert rows.column("user").to_pylist() == [b"1", b"3"]
    malformed = pa.concat_tables([b.rows for b in read if isinstance(b, io.MalformedRows)])
    assert malformed.column(io.REASON).to_pylist() == [
        f"malformed CSV row: expected 2 fields, got 3 (row 3 of {path})",
        f"malformed CSV row: expected 2 fields, got 1 (row 4 of {path})",
    ]
    assert malformed.column("user").null_count == 2  # which field is which cannot be told


def test_a_malformed_row_that_is_not_utf8_costs_that_row_only(tmp_path, capfd):
    # pyarrow cannot hand such a row to the handler (it decodes it first): it is parsed alone, and set aside.
    latin1 = tmp_path / "latin1.csv"
    latin1.write_bytes(f'user,item\n1,2\n"{SECRET}",30,caf\xe9\n3,4\n'.encode("latin-1"))
    assert io.column_types(str(latin1), "csv") == {"user": pa.binary(), "item": pa.binary()}
    read = list(io.read_split((str(latin1), "csv", None), ["user", "item"]))
    rows = pa.Table.from_batches([b for b in read if isinstance(b, pa.RecordBatch)])
    assert sorted(rows.column("user").to_pylist()) == [b"1", b"3"]
    (malformed,) = [b.rows for b in read if isinstance(b, io.MalformedRows)]
    assert malformed.column(io.REASON).to_pylist() == [
        f"malformed CSV row: not one record (a row of the wrong width that is not UTF-8 text) (row 3 of {latin1})"
    ]
    printed = capfd.readouterr()
    assert SECRET not in printed.out + printed.err and "0xe9" not in printed.err  # nor Python's own report


@pytest.mark.parametrize(
    "line",
    ['"x,victim', 'x","y', '"unclosed', 'a,"b'],
)
def test_an_unclosed_quote_never_swallows_the_lines_after_it(tmp_path, line):
    """One person's line with an unclosed quote once turned every later line into part of its value:
    the other people's rows were gone, not even in the dead letter. Each line is at most one record."""
    others = "".join(f"b,{unit}\n" for unit in range(1000))
    path = tmp_path / "data.csv"
    path.write_text(f"item,user\n{others}{line}\n{others}")
    read = list(io.read_split((str(path), "csv", None), ["item", "user"]))
    rows = pa.Table.from_batches([b for b in read if isinstance(b, pa.RecordBatch)])
    set_aside = sum(b.rows.num_rows for b in read if isinstance(b, io.MalformedRows))
    assert rows.column("item").to_pylist().count(b"b") == 2000
    assert rows.num_rows + set_aside == 2001  # the line itself: one record, or set aside


def test_csv_values_like_na_or_null_are_values(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text('item,user\nNA,1\nnull,2\nNaN,3\n,4\n"",5\n')
    (batch,) = io.read_split((str(path), "csv", None), ["item", "user"])
    assert batch.column("item").to_pylist() == [b"NA", b"null", b"NaN", None, None]


def test_a_file_that_cannot_be_read_is_named_by_the_error_type_never_quoted(tmp_path, capfd):
    clean = tmp_path / "clean.parquet"
    pq.write_table(pa.table({"note": [SECRET] * 100, "item": list(range(100))}), clean)
    zeroed = tmp_path / "zeroed.parquet"
    zeroed.write_bytes(pages_zeroed(clean.read_bytes()))
    with pytest.raises(io.InputError) as raised:
        list(io.read_split((str(zeroed), "parquet", 0), ["note", "item"]))
    assert str(raised.value).startswith(f"{zeroed}: unreadable parquet file (") and SECRET not in str(raised.value)
    printed = capfd.readouterr()
    assert SECRET not in printed.out + printed.err and "0xe9" not in printed.err  # nor Python's own report


def write_avro(path, fields: dict, rows: list[dict]) -> str:
    schema = {"type": "record", "name": "Row", "fields": [{"name": n, "type": t} for n, t in fields.items()]}
    with open(path, "wb") as handle:
        fastavro.writer(handle, schema, rows)
    return str(path)


def test_avro_values_read_as_their_declared_type_whatever_rows_are_beside_them(tmp_path):
    fields = {"user": ["null", "long", "string"], "item": ["null", "long", "double"], "n": ["null", "long"]}
    alone = write_avro(tmp_path / "alone.avro", fields, [{"user": 5, "item": 2**62 + 1, "n": 1}])
    beside = write_avro(tmp_path / "beside.avro", fields, [{"user": 5, "item": 2**62 + 1, "n": 1},
                                                          {"user": "x", "item": 0.5, "n": None}])  # fmt: skip
    assert io.column_types(alone, "avro") == {"user": pa.string(), "item": pa.string(), "n": pa.int64()}
    specs = [io.ColumnSpec("user", "string"), io.ColumnSpec("item", "int"), io.ColumnSpec("n", "int")]
    first, second = (
        io.validate(next(io.read_split((p, "avro", None), list(fields))), specs)[0] for p in (alone, beside)
    )
    assert first.schema == second.schema
    assert first.to_pylist() == second.to_pylist() == [{"user": "5", "item": 2**62 + 1, "n": 1}]


def test_an_avro_privacy_unit_must_have_one_primitive_type(tmp_path):
    """Read as text, 0.0 and -0.0 of a union would be two units, 5 and "5" one, fixed and bytes b"abc" two."""
    fixed = {"type": "fixed", "name": "Id", "size": 3}
    timestamp = {"type": "long", "logicalType": "timestamp-millis"}
    for n, unit in enumerate(
        [["null", "double", "long"], ["long", "string"], fixed, timestamp, {"type": "array", "items": "long"}]
    ):
        path = write_avro(tmp_path / f"{n}.avro", {"user": unit, "item": "long"}, [])
        io.check_columns([path], None, ["user", "item"])  # as a value, read as its text
        with pytest.raises(io.InputError) as raised:
            io.check_columns([path], None, ["user", "item"], identities=["user"])
        assert str(raised.value).startswith(f"{path}: column 'user' identifies privacy units, so its Avro type must")
    enum = {"type": "enum", "name": "Who", "symbols": ["a", "b"]}
    for n, unit in enumerate([["null", "long"], "string", "bytes", enum, {"type": "double"}]):
        path = write_avro(tmp_path / f"ok{n}.avro", {"user": unit, "item": "long"}, [])
        io.check_columns([path], None, ["user", "item"], identities=["user"])


def test_a_needed_column_named_twice_is_refused(tmp_path):
    path = tmp_path / "twice.parquet"
    columns = [pa.array([1]), pa.array([2]), pa.array([SECRET]), pa.array([3]), pa.array([4])]
    pq.write_table(pa.Table.from_arrays(columns, names=["user", "item", "user", "note", "note"]), path)
    io.check_columns([str(path)], None, ["item"])  # the twice-named columns are not read
    with pytest.raises(io.InputError) as raised:
        io.check_columns([str(path)], None, ["item", "user"])
    assert str(raised.value) == f"{path}: column 'user' appears more than once"


def test_files_that_type_a_needed_column_differently_are_refused(tmp_path):
    def parquet(name, users):
        pq.write_table(pa.table({"user": users, "item": [1] * len(users)}), tmp_path / name)
        return str(tmp_path / name)

    int32, int64 = parquet("a.parquet", pa.array([5], pa.int32())), parquet("b.parquet", pa.array([5], pa.int64()))
    nulls = parquet("c.parquet", pa.array([None], pa.null()))
    io.check_columns([int32, int64, nulls], None, ["user", "item"])  # one family: one canonical form
    for other, family in ((parquet("d.parquet", ["5"]), "text"), (parquet("e.parquet", [5.0]), "floating-point")):
        with pytest.raises(io.InputError, match=rf"{other}: column 'user' holds {family}.*, but integers in {int32}"):
            io.check_columns([int32, int64, nulls, other], None, ["user", "item"])
    csv = write(pa.table({"user": [5], "item": [1]}), tmp_path / "f.csv", "csv")
    with pytest.raises(io.InputError, match=r"f\.csv: column 'item' holds text"):
        io.check_columns([int32, str(csv)], None, ["item", "user"])
    avro = write_avro(tmp_path / "g.avro", {"user": "long", "item": "long"}, [{"user": 5, "item": 1}])
    io.check_columns([int32, avro], None, ["user", "item"])


def test_an_identity_takes_its_canonical_form():
    batch = pa.record_batch(
        {"f": [-0.0, 0.0, float("nan")], "i": pa.array([5, 6, None], pa.int32()), "s": ["a", "b", "c"]}
    )
    good, bad = io.validate(batch, [io.ColumnSpec(c, "any") for c in ("f", "i", "s")])
    assert bad.column(io.REASON).to_pylist() == ["i: null"]
    assert np.signbit(good.column("f").to_numpy()).tolist() == [False, False]
    assert good.schema.types == [pa.float64(), pa.int64(), pa.large_binary()]


def test_a_uint64_identity_beyond_int64_is_rejected_never_wrapped_onto_another():
    """As int64, 2^64 - 1 would be -1: two people, one unit."""
    batch = pa.record_batch({"u": pa.array([2**64 - 1, 2**63, 2**63 - 1], pa.uint64())})
    for kind in ("any", "int"):
        good, bad = io.validate(batch, [io.ColumnSpec("u", kind)])
        assert good.column("u").to_pylist() == [2**63 - 1]
        assert bad.column(io.REASON).to_pylist() == ["u: out of the 64-bit range"] * 2


def test_an_identity_longer_than_the_public_limit_is_rejected():
    """Else one huge unit would cost the bounding step memory many times its size, after the charge."""
    limit = io.MAX_IDENTITY_BYTES
    batch = pa.record_batch({"u": ["a" * limit, "é" * (limit // 2 + 1), "b" * (limit + 1)], "n": [1, 2, 3]})
    good, bad = io.validate(batch, [io.ColumnSpec("u", "any"), io.ColumnSpec("n", "int")])
    assert good.column("n").to_pylist() == [1]
    assert bad.column(io.REASON).to_pylist() == [f"u: longer than {limit} bytes"] * 2
    assert bad.column("n").to_pylist() == ["2", "3"]  # the row, whole, in the dead letter


def test_validation_routes_each_bad_row_with_its_reason():
    batch = pa.record_batch(
        {
            "n": pa.array(["1", " 2 ", "x", None, "99999999999999999999", "7", "8", "9"]),
            "f": pa.array([0.5, 1.0, 2.0, 3.0, 4.0, float("nan"), float("inf"), 1.0]),
            "d": pa.array([0, 1, 2, 3, 4, 5, 6, 10]),
        }
    )
    specs = [io.ColumnSpec("n", "int"), io.ColumnSpec("f", "float"), io.ColumnSpec("d", "int", domain=(0, 10))]
    good, bad = io.validate(batch, specs)
    assert good.column("n").to_pylist() == [1, 2]
    assert good.column("n").type == pa.int64() and good.column("f").type == pa.float64()
    assert bad.column("reason").to_pylist() == [
        "n: not an integer",
        "n: null",
        "n: out of the 64-bit range",
        "f: NaN or infinite",
        "f: NaN or infinite",
        "d: outside the domain [0, 10)",
    ]
    assert bad.column("n").to_pylist()[0] == "x"  # the rejected value as it was read


def test_float_codes_and_wrong_types():
    batch = pa.record_batch({"a": pa.array([1.0, 2.5, -0.0]), "b": pa.array([[1], [2], [3]])})
    good, bad = io.validate(batch, [io.ColumnSpec("a", "int")])
    assert good.column("a").to_pylist() == [1, 0] and bad.column("reason").to_pylist() == ["a: not an integer"]
    _, bad = io.validate(batch, [io.ColumnSpec("b", "float")])
    assert bad.num_rows == 3 and bad.column("reason")[0].as_py().startswith("b: wrong type")


def test_labels_become_their_positions():
    batch = pa.record_batch({"c": pa.array(["b", None, "a", "z", "b"]), "n": pa.array([1, 2, 3, 4, 5])})
    good, bad = io.validate(batch, [io.ColumnSpec("c", "label", labels=("a", "b"))])
    assert good.column("c").to_pylist() == [1, 0, 1]
    assert bad.column(io.REASON).to_pylist() == ["c: null", "c: not one of the domain's 2 labels"]
    with pytest.raises(ValueError, match="labels go with kind"):
        io.ColumnSpec("c", "int", labels=("a",))


def test_clean_batches_have_no_dead_letter():
    good, bad = io.validate(pa.record_batch({"s": ["a", "b"]}), [io.ColumnSpec("s", "string")])
    assert bad is None and good.num_rows == 2


def test_atomic_write_replaces_whole_or_not_at_all(tmp_path, monkeypatch):
    path = tmp_path / "out" / "release.json"
    io.write_json(str(path), {"selected": ["a"]})
    assert io.read_json(str(path)) == {"selected": ["a"]}

    def crash(*_):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        io.write_json(str(path), {"selected": ["b"]})
    assert io.read_json(str(path)) == {"selected": ["a"]}  # the old release, whole


def test_a_csv_header_that_names_a_needed_column_twice_is_refused(tmp_path):
    path = tmp_path / "twice.csv"
    path.write_text("user,item,user\n1,2,3\n")
    with pytest.raises(io.InputError, match=r"twice\.csv: column 'user' appears more than once"):
        io.check_columns([str(path)], None, ["user", "item"])


def test_a_boolean_column_validates_as_integers():
    good, bad = io.validate(pa.record_batch({"b": pa.array([True, None, False])}), [io.ColumnSpec("b", "int")])
    assert good.column("b").to_pylist() == [1, 0] and bad.column(io.REASON).to_pylist() == ["b: null"]
