"""PROVISIONAL (replaced by the formats branch)."""

from __future__ import annotations

import io
import posixpath

import pyarrow as pa
import pyarrow.parquet as pq

from beam_expmech.io import writers

RESULT_FORMATS = ("json", "csv", "parquet")
TABLE_FORMATS = ("parquet", "csv", "avro")


def _format(path: str, allowed, name: str) -> str:
    ext = posixpath.splitext(path.removeprefix("file://"))[1].lower().lstrip(".")
    if ext not in allowed:
        raise ValueError(
            f"{name} must end in {', '.join('.' + a for a in allowed)} (the release's format follows "
            f"its name), got {path!r}"
        )
    return ext


def result_format(path: str, *, name: str = "output") -> str:
    return _format(path, RESULT_FORMATS, name)


def table_format(path: str, *, name: str = "output") -> str:
    return _format(path, TABLE_FORMATS, name)


def writes_manifest(path: str) -> bool:
    return not path.lower().endswith(".json")


def manifest_path(path: str) -> str:
    return posixpath.splitext(path)[0] + ".manifest.json"


def result_table(result: dict) -> pa.Table:
    if "selected" in result:
        return pa.table(
            {
                "rank": pa.array(range(1, len(result["selected"]) + 1), pa.int64()),
                "selected": pa.array(result["selected"], pa.string()),
            }
        )
    if "quantiles" in result:
        return pa.table(
            {
                "quantile": pa.array([float(q) for q in result["quantiles"]], pa.float64()),
                "value": pa.array(list(result["quantiles"].values()), pa.float64()),
            }
        )
    return pa.table(
        {"feature": pa.array(result["features"], pa.string()), "weight": pa.array(result["weights"], pa.float64())}
    )


def write_result(path: str, *, document: dict, table: pa.Table, manifest: dict) -> None:
    fmt = result_format(path)
    if fmt == "json":
        writers.write_json(path, document)
        return
    if fmt == "csv":
        writers.write_atomically(path, writers.table_to_csv(table))
    else:
        sink = io.BytesIO()
        pq.write_table(table, sink)
        writers.write_atomically(path, sink.getvalue())
    writers.write_json(manifest_path(path), manifest)
