"""Reading CSV: a line is at most one record, whatever its neighbours hold.

Every needed column is read as bytes (a wrong type or a bad encoding then costs a row, not the
file); lines that are not one record of the header's width become ``MalformedRows``.
"""

from __future__ import annotations

import csv
import re
import sys
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from beam_expmech.io.errors import InputError
from beam_expmech.io.validation import MalformedRows, reason_column

_CSV_CHUNK = 8 << 20  # bytes of whole lines parsed at a time
_HEADER_LIMIT = 1 << 20  # a "header" longer than this is no header
_LINE_END = re.compile(rb"\r\n|\n|\r")  # where pyarrow's parser ends a line


def csv_header(handle, path: str, delimiter: str = ",") -> tuple[list[str], bytes]:
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
        (names,) = csv.reader([header.decode("utf-8-sig")], delimiter=delimiter, strict=True)
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


def csv_batches(
    handle, path: str, columns: Sequence[str], batch_rows: int, delimiter: str = ","
) -> Iterator[pa.RecordBatch | MalformedRows]:
    """The needed columns as bytes (a wrong type or a bad encoding then costs a row, not the file),
    one record per line (fields split at ``delimiter``); lines that are not one record of the header's
    width are set aside.

    A quote that opens a value and never closes it would, in any CSV parser, swallow the lines after
    it: one person's row would remove other people's. So a line never joins the next one: where
    pyarrow's parse of a chunk has fewer records than lines, each line with a quote is parsed alone.
    """
    names, rest = csv_header(handle, path, delimiter)
    line = 2  # the header is line 1
    for chunk in _line_chunks(handle, rest):
        starts, stops, lines = _lines(chunk)
        numbers = line + np.flatnonzero(stops > starts)  # the file line of each non-empty line
        parsed = _parse_csv(chunk, names, columns, delimiter)
        if parsed is None or parsed[0].num_rows + len(parsed[1]) != numbers.size:
            parsed = _parse_line_by_line(chunk, starts, stops, names, columns, delimiter)
        table, invalid = parsed
        yield from table.combine_chunks().to_batches(batch_rows)
        if invalid:
            reasons = [f"malformed CSV row: {problem} (row {numbers[i]} of {path})" for i, problem in invalid]
            empty = pa.nulls(len(reasons), pa.string())
            yield MalformedRows(pa.table([empty] * len(columns) + [pa.array(reasons, pa.string())],
                                         names=[*columns, reason_column(columns)]))  # fmt: skip
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


def _parse_csv(data: bytes, names: list[str], columns: Sequence[str], delimiter: str):
    """pyarrow's parse of ``data`` as (table of the needed columns, [(non-empty line index, problem)] for
    the records of the wrong width), or None where pyarrow cannot parse it (it decodes a malformed
    row to report it: one that is not UTF-8 text stops it)."""
    invalid = _InvalidRows()
    try:
        table = pacsv.read_csv(
            pa.BufferReader(data),
            read_options=pacsv.ReadOptions(column_names=names, use_threads=False, block_size=len(data) + (1 << 20)),
            parse_options=pacsv.ParseOptions(delimiter=delimiter, newlines_in_values=True, invalid_row_handler=invalid),
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


def _parse_line_by_line(chunk: bytes, starts: np.ndarray, stops: np.ndarray, names, columns, delimiter: str):
    """The lines without a quote together (none of their values can run over lines), each line with a
    quote alone, and each line alone where pyarrow cannot parse them together."""
    quoted = np.zeros(starts.size, bool)
    quotes = np.flatnonzero(np.frombuffer(chunk, np.uint8) == ord('"'))
    quoted[np.searchsorted(starts, quotes, side="right") - 1] = True
    nonempty = np.flatnonzero(stops > starts)
    plain = [i for i in nonempty.tolist() if not quoted[i]]
    alone = [[i] for i in nonempty.tolist() if quoted[i]]
    together = _parse_csv(b"\n".join(chunk[starts[i] : stops[i]] for i in plain), names, columns, delimiter)
    groups = [plain] if together is not None else [[i] for i in plain]
    tables, invalid, rank = [], [], {i: r for r, i in enumerate(nonempty.tolist())}
    for group in sorted(groups + alone):
        parsed = together if group is plain and together is not None else None
        if parsed is None:
            parsed = _parse_csv(chunk[starts[group[0]] : stops[group[0]]], names, columns, delimiter)
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
