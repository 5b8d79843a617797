"""Rows already in a pipeline (dicts, beam.Row, NamedTuples, or any element read through extractors) as validated
record batches.

The way in for data that comes from BigQuery, Kafka or a database as a PCollection rather than from
files. Rows are gathered into batches; each declared column becomes one Arrow array per batch (built
once from a list, never one Arrow object per row); and the batches go through the files' validation
(``ValidateBatches``, that is ``validate``): one converter per column kind, and one canonical form
per privacy unit whatever the path (a unit 5 in a dict is the unit 5 of a file's integer column).
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.transforms.window import GlobalWindow
from apache_beam.typehints import typehints
from apache_beam.utils.windowed_value import WindowedValue

from beam_expmech import parameters
from beam_expmech.io import readers
from beam_expmech.io.validation import ColumnSpec, MalformedRows, reason_column, type_family
from beam_expmech.transforms import lineage
from beam_expmech.transforms.read import ValidateBatches

# The Python types a value may have, and the Arrow type a column of one of them is built as. Anything
# else (a Decimal, a datetime, a list, a dict, a numpy scalar) goes to the dead letter: the Arrow type
# pyarrow would infer for it depends on the value (a decimal's digits, a dict's keys), and a reason
# naming that type would quote them.
PLAIN_TYPES = {type(None): pa.null(), bool: pa.bool_(), int: pa.int64(), float: pa.float64(), str: pa.string(),
               bytes: pa.binary()}  # fmt: skip
IDENTITY_TYPES = (int, float, str, bytes)
_INT64 = (-(2**63), 2**63)
_MISSING = object()  # a field the row does not have, or one its extractor could not read
_NUMPY_PLAIN = (np.number, np.bool_, np.str_, np.bytes_)  # numpy's scalars of plain types, read as those
Extractor = Callable[[object], object]  # an element -> one column's value


class RowsToBatches(beam.PTransform):
    """col: dicts, beam.Row or NamedTuples (or any element, through ``extractors``) -> validated record batches of
    exactly the declared columns.

    ``schema``: the ``ColumnSpec`` list a file pipeline declares (privacy unit included). Rows carry no
    column types, so each identity column (kind "any") needs its values' Python type in ``identity_types``
    (int, float, str or bytes): a file's column has one type, and without one declared, 5 in one row and
    "5" in another would be two units. ``batch_size``: the most rows per batch.

    Returns, as ``ValidateBatches`` does, a tuple of PCollections tagged ``good`` (RecordBatch, each column
    in its kind's canonical type) and ``dead`` (pyarrow.Table: the declared columns as text, a field the
    row lacks, or its extractor could not read, as null, and ``reason``), so ``WriteDeadLetter`` writes either
    path's dead letter. A row is dead if validation rejects it as it would a file's, or if it is None (read by
    name), lacks a declared field (or an extractor raises on it, below), holds a
    value that is not None, a bool, an int of 64 bits, a float, a str of UTF-8 text or bytes, or an identity
    not of its declared type. Reasons name the column and the problem, never a value; the dead letter
    itself holds raw data (an operator's file, never a release). Bad rows are counted in the non-private
    counter ``dead_letter_rows``; fields not declared are not read. Without ``extractors``, elements of a kind it
    cannot read by name (tuples, (key, value) pairs, plain values) are refused when the graph is built, where the
    PCollection's element type says so (the pipeline's shape, public); otherwise each such element is a dead row
    ("not a row"), as an extractor's failure is below: whether one is in the data must not decide whether the job
    stops, which would tell it.

    ``extractors`` (as PipelineDP's ``DataExtractors``): to read other elements, one plain function per declared
    column (every one, and no other) that takes an element and returns that column's value; for (user, dict)
    pairs, ``{"user": lambda kv: kv[0], "item": lambda kv: kv[1]["item"]}``. They run on the workers, on each
    element (None included: how an element is read is theirs to say), once per column, in the schema's order
    (give pure functions); their values make the same per-batch lists, and pass the same checks, as fields read
    by name. An extractor that raises on an element (any ``Exception``: IndexError, KeyError, TypeError,
    AttributeError, ...) makes that element a dead row with the reason "item: extractor raised KeyError" (the
    column and the exception's type, never its message, which may quote the data), counted as any dead row.
    With extractors, elements are not refused for their type, when built (the extractors say how to read them)
    or when run.

    Why an extractor's failure is a dead row and never stops the job, even when it fails on every element of a
    batch or of the input: whether it fails on an element depends on that element (a dict lacking a key, a
    pair whose value is None). A rule that stopped the job on some pattern of failures (the first element of a
    bundle, a whole batch) would let one person's rows decide whether anything is released, and would make what
    happens to an element depend on its neighbours (DESIGN.md section 4: one person's row never changes how
    another's is read); a rule per element does neither. What is refused is what the pipeline's shape (public)
    says: elements typed as tuples or plain values and no extractors, when the graph is built. The cost:
    extractors wrong for every element (a dict's key read from tuples) make every row dead, and a release is
    then made from no row (noise only: still private, but useless); the non-private counter
    ``dead_letter_rows`` and the dead letter's reasons show it to the operator, so check them after a first run.
    """

    def __init__(
        self,
        *,
        schema: Sequence[ColumnSpec],
        batch_size: int = readers.BATCH_ROWS,
        identity_types: Mapping[str, type] | None = None,
        extractors: Mapping[str, Extractor] | None = None,
    ):
        super().__init__()
        self.specs = list(schema)
        if not self.specs or not all(isinstance(spec, ColumnSpec) for spec in self.specs):
            raise ValueError("schema must be a non-empty list of ColumnSpec")
        names = [spec.name for spec in self.specs]
        twice = [name for name in names if names.count(name) > 1]
        if twice:
            raise ValueError(f"schema declares column {twice[0]!r} more than once")
        self.batch_size = parameters.count(batch_size, "batch_size")
        self.identity_types = dict(identity_types or {})
        identities = [spec.name for spec in self.specs if spec.kind == "any"]
        for name in identities:
            if self.identity_types.get(name) not in IDENTITY_TYPES:
                raise ValueError(f"column {name!r} is of kind 'any': identity_types must give its values' type "
                                 "(int, float, str or bytes)")  # fmt: skip
        others = sorted(set(self.identity_types) - set(identities))
        if others:
            raise ValueError(f"identity_types names {others[0]!r}, which is no column of kind 'any' in the schema")
        self.extractors = None if extractors is None else _checked_extractors(extractors, names)

    def expand(self, rows):
        if self.extractors is None and not _readable(rows.element_type):  # nothing to read by name
            raise ValueError(f"RowsToBatches reads dicts, beam.Row or NamedTuples, and this PCollection holds "
                             f"{rows.element_type}: map each element to a dict of its fields, or give "
                             "extractors")  # fmt: skip
        size = self.batch_size
        checked = (
            rows
            | "Batch" >> beam.ParDo(_Batches(size))  # col: [row]
            | "Columns" >> beam.FlatMap(rows_as_batches, self.specs, self.identity_types, extractors=self.extractors)
            | "Validate" >> ValidateBatches(self.specs)
        )
        kinds = getattr(checked.good, lineage.VALIDATED)  # each identity's form: its declared type's family
        families = {name: type_family(PLAIN_TYPES[t]) for name, t in self.identity_types.items()}
        lineage.mark(checked.good, lineage.VALIDATED, {c: (k, families.get(c) if k == "any" else None)
                                                        for c, (k, _) in kinds.items()})  # fmt: skip
        return checked


class _Batches(beam.DoFn):
    """col: row -> col: [row], at most ``size`` rows a list, within a bundle. Not Beam's BatchElements, which logs
    each bundle's element count at INFO: a count of the data's rows, where no log may hold one."""

    def __init__(self, size: int):
        self.size = size

    def start_bundle(self):
        self.rows = []

    def process(self, row):
        self.rows.append(row)
        if len(self.rows) >= self.size:
            yield self.rows
            self.rows = []

    def finish_bundle(self):
        if self.rows:
            yield WindowedValue(self.rows, GlobalWindow().max_timestamp(), (GlobalWindow(),))
        self.rows = []


def rows_as_batches(
    rows: Sequence,
    specs: Sequence[ColumnSpec],
    identity_types: Mapping[str, type],
    *,
    extractors: Mapping[str, Extractor] | None = None,
) -> Iterator[pa.RecordBatch | MalformedRows]:
    """The declared columns of ``rows`` (read by name, or by ``extractors``) as record batches for ``validate``,
    one per mix of value types (each column of a batch holds one Python type, built as the Arrow type
    ``PLAIN_TYPES`` gives it), and as ``MalformedRows`` the rows that make no such record (see ``RowsToBatches``)."""
    reason = np.full(len(rows), -1, dtype=np.int32)  # index into texts, -1 for a row that makes a record
    texts: list[str] = []

    def flag(problem: str, mask: np.ndarray) -> None:  # the first problem found is the one recorded
        reason[mask & (reason < 0)] = len(texts)
        texts.append(problem)

    if extractors is None:
        records = [_fields(row) for row in rows]  # None where an element is no row, or reading it raised
        # An element read by no name is a dead row, as None is: one person's element must not decide whether the
        # job stops (the release's presence would tell it). A PCollection typed as such is refused when built.
        flag("not a row (None)", np.array([row is None for row in rows], dtype=bool))
        flag("not a row (not a dict, beam.Row or NamedTuple: give extractors)",
             np.array([r is None for r in records], dtype=bool))  # fmt: skip
    columns = {}
    for spec in specs:
        if extractors is None:
            values, failures = _extracted(records, functools.partial(_field, name=spec.name))
            for failure, mask in failures:
                flag(f"{spec.name}: reading it raised {failure}", mask)
        else:
            values, failures = _extracted(rows, extractors[spec.name])
            for failure, mask in failures:
                flag(f"{spec.name}: extractor raised {failure}", mask)
        if any(issubclass(kind, np.generic) for kind in set(map(type, values))):  # numpy's scalars, as Python's
            values = [
                v.item() if isinstance(v, _NUMPY_PLAIN) and not isinstance(v, np.timedelta64) else v for v in values
            ]  # dates and durations stay numpy's: dead rows
        for problem, mask in _problems(values, identity_types.get(spec.name)):
            flag(f"{spec.name}: {problem}", mask)
        columns[spec.name] = values
    bad = reason >= 0
    if bad.any():
        dead = {name: pa.array([_dead_text(v) for v, b in zip(values, bad, strict=True) if b], pa.string())
                for name, values in columns.items()}  # fmt: skip
        dead[reason_column(list(columns))] = pa.array(texts, pa.string()).take(pa.array(reason[bad]))
        yield MalformedRows(pa.table(dead))
        columns = {name: [v for v, b in zip(values, bad, strict=True) if not b] for name, values in columns.items()}
    if not bad.all():
        yield from _batches_by_type(columns)


def _checked_extractors(extractors: Mapping[str, Extractor], names: Sequence[str]) -> dict[str, Extractor]:
    """``extractors`` as a dict, or a ValueError unless it gives a callable for each of ``names`` and no other."""
    if not isinstance(extractors, Mapping):
        raise ValueError("extractors must map each declared column to a function of the element")
    missing = [name for name in names if name not in extractors]
    if missing:
        raise ValueError(f"extractors has none for column {missing[0]!r}: with extractors, each declared column "
                         "needs one")  # fmt: skip
    others = [name for name in extractors if name not in names]
    if others:
        raise ValueError(f"extractors names {others[0]!r}, which is no column of the schema")
    uncallable = [name for name in names if not callable(extractors[name])]
    if uncallable:
        raise ValueError(f"the extractor of column {uncallable[0]!r} is not callable")
    return {name: extractors[name] for name in names}


def _extracted(rows: Sequence, extract: Extractor) -> tuple[list, list[tuple[str, np.ndarray]]]:
    """``extract`` of each row, ``_MISSING`` where it raised, and (exception type, mask) pairs for those rows.

    Only the exception's type is kept (its message may quote the row), and each row's outcome is its own (see
    ``RowsToBatches``). An ``Exception`` only: an interrupt or a worker's exit still ends the job."""
    values, failed = [], defaultdict(list)
    for i, row in enumerate(rows):
        try:
            values.append(extract(row))
        except Exception as error:  # any: one person's row costs that row, never the release
            values.append(_MISSING)
            failed[type(error).__name__].append(i)
    masks = []
    for failure, where in failed.items():
        mask = np.zeros(len(rows), dtype=bool)
        mask[where] = True
        masks.append((failure, mask))
    return values, masks


def _readable(hint) -> bool:
    """Whether a PCollection's element type (Beam's hint) may hold rows RowsToBatches reads; a hint that does not
    say (Any, an unknown constraint) may, and each element is then checked as it comes."""
    if isinstance(hint, typehints.UnionConstraint):
        return all(_readable(member) for member in hint.union_types if member is not type(None))
    if isinstance(hint, (typehints.TupleConstraint, typehints.TupleSequenceConstraint, typehints.ListConstraint,
                         typehints.IterableTypeConstraint, typehints.SetTypeConstraint)):  # fmt: skip
        return False
    if isinstance(hint, type):
        return issubclass(hint, Mapping) or hasattr(hint, "_fields") or hint is object or not issubclass(
            hint, (tuple, list, str, bytes, int, float, bool))  # fmt: skip
    return True


def _fields(row) -> Mapping | None:
    """The element's fields by name, or None for an element that has none, or whose fields raise when read (a
    row's own code: its failure makes it a dead row, as any element's, never a stopped job)."""
    try:
        if type(row) is dict or isinstance(row, Mapping):  # the first test is the fast one
            return row
        if hasattr(row, "_asdict"):  # beam.Row and NamedTuples
            return row._asdict()
    except Exception:
        pass
    return None


def _field(record: Mapping | None, *, name: str):
    """One field of a record (``_MISSING`` where it has none); a record's ``get`` that raises raises here."""
    return _MISSING if record is None else record.get(name, _MISSING)


def _problems(values: list, identity: type | None) -> list[tuple[str, np.ndarray]]:
    """(problem, mask) pairs for what makes a value unfit for an Arrow column of its Python type (the
    checks cost a pass over the values only when a batch holds such a value)."""
    kinds = set(map(type, values))
    problems = []
    if not kinds <= PLAIN_TYPES.keys():
        problems.append(("missing", _where(values, lambda v: v is _MISSING)))
        problems.append(("not None, a bool, an int, a float, a str or bytes",
                         _where(values, lambda v: v is not _MISSING and type(v) not in PLAIN_TYPES)))  # fmt: skip
    ints = values if kinds == {int} else [v for v in values if type(v) is int] if int in kinds else []
    if ints and not (_INT64[0] <= min(ints) and max(ints) < _INT64[1]):
        problems.append(("out of the 64-bit range", _where(values, lambda v: type(v) is int and not _fits(v))))
    if str in kinds and not _encodes("".join(v for v in values if type(v) is str)):
        problems.append(("not UTF-8 text (a lone surrogate)",
                         _where(values, lambda v: type(v) is str and not _encodes(v))))  # fmt: skip
    if identity is not None and not kinds <= {identity, type(None)}:
        other = set(PLAIN_TYPES) - {identity, type(None)}
        problems.append(
            (f"not of the declared identity type {identity.__name__}", _where(values, lambda v: type(v) in other))
        )
    return problems


def _where(values: list, test: Callable[[object], bool]) -> np.ndarray:
    return np.fromiter(map(test, values), dtype=bool, count=len(values))


def _fits(value: int) -> bool:
    return _INT64[0] <= value < _INT64[1]


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _dead_text(value) -> str | None:
    """A rejected row's value as the dead letter's text (an operator's file: raw data)."""
    if value is None or value is _MISSING:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")  # a lone surrogate as \udxxx
    if isinstance(value, int) and not _fits(value):
        return hex(value)  # str() refuses ints beyond 4,300 digits: one row must not fail the job
    try:
        return str(value)
    except Exception:  # a value whose text cannot be made (nested huge ints, a broken __str__)
        return f"<unprintable {type(value).__name__}>"


def _batches_by_type(columns: dict[str, list]) -> Iterator[pa.RecordBatch]:
    """One record batch per mix of types of the columns that hold several (None counting as one): a
    value's Arrow type, and so its canonical form, comes from its own type, never from its neighbours'
    (an int beside a float would become a float, and lose digits beyond 2^53)."""
    mixed = [name for name, values in columns.items() if len(set(map(type, values)) - {type(None)}) > 1]
    if not mixed:
        yield _batch(columns)
        return
    groups = defaultdict(list)
    for i, key in enumerate(zip(*(map(type, columns[name]) for name in mixed), strict=True)):
        groups[key].append(i)
    for rows in groups.values():
        yield _batch({name: [values[i] for i in rows] for name, values in columns.items()})


def _batch(columns: dict[str, list]) -> pa.RecordBatch:
    arrays = []
    for values in columns.values():
        (kind,) = set(map(type, values)) - {type(None)} or {type(None)}
        arrays.append(pa.array(values, PLAIN_TYPES[kind]))
    return pa.RecordBatch.from_arrays(arrays, names=list(columns))
