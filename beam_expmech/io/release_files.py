"""Where, and in which format, a release's files are written: the format follows the name's extension, so that
a file called sel.csv holds CSV, and a table's manifest lies beside it under the name's stem.

A result (a selection, quantiles, a halfspace) is written as its JSON document (.json), or as a table (.csv,
.parquet) with the rest of its document in a manifest beside it; a synthetic table as Parquet, CSV or Avro
(``writers.write_table_atomically``). The formats are read from the names alone, before any budget is charged.
"""

from __future__ import annotations

import posixpath

import pyarrow as pa
from apache_beam.io.filesystems import FileSystems

from beam_expmech.io import writers

RESULT_FORMATS = ("json", "csv", "parquet")
"""The formats a result is written in: its document, or its table and a manifest."""
TABLE_FORMATS = ("parquet", "csv", "avro")
"""The formats a synthetic table is written in."""


def result_format(path: str, *, name: str = "output") -> str:
    """The format of the result to be written at ``path``, one of ``RESULT_FORMATS``, from its extension (any
    case; local, file:// or gs://): ValueError in one line, saying ``name``, where it names none of them. The
    file system is not touched (called before the charge)."""
    return _format(path, RESULT_FORMATS, name)


def table_format(path: str, *, name: str = "output") -> str:
    """As ``result_format``, for a synthetic table: one of ``TABLE_FORMATS``."""
    return _format(path, TABLE_FORMATS, name)


def _format(path: str, formats: tuple[str, ...], name: str) -> str:
    found = writers.extension(path)
    if found not in formats:
        allowed = ", ".join(f".{fmt}" for fmt in formats[:-1]) + f" or .{formats[-1]}"
        # repr: a name holding a line break still gives one line
        raise ValueError(f"{name} must end in {allowed} (the release's format follows its name), got {path!r}")
    return found


def manifest_path(path: str) -> str:
    """Where the manifest of the release at ``path`` is written: beside it, its name's stem then
    ".manifest.json". Never ``path`` itself (it is longer than ``path`` less its extension)."""
    return posixpath.splitext(path)[0] + ".manifest.json"


def writes_manifest(path: str) -> bool:
    """Whether the release at ``path`` has a manifest beside it (at ``manifest_path(path)``): every release but a
    JSON document, which holds its public fields itself. From the name alone, as the formats are."""
    return writers.extension(path) != "json"


def write_result(path: str, *, document: dict, table: pa.Table, manifest: dict) -> None:
    """The release of a result at ``path``, in the format its name gives (``result_format``): .json the
    ``document`` (``writers.write_json``); .csv or .parquet the ``table``, then the ``manifest`` at
    ``manifest_path(path)``, each atomically. The manifest comes last, so that a manifest is only ever found
    beside the complete table it describes."""
    result_format(path)  # refused before anything is written
    if not writes_manifest(path):
        writers.write_json(path, document)
        return
    described = writers.json_bytes(manifest)  # first: a manifest that cannot be written stops it before the table
    retire_manifest(path)
    writers.write_table_atomically(path, table.schema, [table])
    writers.write_atomically(manifest_path(path), described)


def retire_manifest(path: str) -> None:
    """Remove the manifest an earlier release left beside ``path`` before its table is replaced: a table is never
    found beside a manifest that describes another (a write that fails between the two leaves the table alone,
    which describes nothing)."""
    beside = manifest_path(path)
    if FileSystems.exists(beside):
        FileSystems.delete([beside])


def result_table(result: dict) -> pa.Table:
    """The table of a result, as a release's first field holds it: ``{"selected": [label, ...]}`` (best first)
    as columns rank (1..k) and selected; ``{"quantiles": {"0.1": value, ...}}`` as quantile and value;
    ``{"weights": [...], "features": [...]}`` as feature and weight. ValueError for anything else."""
    keys = set(result)
    if keys == {"selected"}:
        return _selection(result["selected"])
    if keys == {"quantiles"}:
        quantiles = result["quantiles"]
        return pa.table(
            {
                "quantile": pa.array([float(q) for q in quantiles], pa.float64()),
                "value": pa.array(list(quantiles.values()), pa.float64()),
            }
        )
    if keys == {"weights", "features"}:
        return _halfspace(result["features"], result["weights"])
    raise ValueError(
        f"a result holds 'selected', 'quantiles', or 'weights' and 'features'; got {sorted(keys, key=str)}"
    )


def _selection(labels: list[str]) -> pa.Table:
    if not all(isinstance(label, str) for label in labels):
        raise ValueError("a selection's labels must be text")
    ranks = pa.array(range(1, len(labels) + 1), pa.int64())
    return pa.table({"rank": ranks, "selected": pa.array(labels, pa.string())})


def _halfspace(features: list[str], weights: list[float]) -> pa.Table:
    if len(features) != len(weights):
        raise ValueError(
            f"a halfspace needs a weight for each feature: {len(weights)} weights, {len(features)} features"
        )
    return pa.table({"feature": pa.array(features, pa.string()), "weight": pa.array(weights, pa.float64())})
