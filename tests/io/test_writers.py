"""Atomic writes: a path is absent, as before, or complete."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.io.filesystems import FileSystems

from beam_expmech.io import readers, writers


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


@pytest.mark.parametrize("name", ["t.parquet", "t.csv"])
def test_a_table_whose_chunks_fail_leaves_the_path_as_before_and_no_temporary_file(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(b"the earlier release")
    with pytest.raises(RuntimeError, match="injected"):
        writers.write_table_atomically(str(path), TABLE.schema, chunks_of(TABLE, 4, fail_after=2))
    assert path.read_bytes() == b"the earlier release" and os.listdir(tmp_path) == [name]


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
