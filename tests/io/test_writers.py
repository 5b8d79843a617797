"""Atomic writes: a path is absent, as before, or complete."""

from __future__ import annotations

import os

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.io.filesystems import FileSystems

from beam_expmech.io import avro_tables, readers, writers


def test_atomic_write_replaces_whole_or_not_at_all(tmp_path, monkeypatch):
    path = tmp_path / "out" / "release.json"
    writers.write_json(str(path), {"selected": ["a"]})
    assert readers.read_json(str(path)) == {"selected": ["a"]}

    def crash(*_):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        writers.write_json(str(path), {"selected": ["b"]})
    assert readers.read_json(str(path)) == {"selected": ["a"]}  # the old release, whole


TABLE = pa.table({"code": pa.array(range(10), pa.int64()), "label": pa.array(list("abcdefghij"))})


def chunks_of(table: pa.Table, rows: int, *, fail_after: int | None = None):
    """``table`` in pieces of ``rows`` rows; with ``fail_after``, an error once that many are handed out."""
    for i, start in enumerate(range(0, table.num_rows, rows)):
        if i == fail_after:
            raise RuntimeError("the rows' maker failed (injected)")
        yield table.slice(start, rows)


@pytest.mark.parametrize("name", ["t.parquet", "t.csv"])
def test_a_table_written_in_chunks_is_the_whole_table_each_chunk_a_row_group_or_a_piece_of_csv(tmp_path, name):
    path = str(tmp_path / name)
    writers.write_table_atomically(path, TABLE.schema, chunks_of(TABLE, 4))
    if name.endswith(".csv"):
        assert (tmp_path / name).read_bytes() == writers.table_to_csv(TABLE)  # one header, then every piece
    else:
        assert pq.read_table(path).equals(TABLE) and pq.ParquetFile(path).num_row_groups == 3
    assert os.listdir(tmp_path) == [name]


@pytest.mark.parametrize("name", ["t.parquet", "t.csv", "t.avro"])
def test_a_table_whose_chunks_fail_leaves_the_path_as_before_and_no_temporary_file(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(b"the earlier release")
    with pytest.raises(RuntimeError, match="injected"):
        writers.write_table_atomically(str(path), TABLE.schema, chunks_of(TABLE, 4, fail_after=2))
    assert path.read_bytes() == b"the earlier release" and os.listdir(tmp_path) == [name]


LONGS = [0, -1, 1, -64, 63, -65, 64, 127, 128, 8191, 8192, 2**35, -(2**35), 2**62, -(2**63), 2**63 - 1]
"""Longs at each zigzag varint's edges: 1 byte up to 63, 2 from 64 (as 128), ..., 10 for the extremes."""
DOUBLES = [0.0, -0.0, 1.5, -2.25, float("inf"), float("-inf"), float("nan"), 5e-324, 1.7976931348623157e308]
TEXTS = ["", "a", "é", "日本", "x" * 300, 'quote"comma,', "line\nbreak"]


def avro_table(rows: int) -> pa.Table:
    """``rows`` rows cycling through the edge values of each type the Avro writer takes."""
    return pa.table(
        {
            "code": pa.array([LONGS[i % len(LONGS)] for i in range(rows)], pa.int64()),
            "x": pa.array([DOUBLES[i % len(DOUBLES)] for i in range(rows)], pa.float64()),
            "label": pa.array([TEXTS[i % len(TEXTS)] for i in range(rows)], pa.string()),
        }
    )


def read_avro(path) -> tuple[dict, pa.Table]:
    """The file's writer schema, and its rows as a table of its declared types (each read by fastavro)."""
    with open(path, "rb") as handle:
        reader = fastavro.reader(handle)
        rows = list(reader)
        schema = reader.writer_schema
    kinds = {"long": pa.int64(), "double": pa.float64(), "string": pa.string()}
    fields = [(field["name"], kinds[field["type"]]) for field in schema["fields"]]
    return schema, pa.Table.from_pylist(rows, pa.schema(fields))


def same_bits(a: pa.Table, b: pa.Table) -> bool:
    """Equal tables, each double to its bits (a NaN equals itself, -0.0 is not 0.0)."""

    def values(column: pa.ChunkedArray) -> list:
        return column.to_numpy().view(np.uint64).tolist() if column.type == pa.float64() else column.to_pylist()

    return a.schema == b.schema and all(values(x) == values(y) for x, y in zip(a.columns, b.columns, strict=True))


def test_a_table_written_as_avro_in_chunks_reads_back_row_for_row_and_type_for_type(tmp_path, monkeypatch):
    """Several chunks, each in several blocks (a block of about 64 bytes of Arrow: a few rows), every long's
    varint length, doubles to the bit, text of any length and script."""
    monkeypatch.setattr(avro_tables, "BLOCK_BYTES", 64)
    table = avro_table(100)
    path = str(tmp_path / "t.avro")
    writers.write_table_atomically(path, table.schema, chunks_of(table, 30))
    schema, read = read_avro(path)
    assert [(f["name"], f["type"]) for f in schema["fields"]] == [
        ("code", "long"),
        ("x", "double"),
        ("label", "string"),
    ]
    assert same_bits(read, table)
    with open(path, "rb") as handle:
        blocks = [block.num_records for block in fastavro.block_reader(handle)]
    assert len(blocks) > 4 and sum(blocks) == 100
    assert os.listdir(tmp_path) == ["t.avro"]


@pytest.mark.parametrize("rows", [0, 1, 1000])
def test_avro_in_one_block_or_none_reads_back_and_through_the_librarys_own_reader(tmp_path, rows):
    table = avro_table(rows)
    path = str(tmp_path / "t.AVRO")
    writers.write_table_atomically(path, table.schema, [table])
    assert same_bits(read_avro(path)[1], table)
    assert readers.column_types(path, "avro") == dict(zip(table.schema.names, table.schema.types, strict=True))


@pytest.mark.parametrize(
    ("schema", "says"),
    [
        (pa.schema([("n", pa.int32())]), "'n' is int32"),
        (pa.schema([("b", pa.bool_())]), "'b' is bool"),
        (pa.schema([("a b", pa.int64())]), "'a b' is not an Avro name"),
        (pa.schema([("1st", pa.int64())]), "'1st' is not an Avro name"),
        (pa.schema([("a", pa.int64()), ("a", pa.string())]), "named twice"),
    ],
)
def test_an_avro_table_of_a_type_or_name_avro_cannot_hold_is_refused_before_anything_is_written(tmp_path, schema, says):
    with pytest.raises(ValueError, match=says):
        writers.write_table_atomically(str(tmp_path / "t.avro"), schema, [])
    assert os.listdir(tmp_path) == []


def test_a_null_in_an_avro_table_is_refused_without_its_row_and_no_file_is_left(tmp_path):
    table = pa.table({"code": pa.array([1, None], pa.int64())})
    with pytest.raises(ValueError, match="column 'code' holds a null"):
        writers.write_table_atomically(str(tmp_path / "t.avro"), table.schema, [table])
    assert os.listdir(tmp_path) == []


def test_an_avro_chunk_of_another_schema_than_the_files_is_refused_and_no_file_is_left(tmp_path):
    other = pa.table({"code": pa.array([1.5])})  # float64 where the file holds int64
    with pytest.raises(ValueError, match="schema is not the one"):
        writers.write_table_atomically(str(tmp_path / "t.avro"), TABLE.schema, [TABLE, other])
    assert os.listdir(tmp_path) == []


def test_rename_atomically_moves_a_whole_file_over_the_destination(tmp_path):
    (tmp_path / ".staged").write_bytes(b"new")
    (tmp_path / "out").write_bytes(b"old")
    writers.rename_atomically(str(tmp_path / ".staged"), str(tmp_path / "out"))
    assert (tmp_path / "out").read_bytes() == b"new" and os.listdir(tmp_path) == ["out"]


def test_a_table_in_chunks_on_gs_appears_whole_or_not_at_all(gcs_emulator):
    """One resumable upload: visible once finished; cancelled on an error, so nothing appears (three chunks of
    8 MiB go before the error: more than the 16 MiB piece the upload sends at a time)."""
    big = pa.table({"x": np.random.default_rng(1).integers(0, 2**62, 5 * 2**20)})  # test-only; incompressible
    path = "gs://test-bucket/tables/t.parquet"
    with pytest.raises(RuntimeError, match="injected"):
        writers.write_table_atomically(path, big.schema, chunks_of(big, 2**20, fail_after=3))
    assert not FileSystems.exists(path)
    writers.write_table_atomically(path, big.schema, chunks_of(big, 2**20))
    with FileSystems.open(path) as handle:
        assert pq.read_table(pa.BufferReader(handle.read())).equals(big)
    writers.write_atomically("gs://test-bucket/tables/.staged-t.csv", b"a\n1\n")
    writers.rename_atomically("gs://test-bucket/tables/.staged-t.csv", "gs://test-bucket/tables/t.csv")
    with FileSystems.open("gs://test-bucket/tables/t.csv") as handle:
        assert handle.read() == b"a\n1\n"
    assert not FileSystems.exists("gs://test-bucket/tables/.staged-t.csv")
