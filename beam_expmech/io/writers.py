"""Writing outputs atomically: a crash never leaves a half file that looks complete."""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import tempfile
from collections.abc import Iterable, Iterator
from typing import BinaryIO

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from beam_expmech.io.avro_tables import AvroWriter

TABLE_CHUNK_BYTES = 2**24
"""What ``table_chunk_rows`` aims a chunk of a table at: its arrays, in Arrow's layout or as CSV text."""
TABLE_WRITER_BYTES = 4 * TABLE_CHUNK_BYTES + 2 * 16 * 2**20
"""What ``write_table_atomically`` holds at most beside the rows it is handed: a chunk's arrays, its encoding
(Parquet pages and their compressed copy, CSV text, or an Avro block and the arrays that encode it: see
``avro_tables.BLOCK_BYTES``) and the file's buffers (gs:// uploads 16 MiB pieces)."""


def _remote(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


@contextlib.contextmanager
def open_atomically(path: str) -> Iterator[BinaryIO]:
    """A binary handle whose bytes appear at ``path`` only once the block ends without an exception, all of
    them: until then ``path`` is absent, or as before. For writes too large to hold in memory at once.

    Locally: a temporary file in the same folder, flushed, renamed over ``path``, and the folder flushed too
    (a rename lives in the folder: without that, a power cut can undo it, and a ledger reservation made
    before data was read would vanish); on an exception the temporary file is removed. On gs:// one
    resumable upload, which the service makes visible only when it is finished: on an exception it is
    cancelled (the handle's exit), and a process that dies mid-way never finishes it.
    """
    if _remote(path):
        with FileSystems.create(path) as handle:
            yield handle
        return
    path = path.removeprefix("file://")
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=folder, prefix=temporary_prefix(path), delete=False) as handle:
        try:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        except BaseException:
            handle.close()
            os.unlink(handle.name)
            raise
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(handle.name, 0o666 & ~umask)  # as a file the user made would be, not a temporary file's 0600
    try:
        os.replace(handle.name, path)
    except BaseException:
        os.unlink(handle.name)
        raise
    _flush_folder(folder)


def temporary_prefix(path: str) -> str:
    """How a file being written to ``path`` begins its name until it is whole (a process killed before the rename
    leaves it, named after what it was for)."""
    return f".tmp-{os.path.basename(path)}."


def _flush_folder(folder: str) -> None:
    """A rename lives in its folder: flushed, so that a power cut cannot undo it."""
    handle = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def rename_atomically(source: str, path: str) -> None:
    """Move the complete file ``source`` to ``path``, so that ``path`` is either as before or that whole file.

    Locally ``os.replace`` (both in one folder, as a file written beside its destination is), then the folder
    flushed; on gs:// Beam's rename: a server-side copy, which the service makes visible only once complete,
    then ``source`` deleted.
    """
    if _remote(path):
        FileSystems.rename([source], [path])
        return
    path = path.removeprefix("file://")
    os.replace(source.removeprefix("file://"), path)
    _flush_folder(os.path.dirname(os.path.abspath(path)))


def write_atomically(path: str, data: bytes) -> None:
    """Write ``data`` so that ``path`` is either absent, as before, or complete (``open_atomically``; on gs://
    a single object upload, which the service makes visible only when finished)."""
    with open_atomically(path) as handle:
        handle.write(data)


def json_bytes(payload: dict) -> bytes:
    """``payload`` as the JSON every release is written as (a ValueError or TypeError before anything is written)."""
    return (json.dumps(payload, indent=2) + "\n").encode()


def write_json(path: str, payload: dict) -> None:
    write_atomically(path, json_bytes(payload))


def table_to_csv(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pacsv.write_csv(table, sink)
    return sink.getvalue().to_pybytes()


def table_chunk_rows(row_bytes: int) -> int:
    """Rows a chunk of a table holds when each takes up to ``row_bytes`` bytes: ``TABLE_CHUNK_BYTES`` of them,
    at least one row."""
    return max(1, TABLE_CHUNK_BYTES // max(1, row_bytes))


def extension(path: str) -> str:
    """The extension of ``path``'s last part, in lower case and without its dot ("" if it has none): what the
    format a file is written in follows. Read from the name alone (local, file:// or gs://), not the file."""
    return posixpath.splitext(path)[1].removeprefix(".").lower()


def write_table_atomically(path: str, schema: pa.Schema, chunks: Iterable[pa.Table]) -> None:
    """The ``chunks`` of a table (each of ``schema``) written one at a time to ``path``, CSV, Avro or Parquet
    by its extension (any other extension: Parquet; a piece of CSV, Avro blocks or a Parquet row group each;
    one header), atomically (``open_atomically``): the whole table is never held at once, neither as arrays
    nor as bytes."""
    writer = {"csv": pacsv.CSVWriter, "avro": AvroWriter}.get(extension(path), pq.ParquetWriter)
    # The writer's close (Parquet's footer) leaves the handle open, for open_atomically to finish
    with open_atomically(path) as handle, writer(handle, schema) as table_writer:
        for chunk in chunks:
            table_writer.write_table(chunk)


def location(path: str) -> str:
    """Where a write to ``path`` lands, as one string: gs:// as written (an object's name is taken literally:
    gs://b//x and gs://b/x are two objects); a local path absolute, its folder's links resolved but not the
    file's own (a write replaces a link, it does not follow it)."""
    if path.startswith("gs://"):
        return path
    path = os.path.abspath(path)
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


def published_folder(output: str) -> str:
    """The folder a release is written to, as ``location`` gives it, with its separator: what is published with
    it. For gs://, the object's prefix up to its last "/" (the bucket itself for an object at its root)."""
    where = location(output)
    return where[: where.rindex("/") + 1] if output.startswith("gs://") else os.path.dirname(where) + os.sep


def inside(path: str, folder: str) -> bool:
    """Whether ``path`` (local or gs://) lies in ``folder`` (as ``published_folder`` gives it) or below it."""
    return location(path).startswith(folder)
