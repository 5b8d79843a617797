"""Reading files as record batches, validating them, and writing the dead letter (Beam transforms)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple

import apache_beam as beam
import pyarrow as pa
from apache_beam.metrics import Metrics

from beam_expmech.io import readers, writers
from beam_expmech.io.validation import ColumnSpec, MalformedRows, check_batch, reason_column
from beam_expmech.progress import Relay
from beam_expmech.transforms.lineage import FAMILIES, VALIDATED, mark, upstream

# Operator-facing metrics: NOT private, never written to a release (docs/DESIGN.md section 4).
METRICS_NAMESPACE = "beam_expmech.non_private"
CLAMPED = "clamped_values:"  # + a column with a grid: its values outside [lower, upper], clamped into an end bin
GOOD, DEAD = "good", "dead"


# Below this many files, their row groups are listed when the graph is built: Beam's Dask runner keeps up to 128
# of a Create's elements in one partition, and every step after them, so that the row groups of a few files, found
# inside the graph, ran on one worker alone. Above it, files enough to spread, and a graph that stays small (a
# Create's elements travel in it, and Dataflow limits its size).
_LISTED_FILES = 128


def _read_and_tell(split: tuple, columns: Sequence[str], delimiter: str, relay: Relay) -> Iterator:
    yield from readers.read_split(split, columns, delimiter)
    relay(tuple(split))  # where someone listens: it knows the split's bytes (readers.split_bytes)


def _splits(entry: tuple) -> list[tuple[str, str, int | None]]:
    """A file's splits (``readers.splits``), or a split listed already, itself."""
    return readers.splits(*entry) if len(entry) == 2 else [entry]


class ReadRecordBatches(beam.PTransform):
    """Files (local, glob or gs://) as record batches of the needed columns.

    col: pyarrow.RecordBatch, and MalformedRows for CSV rows with the wrong number of fields
    (ValidateBatches sends them to the dead letter). Parquet files are read in parallel by row
    group, CSV and Avro by file; nothing is ever materialised whole. The files' schemas are checked
    when it is built (``readers.check_columns``): every file has the columns, each column of one type
    family in all (a unit read as 5 in one file and as "5" or 5.0 in another would be two units).
    ``progress``: told each split read (path, format, row group: its bytes are its file's, ``readers.split_bytes``,
    not anything read from it), where a listener hears it (``beam_expmech.progress``).
    """

    def __init__(
        self, files: Sequence[str], fmt: str | None, columns: Sequence[str | ColumnSpec], *, delimiter: str = ",",
        progress: Relay | None = None,
    ):  # fmt: skip
        super().__init__()
        self.delimiter = readers.check_delimiter(delimiter)
        self.progress = progress
        specs = [c for c in columns if isinstance(c, ColumnSpec)]
        self.columns = [c.name if isinstance(c, ColumnSpec) else c for c in columns]
        identities = [s.name for s in specs if s.kind == "any"]
        kinds = {s.name: s.kind for s in specs}
        self.families = readers.check_columns(files, fmt, self.columns, identities, kinds, delimiter=delimiter)
        self.entries = [(path, readers.file_format(path, fmt)) for path in files]
        if len(self.entries) < _LISTED_FILES:
            self.entries = [split for entry in self.entries for split in readers.splits(*entry)]

    def expand(self, pbegin):
        batches = (
            pbegin
            | "Files" >> beam.Create(self.entries)  # col: (path, format[, row group or None: a whole file])
            | "Splits" >> beam.FlatMap(_splits)  # col: (path, format, row group or None)
            | "Spread" >> beam.Reshuffle()
            | "Read" >> self._read()  # col: RecordBatch
        )
        return mark(batches, FAMILIES, self.families)  # each column's type family, one in every file

    def _read(self) -> beam.PTransform:
        if self.progress is None:
            return beam.FlatMap(readers.read_split, self.columns, self.delimiter)
        return beam.FlatMap(_read_and_tell, self.columns, self.delimiter, self.progress)


class _Validate(beam.DoFn):
    """col: RecordBatch | MalformedRows -> col: (GOOD, RecordBatch) or (DEAD, pa.Table).

    Tags in the element, not Beam's tagged outputs: Beam's Dask runner (2.77) gives every consumer of
    a multi-output ParDo all of its outputs, so bad rows would reach the counts and good ones the dead
    letter. Two filters after it split them the same way on every runner.
    """

    def __init__(self, specs: Sequence[ColumnSpec]):
        self.specs = list(specs)
        self.rows = Metrics.counter(METRICS_NAMESPACE, "rows_read")
        self.rejected = Metrics.counter(METRICS_NAMESPACE, "dead_letter_rows")

    def process(self, batch: pa.RecordBatch | MalformedRows):
        if isinstance(batch, MalformedRows):  # the reader could not split these rows into fields
            self.rows.inc(batch.rows.num_rows)
            self.rejected.inc(batch.rows.num_rows)
            yield DEAD, batch.rows
            return
        good, bad, clamped = check_batch(batch, self.specs)
        self.rows.inc(batch.num_rows)
        for column, count in clamped.items():
            if count:
                Metrics.counter(METRICS_NAMESPACE, CLAMPED + column).inc(count)
        if good.num_rows:
            yield GOOD, good
        if bad is not None:
            self.rejected.inc(bad.num_rows)
            yield DEAD, bad


def _tagged(element: tuple, tag: str) -> Iterator:
    if element[0] == tag:
        yield element[1]


class Validated(NamedTuple):
    """What ``ValidateBatches`` returns: ``good`` (col: RecordBatch) and ``dead`` (col: pyarrow.Table)."""

    good: beam.PCollection
    dead: beam.PCollection


class ValidateBatches(beam.PTransform):
    """Split each batch into good rows (typed) and bad rows (text, with a reason); rows the reader
    set aside (MalformedRows) are all bad.

    Returns ``Validated``: ``good`` (RecordBatch) and ``dead`` (pyarrow.Table) PCollections.
    Bad rows are counted in the non-private counter ``dead_letter_rows``; a column with a grid's
    values clamped into an end bin in ``clamped_values:COLUMN`` (non-private too).
    """

    def __init__(self, specs: Sequence[ColumnSpec]):
        super().__init__()
        self.specs = list(specs)

    # No return annotation: Beam (2.78 on) reads one as the output's type hint, and warns at a NamedTuple.
    def expand(self, batches):
        tagged = batches | "Check" >> beam.ParDo(_Validate(self.specs))  # col: (GOOD | DEAD, rows)
        good = tagged | "Good" >> beam.FlatMap(_tagged, GOOD)
        read = upstream(batches, FAMILIES)  # the files' type families, where one ReadRecordBatches feeds it
        families = read[0] if len(read) == 1 and read[0] is not None else {}
        # An identity's form depends on its type (5, 5.0 and "5" are three forms); any other kind's on the kind.
        checked = {s.name: (s.kind, families.get(s.name) if s.kind == "any" else None) for s in self.specs}
        return Validated(good=mark(good, VALIDATED, checked), dead=tagged | "Dead" >> beam.FlatMap(_tagged, DEAD))


class _ConcatTables(beam.CombineFn):
    """Gathers bad-row tables into one (the dead letter is expected to be small)."""

    def __init__(self, schema: pa.Schema):
        self.schema = schema

    def create_accumulator(self) -> list:
        return []

    def add_input(self, tables: list, table: pa.Table) -> list:
        tables.append(table)
        return tables

    def merge_accumulators(self, accumulators) -> list:
        return [t for tables in accumulators for t in tables]

    def extract_output(self, tables: list) -> pa.Table:
        return pa.concat_tables([self.schema.empty_table(), *tables])


class WriteDeadLetter(beam.PTransform):
    """Every rejected row, as one CSV file with a ``reason`` column, written atomically.

    The file is written even when no row was rejected (a header only), so its absence never
    has to be interpreted. It holds raw input rows: it is an operator's file, not a release.
    """

    def __init__(self, path: str, columns: Sequence[str]):
        super().__init__()
        self.path = path
        self.schema = pa.schema([(c, pa.string()) for c in columns] + [(reason_column(columns), pa.string())])

    def expand(self, dead):
        path = self.path
        return (
            dead
            | "Gather" >> beam.CombineGlobally(_ConcatTables(self.schema))
            | "Write" >> beam.Map(lambda table: writers.write_atomically(path, writers.table_to_csv(table)))
        )
