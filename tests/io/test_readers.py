"""Reading every format: files, formats, schema checks before any budget, streamed batches."""

from __future__ import annotations

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from beam_data import pages_zeroed, purchases, write

from beam_expmech.io import readers
from beam_expmech.io.errors import InputError
from beam_expmech.io.validation import ColumnSpec, validate

SECRET = "secret-ssn-123-45-6789"


@pytest.mark.parametrize("fmt", readers.FORMATS)
def test_every_format_reads_back_the_needed_columns(tmp_path, fmt):
    table = purchases(1000)
    path = write(table, tmp_path / f"data.{fmt}", fmt)
    assert readers.match_files(str(tmp_path / "*")) == [str(path)]
    assert set(readers.column_types(str(path), fmt)) == {"user_id", "item", "amount"}
    batches = [b for split in readers.splits(str(path), fmt) for b in readers.read_split(split, ["item", "amount"])]
    read = pa.Table.from_batches(batches)
    assert read.column_names == ["item", "amount"]
    item, _ = validate(read.combine_chunks().to_batches()[0], [ColumnSpec("item", "int")])
    np.testing.assert_array_equal(item.column("item").to_numpy(), table.column("item").to_numpy())


def test_format_from_extension_or_declared():
    assert readers.file_format("gs://b/x.PARQUET") == "parquet"
    assert readers.file_format("a/b.csv.gz") == "csv"
    assert readers.file_format("a/b.data", "avro") == "avro"
    with pytest.raises(InputError, match="--format"):
        readers.file_format("a/b.data")


def test_schema_problems_name_the_file_and_column(tmp_path):
    path = write(purchases(10), tmp_path / "a.parquet", "parquet")
    with pytest.raises(InputError, match=r"a\.parquet: missing column 'region'"):
        readers.check_columns([str(path)], None, ["item", "region"])
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1 not really")
    with pytest.raises(InputError, match=r"broken\.parquet: unreadable parquet"):
        readers.check_columns([str(broken)], None, ["item"])
    with pytest.raises(InputError, match="no file matches"):
        readers.match_files(str(tmp_path / "*.avro"))


def test_a_missing_column_is_named_never_the_header_which_may_be_a_row(tmp_path):
    headerless = tmp_path / "headerless.csv"
    headerless.write_text(f"{SECRET},1\nu2,2\n")
    with pytest.raises(InputError) as raised:
        readers.check_columns([str(headerless)], None, ["user", "item"])
    assert str(raised.value) == f"{headerless}: missing column 'user'"


def test_a_file_that_cannot_be_read_is_named_by_the_error_type_never_quoted(tmp_path, capfd):
    clean = tmp_path / "clean.parquet"
    pq.write_table(pa.table({"note": [SECRET] * 100, "item": list(range(100))}), clean)
    zeroed = tmp_path / "zeroed.parquet"
    zeroed.write_bytes(pages_zeroed(clean.read_bytes()))
    with pytest.raises(InputError) as raised:
        list(readers.read_split((str(zeroed), "parquet", 0), ["note", "item"]))
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
    assert readers.column_types(alone, "avro") == {"user": pa.string(), "item": pa.string(), "n": pa.int64()}
    specs = [
        ColumnSpec("user", "string"),
        ColumnSpec("item", "int"),
        ColumnSpec("n", "int"),
    ]
    first, second = (
        validate(next(readers.read_split((p, "avro", None), list(fields))), specs)[0] for p in (alone, beside)
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
        readers.check_columns([path], None, ["user", "item"])  # as a value, read as its text
        with pytest.raises(InputError) as raised:
            readers.check_columns([path], None, ["user", "item"], identities=["user"])
        assert str(raised.value).startswith(f"{path}: column 'user' identifies privacy units, so its Avro type must")
    enum = {"type": "enum", "name": "Who", "symbols": ["a", "b"]}
    for n, unit in enumerate([["null", "long"], "string", "bytes", enum, {"type": "double"}]):
        path = write_avro(tmp_path / f"ok{n}.avro", {"user": unit, "item": "long"}, [])
        readers.check_columns([path], None, ["user", "item"], identities=["user"])


def test_a_needed_column_named_twice_is_refused(tmp_path):
    path = tmp_path / "twice.parquet"
    columns = [pa.array([1]), pa.array([2]), pa.array([SECRET]), pa.array([3]), pa.array([4])]
    pq.write_table(pa.Table.from_arrays(columns, names=["user", "item", "user", "note", "note"]), path)
    readers.check_columns([str(path)], None, ["item"])  # the twice-named columns are not read
    with pytest.raises(InputError) as raised:
        readers.check_columns([str(path)], None, ["item", "user"])
    assert str(raised.value) == f"{path}: column 'user' appears more than once"


def test_files_that_type_a_needed_column_differently_are_refused(tmp_path):
    def parquet(name, users):
        pq.write_table(pa.table({"user": users, "item": [1] * len(users)}), tmp_path / name)
        return str(tmp_path / name)

    int32, int64 = parquet("a.parquet", pa.array([5], pa.int32())), parquet("b.parquet", pa.array([5], pa.int64()))
    nulls = parquet("c.parquet", pa.array([None], pa.null()))
    readers.check_columns([int32, int64, nulls], None, ["user", "item"])  # one family: one canonical form
    for other, family in ((parquet("d.parquet", ["5"]), "text"), (parquet("e.parquet", [5.0]), "floating-point")):
        with pytest.raises(InputError, match=rf"{other}: column 'user' holds {family}.*, but integers in {int32}"):
            readers.check_columns([int32, int64, nulls, other], None, ["user", "item"])
    csv = write(pa.table({"user": [5], "item": [1]}), tmp_path / "f.csv", "csv")
    with pytest.raises(InputError, match=r"f\.csv: column 'item' holds text"):
        readers.check_columns([int32, str(csv)], None, ["item", "user"])
    avro = write_avro(tmp_path / "g.avro", {"user": "long", "item": "long"}, [{"user": 5, "item": 1}])
    readers.check_columns([int32, avro], None, ["user", "item"])


def test_a_csv_header_that_names_a_needed_column_twice_is_refused(tmp_path):
    path = tmp_path / "twice.csv"
    path.write_text("user,item,user\n1,2,3\n")
    with pytest.raises(InputError, match=r"twice\.csv: column 'user' appears more than once"):
        readers.check_columns([str(path)], None, ["user", "item"])


def test_total_size_reads_what_match_files_found_and_lists_nothing_again(tmp_path):
    """Bounding sizes its shards after the budget is charged: from match_files' listing, not a new one."""
    for name, size in (("a.csv", 10), ("b.csv", 32)):
        (tmp_path / name).write_bytes(b"x" * size)
    files = readers.match_files(str(tmp_path / "*.csv"))
    (tmp_path / "a.csv").write_bytes(b"x" * 1000)  # not listed again
    assert readers.total_size(files) == 42
    assert readers.total_size([*files, str(tmp_path / "never_matched.csv")]) is None


@pytest.mark.parametrize("files", [3, 130])
def test_a_read_gives_every_row_of_every_row_group_whether_it_lists_them_or_its_files(tmp_path, files):
    # Under 128 files their row groups are listed when the graph is built (Beam's Dask runner spreads them);
    # from 128 on the files are, and each file's row groups are found inside the graph.
    import apache_beam as beam
    from apache_beam.testing.util import assert_that, equal_to

    from beam_expmech.transforms import ReadRecordBatches

    for i in range(files):
        pq.write_table(pa.table({"item": np.arange(10) + 10 * i}), tmp_path / f"{i}.parquet", row_group_size=4)
    read = ReadRecordBatches([str(tmp_path / f"{i}.parquet") for i in range(files)], None, ["item"])
    assert len(read.entries) == (files if files >= 128 else 3 * files)  # 3 row groups a file
    with beam.Pipeline() as pipeline:
        items = pipeline | read | beam.FlatMap(lambda batch: batch.column("item").to_pylist())
        assert_that(items, equal_to(list(range(10 * files))))
