"""Row validation: each needed column in its canonical type, bad rows to the dead letter with a reason.

One converter per column kind (``ColumnSpec.kind``), on whole record batches. A reason names the
column and the problem, never the value: the dead letter is the data owner's, a log line is not.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from beam_expmech.grids import NumericGrid

# A privacy unit's value (its canonical form, see canonical_identity) may be this long at most; a longer
# one goes to the dead letter. Public, and far above any real identifier: it caps the memory one unit
# costs the bounding step (its hash takes tens of times a unit's length), so one huge field cannot crash
# a job after its charge.
MAX_IDENTITY_BYTES = 1024
REASON = "reason"  # the dead letter's column of reasons: reason_column() where a declared column takes the name
_INTEGER = r"^\s*[+-]?[0-9]+\s*$"
_NUMBER = r"^\s*[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\s*$"


class ColumnKind(enum.StrEnum):
    """What a declared column holds, and so how validation reads it (``ColumnSpec.kind``). A member is a str equal
    to its value (``ColumnKind.INT == "int"``, ``f"{ColumnKind.INT}"`` is "int"): either may be given, and a
    ColumnSpec keeps the plain string.

    Whatever the kind, a null (None, a missing value) goes to the dead letter, and how a value is read depends on
    this declaration and the value alone, never on the values beside it in a batch (DESIGN.md section 4).

    STRING ("string"): text. Text, and bytes of valid UTF-8, are read as text; other values as their text (3 as
        "3"). Bytes that are not UTF-8 are dead.
    INT ("int"): whole numbers, as int64. Integers, and booleans as 0 and 1; floats when integral (2.0, not 2.5:
        NaN and infinities are dead); text that spells an integer (" -12 "). A value beyond the 64-bit range is
        dead, never wrapped. With ``domain`` (lo, hi), a value outside [lo, hi) is dead and the column takes the
        narrowest integer type of [lo, hi); with an integer ``grid``, each value becomes its bin's code.
    FLOAT ("float"): numbers, as float64 (floats, integers, booleans, text that spells a number). NaN and
        infinities are dead. With a float ``grid``, each value becomes its bin's code. With either kind's grid,
        a value outside [lower, upper] is clamped into an end bin (counted, not rejected).
    LABEL ("label"): one of a public list of values, which a LABEL column needs as ``labels`` (and no other kind
        takes). A value is matched as text and read as its position in ``labels`` (an int code, in the narrowest
        integer type); a value that is no label is dead.
    ANY ("any"): an identity, such as the privacy unit. Every value but a null is kept, in its one canonical
        form (``canonical_identity``: -0.0 and 0.0, 5 and 5.0 in a float column, NaNs of any bits, are one
        unit; a NaN is a unit like any other), and nothing is parsed; dead are only an unsigned integer beyond
        int64 and a value whose form is longer than ``MAX_IDENTITY_BYTES``.
    """

    STRING = "string"
    INT = "int"
    FLOAT = "float"
    LABEL = "label"
    ANY = "any"


# Kinds as other schemas name them (matched in lower case): the ValueError for one says which ColumnKind is meant.
_KIND_ALIASES = {"str": ColumnKind.STRING, "text": ColumnKind.STRING, "integer": ColumnKind.INT,
                 "int64": ColumnKind.INT, "long": ColumnKind.INT, "double": ColumnKind.FLOAT,
                 "number": ColumnKind.FLOAT, "float64": ColumnKind.FLOAT, "category": ColumnKind.LABEL,
                 "categorical": ColumnKind.LABEL, "id": ColumnKind.ANY, "identity": ColumnKind.ANY}  # fmt: skip


def _kind_value(kind: object) -> str:
    """The plain string value of ``kind`` (a ColumnKind or its value), or a ValueError that lists the kinds and,
    for a name another schema uses (or a kind in other case), suggests the one meant."""
    try:
        return ColumnKind(kind).value  # a plain str, whichever was given: equality, hash and pickling as before
    except ValueError:
        pass
    meant = None
    if isinstance(kind, str):
        folded = kind.strip().lower()
        meant = _KIND_ALIASES.get(folded) or next((k for k in ColumnKind if k.value == folded), None)
    hint = f": did you mean {meant.value!r} (ColumnKind.{meant.name})?" if meant is not None else ""
    kinds = ", ".join(k.value for k in ColumnKind)
    raise ValueError(f"kind must be one of {kinds} (a ColumnKind), got {kind!r}{hint}")


@dataclass(frozen=True)
class ColumnSpec:
    """A column the job reads, what its values must be, and (optionally) their domain.

    ``kind``: a ``ColumnKind`` or its value ("string", "int", "float", "label" or "any"; see ``ColumnKind`` for
    how each is read), kept as the plain string, so that ``spec.kind == "int"`` holds either way and a spec
    compares, hashes and pickles the same whichever was given.
    ``domain`` (ints only): values must lie in [lo, hi).
    ``labels`` (labels only): the values a column may hold, each read as its position (an int code).
    ``grid`` (an integer grid with "int", a float grid with "float"): each value is read as the code
    of its bin; a value outside [lower, upper] is clamped into an end bin (counted, not rejected).
    """

    name: str
    kind: str
    domain: tuple[int, int] | None = None
    labels: tuple[str, ...] | None = None
    grid: NumericGrid | None = None

    def __post_init__(self):
        object.__setattr__(self, "kind", _kind_value(self.kind))  # frozen: the one assignment, before any use
        if (self.kind == "label") != (self.labels is not None):
            raise ValueError("labels go with kind 'label', and only with it")
        if self.domain is not None and self.kind != "int":
            raise ValueError("a domain of codes goes with kind 'int', and only with it")
        if self.grid is not None and self.kind != ("int" if self.grid.integer else "float"):
            raise ValueError("an integer grid goes with kind 'int', a float grid with kind 'float'")


@dataclass(frozen=True)
class MalformedRows:
    """Rows a reader could not make into a record, in the dead letter's form. CSV lines that are not one
    record of the header's width: the needed columns empty (which field is which cannot be told) and a
    reason naming the file and the line. Rows of a PCollection (transforms.rows): their declared fields as
    text and a reason naming the column."""

    rows: pa.Table


def reason_column(columns: Sequence[str]) -> str:
    """The name of a dead letter's column of reasons beside ``columns`` (the declared ones): "reason", or with
    as many "_" after it as it takes to be none of them, so that a rejected row keeps every one of its values."""
    name = REASON
    while name in columns:
        name += "_"
    return name


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


_NUMBERS = {"integers": pa.int64(), "floating-point numbers": pa.float64(), "booleans": pa.bool_()}


def schema_conflict(kind: str, column_type: pa.DataType, labels: Sequence[str] = ()) -> str | None:
    """Why a typed column (Parquet, Avro) of ``column_type`` holds no value that a ColumnSpec of ``kind`` reads as
    it must (a number, for kinds "int" and "float"), or no value
    equal to one of the ``labels`` it is matched against as text (the first that no value of the type reads as,
    as validation reads it: 3 as "3", a decimal(5, 2) 1.5 as "1.50"); None where it can. Public information
    decides (a schema, public labels), so a run it dooms is refused before it is charged. A column read as text
    whatever it holds (CSV) is not for this check: each value is parsed as it comes."""
    family = type_family(column_type)
    if family is None:  # nulls only here: what other files hold decides (readers.check_columns)
        return None
    if kind in ("int", "float") and family not in _NUMBERS:
        return f"holds {family}, but is read as {'integers' if kind == 'int' else 'numbers'}"
    if kind in ("string", "label") and family != "text":
        kind_of = column_type.value_type if pa.types.is_dictionary(column_type) else column_type
        for label in labels:
            try:
                read = _as_text(pc.cast(pa.array([label]), kind_of))[0].as_py()
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                read = None
            if read != label:
                return f"holds {family}, whose values never read as {label!r}"
    return None


def validate(batch: pa.RecordBatch, specs: Sequence[ColumnSpec]) -> tuple[pa.RecordBatch, pa.Table | None]:
    """(good rows with each column in its canonical type, bad rows as text with a reason column).

    A row is bad if a needed column is null, of the wrong type, NaN or infinite, or outside its
    declared domain. The first reason found is the one recorded.
    """
    checked = check_batch(batch, specs)
    return checked.good, checked.bad


class Checked(NamedTuple):
    """What ``check_batch`` returns: ``good`` and ``bad`` as ``validate`` does, and ``clamped``: for each
    column with a grid, how many good rows had a value outside [lower, upper], clamped into an end bin
    (exact, so not private: an operator's counter, never part of a release)."""

    good: pa.RecordBatch
    bad: pa.Table | None
    clamped: dict[str, int]


def check_batch(batch: pa.RecordBatch, specs: Sequence[ColumnSpec]) -> Checked:
    """``validate``, with the clamped values of each column with a grid counted (``Checked``)."""
    reason = np.full(batch.num_rows, -1, dtype=np.int32)  # index into texts, -1 for a good row
    texts, clean, clamps = [], [], {}
    for spec in specs:
        values, problems, clamped = _convert(batch.column(spec.name), spec)
        for problem, mask in problems:
            if mask.any():  # most batches have no bad row: one pass, not three
                reason[mask & (reason < 0)] = len(texts)
                texts.append(f"{spec.name}: {problem}")
        clean.append(values)
        if clamped is not None:
            clamps[spec.name] = clamped
    bad = reason >= 0
    clamped = {name: int(np.count_nonzero(mask & ~bad)) for name, mask in clamps.items()}
    names = [s.name for s in specs]
    if not bad.any():
        return Checked(pa.RecordBatch.from_arrays(clean, names=names), None, clamped)
    good_rows = pa.array(~bad)
    good = pa.RecordBatch.from_arrays([c.filter(good_rows) for c in clean], names=names)
    bad_rows = pa.array(bad)
    rejected = {s.name: _as_text(batch.column(s.name).filter(bad_rows)) for s in specs}
    rejected[reason_column(names)] = pa.array(texts, pa.string()).take(pa.array(reason[bad]))
    return Checked(good, pa.table(rejected), clamped)


def _convert(column: pa.Array, spec: ColumnSpec) -> tuple[pa.Array, list[tuple[str, np.ndarray]], np.ndarray | None]:
    """The column in the spec's type (bad slots filled with a placeholder), (problem, mask) pairs, and
    for a column with a grid (its values then bin codes) which values were clamped into an end bin."""
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    problems = [("null", _mask(column.is_null()) if column.null_count else np.zeros(len(column), bool))]
    if pa.types.is_uint64(column.type) and spec.kind in ("int", "any"):
        # int64 is the one integer form: beyond it a value would wrap onto another (2^64 - 1 onto -1).
        problems.append(("out of the 64-bit range", _mask(pc.greater(column, pa.scalar(2**63 - 1, column.type)))))
    if spec.kind == "any":  # an identity
        identity = canonical_identity(column)
        if pa.types.is_large_binary(identity.type):
            too_long = _mask(pc.greater(pc.binary_length(identity), MAX_IDENTITY_BYTES))
            problems.append((f"longer than {MAX_IDENTITY_BYTES} bytes", too_long))
        return identity, problems, None
    if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
        column, invalid = _decoded(column)
        problems.append(("not UTF-8 text", invalid))
    if spec.kind == "string":
        return _as_text(column), problems, None
    if spec.kind == "label":
        codes = pc.index_in(_as_text(column), value_set=pa.array(spec.labels, pa.string()))
        problems.append(
            (f"not one of the domain's {len(spec.labels)} labels", _mask(codes.is_null()) & ~problems[0][1])
        )
        return codes.fill_null(0).cast(_codes_type(0, len(spec.labels))), problems, None
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
        values = (column.fill_null(0) if column.null_count else column).to_numpy(zero_copy_only=False)
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
        # A finite sum means every value is finite (one quick pass); past the largest float, or inf - inf, each
        # value is checked. No warning goes to stderr: it would tell of the data (review 11).
        with np.errstate(over="ignore", invalid="ignore"):
            finite = np.isfinite(array.sum())
        if not finite:
            problems.append(("NaN or infinite", ~np.isfinite(array)))
    if spec.domain is not None:
        lo, hi = spec.domain
        # Two quick passes, a mask only where some value is outside (written so that a NaN would count as outside).
        if array.size and not (array.min() >= lo and array.max() < hi):
            problems.append((f"outside the domain [{lo}, {hi})", (array < lo) | (array >= hi)))
        codes = array.astype(f"int{_codes_type(lo, hi).bit_width}", copy=False)  # bad rows may wrap: dropped
        return pa.array(codes), problems, None
    if spec.grid is not None:
        codes, clamped = spec.grid.codes(array)
        return pc.cast(pa.array(codes), _codes_type(0, spec.grid.bins)), problems, clamped
    return values, problems, None


def _codes_type(lo: int, hi: int) -> pa.DataType:
    """The narrowest integer type of [lo, hi) (a public domain): a coded column of a few values then
    takes a byte a row, not eight, through the bounding's shuffle (synthesize's columns, mostly)."""
    for kind in (pa.int8(), pa.int16(), pa.int32()):
        bits = kind.bit_width - 1
        if -(1 << bits) <= lo and hi <= 1 << bits:
            return kind
    return pa.int64()


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
