"""Files in and out: formats, schema checks before any budget is spent, batch validation, atomic writes.

Everything here works on whole record batches (pyarrow) and on Beam's ``FileSystems``, so the
same code reads and writes local paths, globs and ``gs://`` objects. The Beam transforms that
use it live in ``beam_expmech.transforms.read``.
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

FORMATS = ("parquet", "csv", "avro")
BATCH_ROWS = 65_536
# A privacy unit's value (its canonical form, see canonical_identity) may be this long at most; a longer
# one goes to the dead letter. Public, and far above any real identifier: it caps the memory one unit
# costs the bounding step (its hash takes tens of times a unit's length), so one huge field cannot crash
# a job after its charge.
MAX_IDENTITY_BYTES = 1024
REASON = "reason"
_INTEGER = r"^\s*[+-]?[0-9]+\s*$"
_NUMBER = r"^\s*[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\s*$"


class InputError(ValueError):
    """The input cannot be used at all (no file, unreadable file, missing column): stop before spending."""


@dataclass(frozen=True)
class ColumnSpec:
    """A column the job reads, what its values must be, and (optionally) their domain.

    kind: "string", "int", "float", "label", or "any" (an identity such as a privacy unit: only nulls
    are rejected, and each value takes its ``canonical_identity``).
    ``domain`` (ints only): values must lie in [lo, hi).
    ``labels`` (labels only): the values a column may hold, each read as its position (an int code).
    """

    name: str
    kind: str
    domain: tuple[int, int] | None = None
    labels: tuple[str, ...] | None = None

    def __post_init__(self):
        if self.kind not in ("string", "int", "float", "label", "any"):
            raise ValueError(f"kind must be string, int, float, label or any, got {self.kind!r}")
        if (self.kind == "label") != (self.labels is not None):
            raise ValueError("labels go with kind 'label', and only with it")


# --- finding files and their formats -------------------------------------------------------------


def match_files(pattern: str) -> list[str]:
    """The files a path or glob names (local or gs://), sorted; InputError if there are none."""
    try:
        matched = FileSystems.match([pattern])[0].metadata_list
    except Exception as error:  # Beam raises BeamIOError and others; the user needs one line
        raise InputError(f"{pattern}: cannot list files ({first_line(error)})") from None
    files = sorted(m.path for m in matched if not m.path.endswith("/"))
    if not files:
        raise InputError(f"{pattern}: no file matches")
    return files


def file_format(path: str, declared: str | None = None) -> str:
    """The declared format, or the one the extension names (.parquet/.pq, .csv, .avro)."""
    if declared is not None:
        if declared not in FORMATS:
            raise InputError(f"unknown format {declared!r}; use one of {', '.join(FORMATS)}")
        return declared
    extension = posixpath.splitext(path.lower().removesuffix(".gz"))[1]
    by_extension = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".avro": "avro"}
    if extension not in by_extension:
        raise InputError(f"{path}: cannot tell the format from the extension; pass --format")
    return by_extension[extension]


def column_types(path: str, fmt: str) -> dict[str, pa.DataType]:
    """Each column of a file and the type it is read as, from its footer, header or schema (not its
    rows): Parquet's own, bytes for every CSV column, the declared type for Avro (see ``_avro_type``)."""
    set_aside = _SetAside(path)
    with _read_errors(path, fmt, set_aside), FileSystems.open(path) as handle:
        if fmt == "parquet":
            return {field.name: field.type for field in pq.read_schema(handle)}
        if fmt == "avro":
            types = _avro_types(fastavro.reader(handle))
            return {name: pa.string() if kind is None else kind for name, kind in types.items()}  # None: as text
        return {name: pa.binary() for name in _open_csv(handle, set_aside, block_size=1 << 20).schema.names}


def check_columns(
    files: Sequence[str], fmt: str | None, columns: Sequence[str], identities: Sequence[str] = ()
) -> None:
    """InputError naming the first file that lacks a needed column, cannot be read, names a needed
    column twice, types a needed column otherwise than the files before it (read as 5 in one file and
    as "5" or 5.0 in another, one privacy unit would be two), or declares one of the ``identities``
    (privacy units) in an Avro type that is read as its text (see ``_check_fields``)."""
    first: dict[str, tuple[str, str]] = {}  # column -> (the first file that types it, its family)
    for path in files:
        path_format = file_format(path, fmt)
        types = column_types(path, path_format)
        missing = [c for c in columns if c not in types]
        if missing:
            raise InputError(f"{path}: missing column {missing[0]!r}")  # not the others: a CSV header may be a row
        _check_fields(path, path_format, columns, identities)
        for column in columns:
            family = type_family(types[column])
            if family is None:  # only nulls: every row will be rejected, whatever the other files hold
                continue
            where, expected = first.setdefault(column, (path, family))
            if family != expected:
                raise InputError(f"{path}: column {column!r} holds {family}, but {expected} in {where}")


def _check_fields(path: str, fmt: str, columns: Sequence[str], identities: Sequence[str]) -> None:
    """What column_types, one type per name, cannot tell of a Parquet or Avro file: a needed column
    named twice (which one is read would be up to the reader, and the job would fail after its charge),
    and an identity whose Avro type is not one primitive type (alone or with null). Such values are
    read as their text (see ``_avro_type``), which is not one form per value: a union's 0.0 and -0.0
    would be two units, its 5 and "5" one, and a fixed b"abc" in one file and bytes b"abc" in another two."""
    if fmt == "csv":
        return  # a CSV header is the CSV reader's to check
    with _read_errors(path, fmt, _SetAside(path)), FileSystems.open(path) as handle:
        if fmt == "parquet":
            names, read_as_text = pq.read_schema(handle).names, set()
        else:
            reader = fastavro.reader(handle)
            names = [field["name"] for field in reader.writer_schema["fields"]]
            read_as_text = {name for name, kind in _avro_types(reader).items() if kind is None}
    twice = [c for c in columns if names.count(c) > 1]
    if twice:
        raise InputError(f"{path}: column {twice[0]!r} appears more than once")
    inexact = [c for c in identities if c in read_as_text]
    if inexact:
        raise InputError(f"{path}: column {inexact[0]!r} identifies privacy units, so its Avro type must be one "
                         "primitive type, alone or with null (not a union of several, a fixed, logical or nested "
                         "type)")  # fmt: skip


def type_family(kind: pa.DataType) -> str | None:
    """What a column's values are, as far as reading them goes: types of one family (int32 and int64,
    string and bytes) give every value the same canonical form. None for a column of nulls only."""
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    if pa.types.is_null(kind):
        return None
    if pa.types.is_integer(kind):
        return "integers"
    if pa.types.is_floating(kind):
        return "floating-point numbers"
    if pa.types.is_boolean(kind):
        return "booleans"
    if _is_text(kind):
        return "text"
    return f"values of type {kind}"


_TEXT_TYPES = (pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view, pa.types.is_binary,
               pa.types.is_large_binary, pa.types.is_binary_view)  # fmt: skip


def _is_text(kind: pa.DataType) -> bool:
    return any(check(kind) for check in _TEXT_TYPES)


# --- reading -------------------------------------------------------------------------------------


def splits(path: str, fmt: str) -> list[tuple[str, str, int | None]]:
    """Units of parallel reading: one per Parquet row group, one per CSV or Avro file."""
    if fmt == "parquet":
        with FileSystems.open(path) as handle:
            groups = pq.ParquetFile(handle).metadata.num_row_groups
        return [(path, fmt, group) for group in range(groups)]
    return [(path, fmt, None)]


def read_split(split: tuple[str, str, int | None], columns: Sequence[str]) -> Iterator[pa.RecordBatch | MalformedRows]:
    """The record batches of one split, only the needed columns, streamed (never the whole file);
    for CSV also the rows that could not be split into fields, set aside as ``MalformedRows``.

    A file that cannot be read is an InputError naming the file and the error's type only.
    """
    path, fmt, group = split
    columns = list(columns)
    set_aside = _SetAside(path)
    with _read_errors(path, fmt, set_aside), FileSystems.open(path) as handle:
        if fmt == "parquet":
            yield from pq.ParquetFile(handle).iter_batches(BATCH_ROWS, row_groups=[group], columns=columns)
        elif fmt == "csv":
            # Everything as bytes: a wrong type or a bad encoding then costs a row (dead letter), not the file.
            for batch in _open_csv(handle, set_aside, columns):
                yield batch
                yield from set_aside.rows(columns)
            yield from set_aside.rows(columns)  # those after the last batch
        else:
            # fastavro decodes a dict per row: Avro is the one format read row by row.
            reader = fastavro.reader(handle)
            types = _avro_types(reader)
            rows = []
            for record in reader:
                rows.append({c: record.get(c) for c in columns})
                if len(rows) == BATCH_ROWS:
                    yield _avro_batch(rows, columns, types)
                    rows = []
            if rows:
                yield _avro_batch(rows, columns, types)


@contextlib.contextmanager
def _read_errors(path: str, fmt: str, set_aside: _SetAside) -> Iterator[None]:
    """Any failure to read ``path`` as an InputError built from the file name and the error's type:
    the text of a parser's error may quote a row."""
    try:
        yield
    except InputError:
        raise
    except Exception as error:
        what = "a malformed row that is not UTF-8 text" if set_aside.undecodable else type(error).__name__
        raise InputError(f"{path}: unreadable {fmt} file ({what})") from None


# --- reading CSV: rows with the wrong number of fields are set aside, never quoted ------------------


@dataclass(frozen=True)
class MalformedRows:
    """CSV rows with the wrong number of fields, in the dead letter's form: the needed columns empty
    (which field is which cannot be told) and a reason naming the file and the row."""

    rows: pa.Table


class _SetAside:
    """pyarrow's handler for a CSV row with the wrong number of fields: skip it, keeping its field
    counts and row number (never its text: pyarrow's own error would quote it)."""

    def __init__(self, path: str):
        self.path, self.reasons, self.undecodable = path, [], False

    def __call__(self, row: pacsv.InvalidRow) -> str:
        where = "a row" if row.number is None else f"row {row.number}"
        counts = f"expected {row.expected_columns} fields, got {row.actual_columns}"
        self.reasons.append(f"malformed CSV row: {counts} ({where} of {self.path})")
        return "skip"

    def rows(self, columns: Sequence[str]) -> Iterator[MalformedRows]:
        """The rows set aside since the last call, if any."""
        if self.reasons:
            empty = pa.nulls(len(self.reasons), pa.string())
            yield MalformedRows(pa.table([empty] * len(columns) + [pa.array(self.reasons, pa.string())],
                                         names=[*columns, REASON]))  # fmt: skip
            self.reasons = []


def _open_csv(handle, set_aside: _SetAside, columns: Sequence[str] | None = None, block_size: int = 8 << 20):
    """A streaming CSV reader (the needed ``columns`` as bytes) that sets malformed rows aside."""
    if not isinstance(sys.unraisablehook, _UndecodableRowHook):
        sys.unraisablehook = _UndecodableRowHook(sys.unraisablehook)
    convert = pacsv.ConvertOptions()
    if columns is not None:
        convert = pacsv.ConvertOptions(
            include_columns=columns, column_types={c: pa.binary() for c in columns}, strings_can_be_null=True
        )
    return pacsv.open_csv(
        handle,
        read_options=pacsv.ReadOptions(block_size=block_size, use_threads=False),  # one thread: row numbers known
        parse_options=pacsv.ParseOptions(newlines_in_values=True, invalid_row_handler=set_aside),
        convert_options=convert,
    )


class _UndecodableRowHook:
    """pyarrow decodes a malformed row's text before it calls the handler; a row that is not UTF-8
    fails there, and Python would print that failure (quoting the bad byte) before the read stops.
    This hook notes it on the handler instead, and passes every other report on unchanged."""

    def __init__(self, previous):
        self.previous = previous

    def __call__(self, unraisable) -> None:
        if isinstance(unraisable.object, _SetAside):
            unraisable.object.undecodable = True
        else:
            self.previous(unraisable)


# --- reading Avro: each column in the type its schema declares, never one inferred per batch --------

# Avro's primitive types, and the Arrow type each is read as.
_AVRO_TYPES = {
    "boolean": pa.bool_(),
    "int": pa.int64(),
    "long": pa.int64(),
    "float": pa.float64(),
    "double": pa.float64(),
    "string": pa.string(),
    "bytes": pa.binary(),
    "enum": pa.string(),
}


def _avro_types(reader: fastavro.reader) -> dict[str, pa.DataType | None]:
    return {field["name"]: _avro_type(field["type"]) for field in reader.writer_schema["fields"]}


def _avro_type(declared: str | dict | list) -> pa.DataType | None:
    """The Arrow type of an Avro field's values, from its declared type: a primitive (or enum), alone
    or with null. None for anything else (a union of several types, a logical, named or nested type):
    each value is then read as its text, so that it reads the same whatever the rows beside it."""
    branches = [b for b in (declared if isinstance(declared, list) else [declared]) if b != "null"]
    if len(branches) != 1:
        return None
    branch = branches[0]
    if isinstance(branch, dict):
        branch = None if "logicalType" in branch else branch.get("type")
    return _AVRO_TYPES.get(branch) if isinstance(branch, str) else None


def _avro_batch(rows: list[dict], columns: Sequence[str], types: dict[str, pa.DataType | None]) -> pa.RecordBatch:
    arrays = []
    for c in columns:
        values = [row[c] for row in rows]
        if types[c] is None:
            arrays.append(pa.array([None if v is None else str(v) for v in values], pa.string()))
        else:
            arrays.append(pa.array(values, types[c]))
    return pa.RecordBatch.from_arrays(arrays, names=list(columns))


# --- validating ----------------------------------------------------------------------------------


def validate(batch: pa.RecordBatch, specs: Sequence[ColumnSpec]) -> tuple[pa.RecordBatch, pa.Table | None]:
    """(good rows with each column in its canonical type, bad rows as text with a reason column).

    A row is bad if a needed column is null, of the wrong type, NaN or infinite, or outside its
    declared domain. The first reason found is the one recorded.
    """
    reason = np.full(batch.num_rows, -1, dtype=np.int32)  # index into texts, -1 for a good row
    texts, clean = [], []
    for spec in specs:
        values, problems = _convert(batch.column(spec.name), spec)
        for problem, mask in problems:
            reason[mask & (reason < 0)] = len(texts)
            texts.append(f"{spec.name}: {problem}")
        clean.append(values)
    bad = reason >= 0
    names = [s.name for s in specs]
    if not bad.any():
        return pa.RecordBatch.from_arrays(clean, names=names), None
    good_rows = pa.array(~bad)
    good = pa.RecordBatch.from_arrays([c.filter(good_rows) for c in clean], names=names)
    bad_rows = pa.array(bad)
    rejected = {s.name: _as_text(batch.column(s.name).filter(bad_rows)) for s in specs}
    rejected[REASON] = pa.array(texts, pa.string()).take(pa.array(reason[bad]))
    return good, pa.table(rejected)


def _convert(column: pa.Array, spec: ColumnSpec) -> tuple[pa.Array, list[tuple[str, np.ndarray]]]:
    """The column in the spec's type (bad slots filled with a placeholder), and (problem, mask) pairs."""
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    problems = [("null", _mask(column.is_null()))]
    if pa.types.is_uint64(column.type) and spec.kind in ("int", "any"):
        # int64 is the one integer form: beyond it a value would wrap onto another (2^64 - 1 onto -1).
        problems.append(("out of the 64-bit range", _mask(pc.greater(column, pa.scalar(2**63 - 1, column.type)))))
    if spec.kind == "any":  # an identity
        identity = canonical_identity(column)
        if pa.types.is_large_binary(identity.type):
            too_long = _mask(pc.greater(pc.binary_length(identity), MAX_IDENTITY_BYTES))
            problems.append((f"longer than {MAX_IDENTITY_BYTES} bytes", too_long))
        return identity, problems
    if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
        column, invalid = _decoded(column)
        problems.append(("not UTF-8 text", invalid))
    if spec.kind == "string":
        return _as_text(column), problems
    if spec.kind == "label":
        codes = pc.index_in(_as_text(column), value_set=pa.array(spec.labels, pa.string()))
        problems.append(
            (f"not one of the domain's {len(spec.labels)} labels", _mask(codes.is_null()) & ~problems[0][1])
        )
        return codes.fill_null(0).cast(pa.int64()), problems
    target = pa.int64() if spec.kind == "int" else pa.float64()
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        parses = _mask(pc.match_substring_regex(column, _INTEGER if spec.kind == "int" else _NUMBER))
        problems.append((f"not {'an integer' if spec.kind == 'int' else 'a number'}", ~parses & ~problems[0][1]))
        column = pc.if_else(pa.array(parses), pc.utf8_trim_whitespace(column), "0")
        values, overflow = _parse(column, target)
        problems.append(("out of the 64-bit range", overflow))
    elif pa.types.is_integer(column.type) or pa.types.is_floating(column.type) or pa.types.is_boolean(column.type):
        values = column.fill_null(0).to_numpy(zero_copy_only=False)
        if spec.kind == "int" and values.dtype.kind == "f":
            integral = np.isfinite(values) & (np.floor(values) == values) & (np.abs(values) < 2.0**63)
            problems.append(("not an integer", ~integral))
            values = np.where(integral, values, 0)
        values = pa.array(values.astype(np.int64 if spec.kind == "int" else np.float64, copy=False))
    else:
        problems.append((f"wrong type {column.type}", np.ones(len(column), bool)))
        values = pa.array(np.zeros(len(column)), target)
    array = values.to_numpy(zero_copy_only=False)
    if spec.kind == "float":
        problems.append(("NaN or infinite", ~np.isfinite(array)))
    if spec.domain is not None:
        lo, hi = spec.domain
        problems.append((f"outside the domain [{lo}, {hi})", (array < lo) | (array >= hi)))
    return values, problems


def canonical_identity(column: pa.Array) -> pa.Array:
    """One form per value, whatever the batch or file it came from, for values that identify (privacy
    units): integers and booleans as int64, floats as float64 with -0.0 as 0.0 and a single NaN, text
    and bytes as their bytes, anything else (a date, a decimal, a list) as the bytes of its text.

    Within one type family (see ``type_family``) equal values, and only they, have equal forms; but
    for uint64 values beyond int64, which wrap here and which validation sends to the dead letter.
    """
    kind = column.type
    if pa.types.is_dictionary(kind):
        return canonical_identity(column.dictionary_decode())
    if pa.types.is_integer(kind) or pa.types.is_boolean(kind):
        return pc.cast(column, pa.int64(), safe=False)  # uint64 beyond 2^63 wraps (see above)
    if pa.types.is_floating(kind):
        values = pc.add(pc.cast(column, pa.float64()), 0.0)  # -0.0 + 0.0 is 0.0
        return pc.if_else(pc.is_nan(values), pa.scalar(float("nan")), values)  # NaNs differ in their bits
    if not _is_text(kind):
        column = _as_text(column)
    return pc.cast(column, pa.large_binary())


def _decoded(column: pa.Array, *, escape: bool = False) -> tuple[pa.Array, np.ndarray]:
    """Bytes as UTF-8 text, and which rows were not valid UTF-8: null, or with ``escape`` their
    bad bytes as \\xNN (for the dead letter)."""
    try:
        return pc.cast(column, pa.string()), np.zeros(len(column), bool)
    except pa.ArrowInvalid:  # only batches holding a bad byte get here, row by row
        texts, invalid = [], np.zeros(len(column), bool)
        for i, value in enumerate(column.to_pylist()):
            try:
                texts.append(None if value is None else value.decode("utf-8"))
            except UnicodeDecodeError:
                texts.append(value.decode("utf-8", "backslashreplace") if escape else None)
                invalid[i] = True
        return pa.array(texts, pa.string()), invalid


def _parse(column: pa.Array, target: pa.DataType) -> tuple[pa.Array, np.ndarray]:
    """Cast text that matched the number pattern; values beyond int64 are flagged, not fatal."""
    try:
        return pc.cast(column, target), np.zeros(len(column), bool)
    except pa.ArrowInvalid:
        # Only batches holding an integer of 20 digits or more get here, row by row.
        values = [int(t) for t in column.to_pylist()]
        overflow = np.array([not -(2**63) <= v < 2**63 for v in values])
        return pa.array([0 if o else v for v, o in zip(values, overflow, strict=True)], target), overflow


def _as_text(array: pa.Array) -> pa.Array:
    if array.type == pa.string():
        return array
    if pa.types.is_binary(array.type) or pa.types.is_large_binary(array.type):
        return _decoded(array, escape=True)[0]
    try:
        return pc.cast(array, pa.string(), safe=False)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):  # nested types: Python's repr, row by row
        return pa.array([None if v is None else str(v) for v in array.to_pylist()], pa.string())


def _mask(array: pa.Array) -> np.ndarray:
    return array.fill_null(False).to_numpy(zero_copy_only=False).astype(bool, copy=False)


# --- writing -------------------------------------------------------------------------------------


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


def read_json(path: str) -> dict:
    return json.loads(read_text(path))


def read_text(path: str) -> str:
    """A small text file, local or gs:// (a UTF-8 byte-order mark is dropped)."""
    with FileSystems.open(path) as handle:
        return handle.read().decode("utf-8-sig")


def table_to_csv(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pacsv.write_csv(table, sink)
    return sink.getvalue().to_pybytes()


def first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:300]


def describe_error(error: BaseException) -> str:
    """What a message may say about ``error``: the first line of the InputError behind it (ours: file
    names, row numbers and column names only), else its type alone, since the text of any other error
    (a parser's, a runner's) may quote data."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, InputError):
            return first_line(cause)
        cause = cause.__cause__ or cause.__context__
    return type(error).__name__
