"""Files in and out: formats, schema checks before any budget is spent, batch validation, atomic writes.

Everything here works on whole record batches (pyarrow) and on Beam's ``FileSystems``, so the
same code reads and writes local paths, globs and ``gs://`` objects. The Beam transforms that
use it live in ``beam_expmech.transforms.read``.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import posixpath
import re
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
    with _read_errors(path, fmt), FileSystems.open(path) as handle:
        if fmt == "parquet":
            return {field.name: field.type for field in pq.read_schema(handle)}
        if fmt == "avro":
            types = _avro_types(fastavro.reader(handle))
            return {name: pa.string() if kind is None else kind for name, kind in types.items()}  # None: as text
        return {name: pa.binary() for name in _csv_header(handle, path)[0]}


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
    """What column_types, one type per name, cannot tell of a file: a needed column
    named twice (which one is read would be up to the reader, and the job would fail after its charge),
    and an identity whose Avro type is not one primitive type (alone or with null). Such values are
    read as their text (see ``_avro_type``), which is not one form per value: a union's 0.0 and -0.0
    would be two units, its 5 and "5" one, and a fixed b"abc" in one file and bytes b"abc" in another two."""
    with _read_errors(path, fmt), FileSystems.open(path) as handle:
        if fmt == "csv":
            names, read_as_text = _csv_header(handle, path)[0], set()
        elif fmt == "parquet":
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
    with _read_errors(path, fmt), FileSystems.open(path) as handle:
        if fmt == "parquet":
            yield from pq.ParquetFile(handle).iter_batches(BATCH_ROWS, row_groups=[group], columns=columns)
        elif fmt == "csv":
            yield from _csv_batches(handle, path, columns)
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
def _read_errors(path: str, fmt: str) -> Iterator[None]:
    """Any failure to read ``path`` as an InputError built from the file name and the error's type:
    the text of a parser's error may quote a row."""
    try:
        yield
    except InputError:
        raise
    except Exception as error:
        raise InputError(f"{path}: unreadable {fmt} file ({type(error).__name__})") from None


# --- reading CSV: a line is at most one record, whatever its neighbours hold ----------------------

_CSV_CHUNK = 8 << 20  # bytes of whole lines parsed at a time
_HEADER_LIMIT = 1 << 20  # a "header" longer than this is no header
_LINE_END = re.compile(rb"\r\n|\n|\r")  # where pyarrow's parser ends a line


@dataclass(frozen=True)
class MalformedRows:
    """Rows a reader could not make into a record, in the dead letter's form. CSV lines that are not one
    record of the header's width: the needed columns empty (which field is which cannot be told) and a
    reason naming the file and the line. Rows of a PCollection (transforms.rows): their declared fields as
    text and a reason naming the column."""

    rows: pa.Table


def _csv_header(handle, path: str) -> tuple[list[str], bytes]:
    """The names in the first line (UTF-8, an optional byte-order mark), and the bytes read past it."""
    data = b""
    while True:
        end = _LINE_END.search(data)
        if end is not None and end.end() < len(data):  # a final \r may be the first half of \r\n
            break
        piece = handle.read(1 << 16)
        if not piece or len(data) > _HEADER_LIMIT:
            break
        data += piece
    header, rest = (data, b"") if end is None else (data[: end.start()], data[end.end() :])
    try:
        (names,) = csv.reader([header.decode("utf-8-sig")], strict=True)
    except (UnicodeDecodeError, csv.Error, ValueError):
        raise InputError(f"{path}: the first line is not a CSV header of UTF-8 text") from None
    return names, rest


def _line_chunks(handle, data: bytes) -> Iterator[bytes]:
    """``data`` and the rest of the file in pieces that end where a line ends (the last one may not)."""
    while True:
        piece = handle.read(_CSV_CHUNK)
        data += piece
        if not piece:
            if data:
                yield data
            return
        cut = max(data.rfind(b"\n"), data.rfind(b"\r", 0, len(data) - 1)) + 1
        if cut:
            yield data[:cut]
            data = data[cut:]


def _csv_batches(handle, path: str, columns: Sequence[str]) -> Iterator[pa.RecordBatch | MalformedRows]:
    """The needed columns as bytes (a wrong type or a bad encoding then costs a row, not the file),
    one record per line; lines that are not one record of the header's width are set aside.

    A quote that opens a value and never closes it would, in any CSV parser, swallow the lines after
    it: one person's row would remove other people's. So a line never joins the next one: where
    pyarrow's parse of a chunk has fewer records than lines, each line with a quote is parsed alone.
    """
    names, rest = _csv_header(handle, path)
    line = 2  # the header is line 1
    for chunk in _line_chunks(handle, rest):
        starts, stops, lines = _lines(chunk)
        numbers = line + np.flatnonzero(stops > starts)  # the file line of each non-empty line
        parsed = _parse_csv(chunk, names, columns)
        if parsed is None or parsed[0].num_rows + len(parsed[1]) != numbers.size:
            parsed = _parse_line_by_line(chunk, starts, stops, names, columns)
        table, invalid = parsed
        yield from table.combine_chunks().to_batches(BATCH_ROWS)
        if invalid:
            reasons = [f"malformed CSV row: {problem} (row {numbers[i]} of {path})" for i, problem in invalid]
            empty = pa.nulls(len(reasons), pa.string())
            yield MalformedRows(pa.table([empty] * len(columns) + [pa.array(reasons, pa.string())],
                                         names=[*columns, REASON]))  # fmt: skip
        line += lines


def _lines(chunk: bytes) -> tuple[np.ndarray, np.ndarray, int]:
    """(start, stop) of every line of ``chunk`` without its line end, and how many line ends it holds."""
    b = np.frombuffer(chunk, np.uint8)
    lf, cr = b == 10, b == 13
    ends = np.flatnonzero(lf | (cr & ~np.append(lf[1:], False)))  # the \r of \r\n is not an end of its own
    starts = np.concatenate([[0], ends + 1])
    stops = np.concatenate([ends, [b.size]])
    stops[:-1] -= lf[ends] & (ends > 0) & cr[np.maximum(ends - 1, 0)]  # the \r before a \n
    return starts, np.maximum(stops, starts), ends.size


def _parse_csv(data: bytes, names: list[str], columns: Sequence[str]):
    """pyarrow's parse of ``data`` as (table of the needed columns, [(non-empty line index, problem)] for
    the records of the wrong width), or None where pyarrow cannot parse it (it decodes a malformed
    row to report it: one that is not UTF-8 text stops it)."""
    invalid = _InvalidRows()
    try:
        table = pacsv.read_csv(
            pa.BufferReader(data),
            read_options=pacsv.ReadOptions(column_names=names, use_threads=False, block_size=len(data) + (1 << 20)),
            parse_options=pacsv.ParseOptions(newlines_in_values=True, invalid_row_handler=invalid),
            convert_options=pacsv.ConvertOptions(
                include_columns=list(columns),
                column_types={c: pa.binary() for c in columns},
                strings_can_be_null=True,
                null_values=[""],  # "NA" or "null" may be someone's value; only an empty field is missing
            ),
        )
    except (pa.ArrowInvalid, UnicodeDecodeError):
        return None
    return table, invalid.rows


def _parse_line_by_line(chunk: bytes, starts: np.ndarray, stops: np.ndarray, names, columns):
    """The lines without a quote together (none of their values can run over lines), each line with a
    quote alone, and each line alone where pyarrow cannot parse them together."""
    quoted = np.zeros(starts.size, bool)
    quotes = np.flatnonzero(np.frombuffer(chunk, np.uint8) == ord('"'))
    quoted[np.searchsorted(starts, quotes, side="right") - 1] = True
    nonempty = np.flatnonzero(stops > starts)
    plain = [i for i in nonempty.tolist() if not quoted[i]]
    alone = [[i] for i in nonempty.tolist() if quoted[i]]
    together = _parse_csv(b"\n".join(chunk[starts[i] : stops[i]] for i in plain), names, columns)
    groups = [plain] if together is not None else [[i] for i in plain]
    tables, invalid, rank = [], [], {i: r for r, i in enumerate(nonempty.tolist())}
    for group in sorted(groups + alone):
        parsed = together if group is plain and together is not None else None
        if parsed is None:
            parsed = _parse_csv(chunk[starts[group[0]] : stops[group[0]]], names, columns)
        if parsed is None:
            invalid.append((rank[group[0]], "not one record (a row of the wrong width that is not UTF-8 text)"))
            continue
        tables.append(parsed[0])
        invalid.extend((rank[group[i]], problem) for i, problem in parsed[1])
    schema = pa.schema([(c, pa.binary()) for c in columns])
    return pa.concat_tables([schema.empty_table(), *tables]), sorted(invalid)


class _InvalidRows:
    """pyarrow's handler for a record of the wrong width: skip it, keeping its position and field counts
    (never its text: pyarrow's own error would quote it)."""

    def __init__(self):
        self.rows: list[tuple[int, str]] = []

    def __call__(self, row: pacsv.InvalidRow) -> str:
        self.rows.append((row.number - 1, f"expected {row.expected_columns} fields, got {row.actual_columns}"))
        return "skip"


class _UndecodableRowHook:
    """pyarrow decodes a malformed row's text before it calls the handler; a row that is not UTF-8
    fails there, and Python would print that failure (quoting the bad byte) as it stops the parse.
    This hook drops those reports (the row goes to the dead letter) and passes every other one on."""

    def __init__(self, previous):
        self.previous = previous

    def __call__(self, unraisable) -> None:
        if not isinstance(unraisable.object, _InvalidRows):
            self.previous(unraisable)


if not isinstance(sys.unraisablehook, _UndecodableRowHook):
    sys.unraisablehook = _UndecodableRowHook(sys.unraisablehook)


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
        if pa.types.is_boolean(column.type):
            column = column.cast(pa.int64())  # fill_null(0) cannot fill a boolean column
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
