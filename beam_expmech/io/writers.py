"""Writing outputs atomically: a crash never leaves a half file that looks complete."""

from __future__ import annotations

import json
import os
import tempfile

import pyarrow as pa
import pyarrow.csv as pacsv
from apache_beam.io.filesystems import FileSystems


def write_atomically(path: str, data: bytes) -> None:
    """Write ``data`` so that ``path`` is either absent, as before, or complete.

    Locally: a temporary file in the same folder, flushed, renamed over ``path``, and the
    folder flushed too (a rename lives in the folder: without that, a power cut can undo it,
    and a ledger reservation made before data was read would vanish). On gs:// a single
    object upload, which the service makes visible only when finished.
    """
    if "://" in path and not path.startswith("file://"):
        with FileSystems.create(path) as handle:
            handle.write(data)
        return
    path = path.removeprefix("file://")
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=folder, prefix=".tmp-", delete=False) as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(handle.name, path)
    folder_handle = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(folder_handle)
    finally:
        os.close(folder_handle)


def write_json(path: str, payload: dict) -> None:
    write_atomically(path, (json.dumps(payload, indent=2) + "\n").encode())


def table_to_csv(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pacsv.write_csv(table, sink)
    return sink.getvalue().to_pybytes()
