"""Test data for the Beam tests: tables written by the tests themselves, in every input format."""

from __future__ import annotations

import csv
from pathlib import Path

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def purchases(rows: int, *, users: int = 500, items: int = 50, seed: int = 0) -> pa.Table:
    """(user_id, item, amount): Zipf-like items, so the top items are clear at moderate epsilon."""
    rng = np.random.default_rng(seed)
    item = np.minimum(rng.zipf(1.4, rows) - 1, items - 1)
    return pa.table(
        {
            "user_id": rng.integers(0, users, rows),
            "item": item.astype(np.int64),
            "amount": np.round(rng.gamma(2.0, 10.0, rows), 2),
        }
    )


def pages_zeroed(parquet: bytes) -> bytes:
    """The Parquet file with every data page zeroed and its footer intact: its schema reads, its rows do not."""
    footer = int.from_bytes(parquet[-8:-4], "little") + 8
    return parquet[:4] + bytes(len(parquet) - 4 - footer) + parquet[-footer:]


def write(table: pa.Table, path: Path, fmt: str) -> Path:
    if fmt == "parquet":
        pq.write_table(table, path, row_group_size=max(1, table.num_rows // 3))
    elif fmt == "csv":
        with open(path, "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(table.column_names)
            writer.writerows(zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True))
    else:
        schema = {
            "type": "record",
            "name": "Row",
            "fields": [
                {"name": c, "type": ["null", _avro_type(table.schema.field(c).type)]} for c in table.column_names
            ],
        }
        with open(path, "wb") as handle:
            fastavro.writer(handle, schema, table.to_pylist())
    return path


def _avro_type(arrow_type: pa.DataType) -> str:
    if pa.types.is_integer(arrow_type):
        return "long"
    if pa.types.is_floating(arrow_type):
        return "double"
    return "string"
