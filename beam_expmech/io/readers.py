"""Reading input files: finding them, their formats, schema checks before any budget is spent, and
their record batches, streamed one split at a time (a Parquet row group, a CSV or Avro file).

Everything here works on Beam's ``FileSystems``, so local paths, globs and ``gs://`` objects read
the same. The Beam transforms that use it live in ``beam_expmech.transforms.read``.
"""

from __future__ import annotations

import contextlib
import json
import posixpath
from collections.abc import Iterator, Mapping, Sequence

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from beam_expmech.io.csv_reader import csv_batches, csv_header
from beam_expmech.io.errors import InputError, first_line
from beam_expmech.io.validation import MalformedRows, schema_conflict, type_family

FORMATS = ("parquet", "csv", "avro")
BATCH_ROWS = 262_144
_SIZES: dict[str, int] = {}  # each file match_files found, with its size (see total_size)


# --- finding files and their formats -------------------------------------------------------------


def match_files(pattern: str) -> list[str]:
    """The files a path or glob names (local or gs://), sorted; InputError if there are none."""
    try:
        matched = FileSystems.match([pattern])[0].metadata_list
    except Exception as error:  # Beam raises BeamIOError and others; the user needs one line
        raise InputError(f"{pattern}: cannot list files ({first_line(error)})") from None
    files = sorted(m.path for m in matched if not m.path.endswith("/"))
    _SIZES.update((m.path, m.size_in_bytes) for m in matched)
    if not files:
        raise InputError(f"{pattern}: no file matches")
    return files


def total_size(files: Sequence[str]) -> int | None:
    """The bytes of ``files`` as match_files found them (what bounding sizes its shards by), without listing
    them again, which after the budget is charged could fail and waste it; None where one was not matched."""
    sizes = [_SIZES.get(path) for path in files]
    return None if None in sizes else sum(sizes)


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


def check_delimiter(delimiter: str) -> str:
    """``delimiter`` if it can separate a CSV file's fields (one ASCII character, not a quote or a line end),
    else a ValueError."""
    printable = isinstance(delimiter, str) and delimiter.isascii() and (delimiter.isprintable() or delimiter == "\t")
    if not printable or len(delimiter) != 1 or delimiter in '"\r\n':
        raise ValueError(f"a CSV delimiter is one ASCII character other than a quote or a line end, got {delimiter!r}")
    return delimiter


def column_types(path: str, fmt: str, delimiter: str = ",") -> dict[str, pa.DataType]:
    """Each column of a file and the type it is read as, from its footer, header or schema (not its
    rows): Parquet's own, bytes for every CSV column, the declared type for Avro (see ``_avro_type``)."""
    with _read_errors(path, fmt), FileSystems.open(path) as handle:
        if fmt == "parquet":
            return {field.name: field.type for field in pq.read_schema(handle)}
        if fmt == "avro":
            types = _avro_types(fastavro.reader(handle))
            return {name: pa.string() if kind is None else kind for name, kind in types.items()}  # None: as text
        return {name: pa.binary() for name in csv_header(handle, path, delimiter)[0]}


def check_columns(
    files: Sequence[str],
    fmt: str | None,
    columns: Sequence[str],
    identities: Sequence[str] = (),
    kinds: Mapping[str, str] | None = None,
    labels: Mapping[str, Sequence[str]] | None = None,
    delimiter: str = ",",
) -> dict[str, str]:
    """InputError naming the first file that lacks a needed column, cannot be read, names a needed
    column twice, types a needed column otherwise than the files before it (read as 5 in one file and
    as "5" or 5.0 in another, one privacy unit would be two), declares one of the ``identities``
    (privacy units) in an Avro type that is read as its text (see ``_check_fields``), or types a column
    so that no value can be read as its ColumnSpec kind in ``kinds`` wants, or equal the public ``labels``
    it is matched against (``schema_conflict``: text where numbers are read). A CSV column (its fields split at
    ``delimiter``), or an Avro union read as text, holds text whatever its values: each is parsed as it comes.
    Returns each needed column's type family (``type_family``), but for a column of nulls only in every file."""
    first: dict[str, tuple[str, str]] = {}  # column -> (the first file that types it, its family)
    for path in files:
        path_format = file_format(path, fmt)
        if delimiter != "," and path_format != "csv":  # a delimiter given for nothing would be silently ignored
            raise InputError(f"{path}: a delimiter is for CSV files, and this file is {path_format}")
        types = column_types(path, path_format, delimiter)
        missing = [c for c in columns if c not in types]
        if missing:  # not the others: a CSV header may be a row
            raise InputError(
                f"{path}: missing column {missing[0]!r}{_other_delimiter(list(types), columns, delimiter)}"
            )
        read_as_text = _check_fields(path, path_format, columns, identities, delimiter)
        for column in columns:
            kind = (kinds or {}).get(column)
            conflict = None if kind is None or column in read_as_text else schema_conflict(
                kind, types[column], (labels or {}).get(column, ()))  # fmt: skip
            if conflict:
                raise InputError(f"{path}: column {column!r} {conflict}: no row could count")
            if column in identities and pa.types.is_nested(types[column]):  # its text is not one form a value
                raise InputError(f"{path}: column {column!r} identifies privacy units, so it must hold numbers or "
                                 f"text, not {types[column]}")  # fmt: skip
            family = type_family(types[column])
            if family is None:  # only nulls: every row will be rejected, whatever the other files hold
                continue
            where, expected = first.setdefault(column, (path, family))
            if family != expected:
                raise InputError(f"{path}: column {column!r} holds {family}, but {expected} in {where}")
    nulls_only = [c for c in (kinds or {}) if c in columns and c not in first]  # a null is a rejected row
    if nulls_only:
        raise InputError(f"column {nulls_only[0]!r} holds nulls only in every file: no row could count")
    return {column: family for column, (_, family) in first.items()}


def _other_delimiter(names: Sequence[str], columns: Sequence[str], delimiter: str) -> str:
    """Where a CSV header read as one column, split at a common separator other than ``delimiter``, names every
    needed column, a hint naming that separator. Only then: a first line that is someone's row, not a header,
    must not be described."""
    found = [c for c in ";\t|," if c != delimiter and len(names) == 1 and set(columns) <= set(names[0].split(c))]
    return f" (the header is one field holding {found[0]!r}: is that the delimiter? --delimiter)" if found else ""


def _check_fields(
    path: str, fmt: str, columns: Sequence[str], identities: Sequence[str], delimiter: str = ","
) -> set[str]:
    """The file's columns read as text whatever their values (every CSV column; an Avro union of several
    types), after checking what column_types, one type per name, cannot tell of a file: a needed column
    named twice (which one is read would be up to the reader, and the job would fail after its charge),
    and an identity whose Avro type is not one primitive type (alone or with null). Such values are
    read as their text (see ``_avro_type``), which is not one form per value: a union's 0.0 and -0.0
    would be two units, its 5 and "5" one, and a fixed b"abc" in one file and bytes b"abc" in another two."""
    with _read_errors(path, fmt), FileSystems.open(path) as handle:
        if fmt == "csv":
            names, read_as_text = csv_header(handle, path, delimiter)[0], set()
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
    return set(names) if fmt == "csv" else read_as_text


# --- reading -------------------------------------------------------------------------------------


def splits(path: str, fmt: str) -> list[tuple[str, str, int | None]]:
    """Units of parallel reading: one per Parquet row group, one per CSV or Avro file."""
    if fmt == "parquet":
        with FileSystems.open(path) as handle:
            groups = pq.ParquetFile(handle).metadata.num_row_groups
        return [(path, fmt, group) for group in range(groups)]
    return [(path, fmt, None)]


def split_bytes(path: str, fmt: str) -> dict[int | None, float]:
    """The share of the file's size (public, as its name is) that each of its splits (``splits``) stands for: the
    whole size for a file read whole (key None); a Parquet row group's in proportion to its compressed bytes."""
    size = FileSystems.match([path])[0].metadata_list[0].size_in_bytes
    if fmt != "parquet":
        return {None: float(size)}
    with FileSystems.open(path) as handle:
        metadata = pq.ParquetFile(handle).metadata
    compressed = [sum(metadata.row_group(g).column(c).total_compressed_size for c in range(metadata.num_columns))
                  for g in range(metadata.num_row_groups)]  # fmt: skip
    return {g: size * bytes_ / max(sum(compressed), 1) for g, bytes_ in enumerate(compressed)}


def total_bytes(paths: Sequence[str]) -> int:
    """The files' sizes, summed."""
    return sum(m.size_in_bytes for result in FileSystems.match(list(paths)) for m in result.metadata_list)


def read_split(
    split: tuple[str, str, int | None], columns: Sequence[str], delimiter: str = ","
) -> Iterator[pa.RecordBatch | MalformedRows]:
    """The record batches of one split, only the needed columns, streamed (never the whole file);
    for CSV (fields split at ``delimiter``) also the rows that could not be split into fields, set aside as
    ``MalformedRows``.

    A file that cannot be read is an InputError naming the file and the error's type only.
    """
    path, fmt, group = split
    columns = list(columns)
    with _read_errors(path, fmt), FileSystems.open(path) as handle:
        if fmt == "parquet":
            yield from pq.ParquetFile(handle).iter_batches(BATCH_ROWS, row_groups=[group], columns=columns)
        elif fmt == "csv":
            yield from csv_batches(handle, path, columns, BATCH_ROWS, delimiter)
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


def read_json(path: str) -> dict:
    return json.loads(read_text(path))


def read_text(path: str) -> str:
    """A small text file, local or gs:// (a UTF-8 byte-order mark is dropped)."""
    with FileSystems.open(path) as handle:
        return handle.read().decode("utf-8-sig")
