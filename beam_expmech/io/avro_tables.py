"""Arrow tables written as an Avro object container file, a block of rows at a time, each block encoded from
the table's columns with numpy: no Python object per row or per value (fastavro's own writer takes a dict a
row, about a microsecond a value; a synthetic table can hold tens of millions of rows).

The file's header (schema, codec, sync marker) is fastavro's; each block is the Avro binary encoding of its
rows (https://avro.apache.org/docs/current/specification/): a long as its zigzag varint, a double as its 8
bytes little-endian, a string as its length (a long) then its UTF-8 bytes; a row its fields in order.
"""

from __future__ import annotations

import os
import re
from typing import BinaryIO

import fastavro
import numpy as np
import pyarrow as pa

AVRO_TYPES = {pa.int64(): "long", pa.float64(): "double", pa.string(): "string"}
"""The column types written, and the Avro type each is written as."""
BLOCK_BYTES = 2**19
"""The Arrow bytes of the rows a block holds (about: rows are counted from the chunk's mean row). The arrays
that encode a block take up to about 30 times as much (a long's 8 bytes may take 10, each placed by two 8-byte
positions): 15 MiB, inside what ``writers.TABLE_WRITER_BYTES`` allows beside a chunk."""
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # Avro's names: what every reader accepts
_SYNC_BYTES = 16


def avro_schema(schema: pa.Schema) -> dict:
    """The Avro record schema of a table of ``schema``: int64 as "long", float64 as "double", string as
    "string", no nulls. ValueError for any other column type, a column name Avro does not allow, or a name
    given twice: checked from the schema alone, so that a caller can refuse a table before it is drawn."""
    for field in schema:
        if field.type not in AVRO_TYPES:
            raise ValueError(f"column {field.name!r} is {field.type}: Avro is written from int64, float64, string")
        if not _NAME.fullmatch(field.name):
            raise ValueError(f"column {field.name!r} is not an Avro name (letters, digits, _; not a digit first)")
    if len(set(schema.names)) != len(schema.names):
        raise ValueError("a column is named twice: an Avro record's fields have one name each")
    fields = [{"name": field.name, "type": AVRO_TYPES[field.type]} for field in schema]
    return {"type": "record", "name": "Row", "fields": fields}


class AvroWriter:
    """Writes tables of ``schema`` to ``handle`` as one Avro file, as ``pyarrow.parquet.ParquetWriter`` does
    Parquet: the header when made, blocks on each ``write_table``; its close leaves ``handle`` open."""

    def __init__(self, handle: BinaryIO, schema: pa.Schema) -> None:
        parsed = fastavro.parse_schema(avro_schema(schema))
        self._handle = handle
        self._schema = schema
        self._sync = os.urandom(_SYNC_BYTES)  # as fastavro draws it: what readers resynchronise on
        fastavro.writer(handle, parsed, [], sync_marker=self._sync)  # no rows: the header alone

    def write_table(self, table: pa.Table) -> None:
        if not table.schema.equals(self._schema):
            raise ValueError("the table's schema is not the one the Avro file was begun with")
        rows = max(1, BLOCK_BYTES * table.num_rows // max(1, table.nbytes))
        for batch in table.to_batches(max_chunksize=rows):
            if batch.num_rows:  # an empty block is allowed, but says nothing
                self._handle.write(_block(batch, self._sync))

    def close(self) -> None:
        """Nothing to finish: each block is whole once written (Avro has no footer); ``handle`` stays open."""

    def __enter__(self) -> AvroWriter:
        return self

    def __exit__(self, *_) -> None:
        self.close()


def _block(batch: pa.RecordBatch, sync: bytes) -> bytes:
    """One block of the container: its row count, its size, its rows, the file's sync marker."""
    parts = [
        part for name, column in zip(batch.schema.names, batch.columns, strict=True) for part in _parts(name, column)
    ]
    body = _interleave(parts, batch.num_rows)
    _, head = _varints(np.array([batch.num_rows, len(body)]))
    return head.tobytes() + body + sync


def _parts(name: str, column: pa.Array) -> list[tuple[np.ndarray, np.ndarray]]:
    """A column's encoding, as the parts each of its values is written in (a string: its length, then its
    bytes), each part as (every value's byte count, their bytes one after the other)."""
    if column.null_count:
        raise ValueError(f"column {name!r} holds a null, which its Avro type cannot")
    if column.type == pa.float64():
        values = column.to_numpy().astype("<f8", copy=False)
        return [(np.full(len(values), 8), values.view(np.uint8))]
    if column.type == pa.string():
        _, offsets, data = column.buffers()
        ends = np.frombuffer(offsets, np.int32)[column.offset : column.offset + len(column) + 1]
        sizes = np.diff(ends).astype(np.int64)
        text = np.frombuffer(data, np.uint8)[ends[0] : ends[-1]] if data is not None else np.empty(0, np.uint8)
        return [_varints(sizes), (sizes, text)]
    return [_varints(column.to_numpy())]


def _varints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Avro's longs: each value's zigzag varint (7 bits a byte, low bits first, the top bit set on all but the
    last), as (every value's byte count, their bytes one after the other)."""
    values = values.astype(np.int64, copy=False)
    zigzag = ((values << 1) ^ (values >> 63)).view(np.uint64)  # 0, -1, 1, -2 ... as 0, 1, 2, 3 ...
    sizes = np.ones(len(values), np.int64)
    groups = np.empty((len(values), 10), np.uint8)  # 64 bits take 10 groups of 7
    for k in range(10):
        if k:
            sizes += zigzag >= np.uint64(1 << 7 * k)
        groups[:, k] = (zigzag >> np.uint64(7 * k)).astype(np.uint8) & 0x7F
    groups[:, :9] |= (np.arange(9) < sizes[:, None] - 1).astype(np.uint8) << 7
    return sizes, groups[np.arange(10) < sizes[:, None]]


def _interleave(parts: list[tuple[np.ndarray, np.ndarray]], rows: int) -> bytes:
    """The bytes of ``parts`` in row order: row 0's value of each part in turn, then row 1's, and so on."""
    if not parts:
        return b""
    sizes = np.stack([size for size, _ in parts], axis=1)
    firsts = (np.cumsum(sizes, axis=None) - sizes.ravel()).reshape(rows, len(parts))  # each value's first byte
    body = np.empty(int(sizes.sum()), np.uint8)
    for j, (size, data) in enumerate(parts):
        within = np.cumsum(size) - size  # where each value starts in data
        body[np.repeat(firsts[:, j] - within, size) + np.arange(len(data))] = data
    return body.tobytes()
