"""One pass over the data on Beam: read the files (or rows), validate, bound, count (a predicate family, or the
keys of a column), then the final step and its write."""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter

from beam_expmech.io import readers, writers
from beam_expmech.io.errors import InputError, describe_error, first_line
from beam_expmech.io.validation import ColumnSpec
from beam_expmech.predicates import PredicateFamily
from beam_expmech.progress import Relay, listening
from beam_expmech.releases import runners
from beam_expmech.releases.declaration import Files, PrivacyUnit, Rows
from beam_expmech.synth import Progress
from beam_expmech.transforms import (
    BoundContributions,
    PredicateCounts,
    ReadRecordBatches,
    ValidateBatches,
    WriteDeadLetter,
)
from beam_expmech.transforms.bounding import DEFAULT_BOUNDING_SHARDS, shards_for
from beam_expmech.transforms.counts import DEFAULT_SHARD_SIZE
from beam_expmech.transforms.keys import KeyCounts
from beam_expmech.transforms.read import CLAMPED, METRICS_NAMESPACE
from beam_expmech.transforms.rows import RowsToBatches

_LOG = logging.getLogger(__name__)


class JobFailedError(RuntimeError):
    """The job stopped after it started reading (a corrupt file, a lost worker): nothing was released,
    and the budget it reserved stays spent, since the data may have been read."""


@dataclass(frozen=True)
class Reading:
    """How one run reads its data, whatever it computes: the ``source`` (its ``files`` matched and checked, or
    rows), the privacy ``unit`` it bounds, the rejected rows' ``dead_letter`` (None: counted, not kept), the
    Beam ``pipeline_args``, the test ``seed``, and ``progress``: told, where the runner reads in this process
    (the DirectRunner), the bytes of the files read so far ("reading 3 files (45.1 MB)", done, total), and
    once a pass has read everything, total of total (sizes of files: public, as their names are)."""

    source: Files | Rows
    files: tuple[str, ...]
    unit: PrivacyUnit
    dead_letter: str | None = None
    pipeline_args: tuple[str, ...] = ()
    seed: int | None = None
    progress: Progress | None = None  # told how much of the files' bytes each pass has read
    progress_token: str = field(default_factory=lambda: uuid.uuid4().hex, compare=False)
    draws_told: bool = True  # whether progress hears of the draws too (a generator's rounds, the row fitting)
    guard: Callable[[], None] | None = None  # called by the last step right before it publishes (LeaseGuard)

    def describe(self) -> str:
        """Where the data come from, as a log line or a dry run says it (a count and a pattern, no data)."""
        if isinstance(self.source, Rows):
            return "rows of a PCollection"
        return f"{len(self.files)} file(s) matching {self.source.pattern}"


def check_input(
    source: Files | Rows,
    specs: Sequence[ColumnSpec],
    labels: Mapping[str, Sequence[str]] | None = None,
    *,
    unit: PrivacyUnit,
    writes: Mapping[str, str | None] | None = None,
) -> tuple[str, ...]:
    """The input files, after checking (before any budget) that each has every needed column, and, in typed
    files (Parquet, Avro), of a type the release can read: numbers where it reads numbers, and values that
    can equal the public ``labels`` a column is matched against (validation.schema_conflict); none of them is
    one of the places the run ``writes`` ({what: path}). Rows: their columns are checked as they are read."""
    names = [s.name for s in specs]
    if unit.column is not None and names.count(unit.column) > 1:  # a column is read once, as the unit or a value
        raise ValueError(f"the privacy unit {unit.column!r} is also a column the release reads")
    reserved = [n for n in names if n.startswith("__")]  # the columns bounding adds (HASH, PRIORITY, CANDIDATE)
    if reserved:
        raise ValueError(f"column {reserved[0]!r}: names beginning with '__' are the library's own; rename it")
    if isinstance(source, Rows):
        return ()
    files = readers.match_files(source.pattern)
    read = {writers.location(f) for f in files}
    written = [what for what, path in (writes or {}).items() if path and writers.location(path) in read]
    if written:
        raise ValueError(f"{written[0]} is one of the input files: a run must not write over its data")
    identities = [s.name for s in specs if s.kind == "any"]
    labels = {**{s.name: s.labels for s in specs if s.labels}, **(labels or {})}  # a domain's labels are matched too
    kinds = {s.name: s.kind for s in specs}
    readers.check_columns(files, source.format, names, identities, kinds, labels, delimiter=source.delimiter)
    return tuple(files)


def read_valid_batches(pipeline: beam.Pipeline, reading: Reading, specs: Sequence[ColumnSpec]):
    """col: RecordBatch of the rows that passed validation, and the rest's dead letter's write (a PCollection of
    one element, once written), or None without a dead letter: rejected rows are then only counted (the
    non-private counter)."""
    if isinstance(reading.source, Rows):
        try:
            rows = reading.source.read(pipeline)
        except Exception as error:  # the user's own code: its text, even an InputError's, may quote a row
            raise ValueError(f"Rows' read failed when the graph was built: {type(error).__name__}") from None
        if not isinstance(rows, beam.PCollection):
            raise ValueError(f"Rows' read must return a PCollection of the pipeline it is given, got "
                             f"{type(rows).__name__}")  # fmt: skip
        extra = {} if reading.source.extractors is None else {"extractors": reading.source.extractors}
        checked = rows | "Validate" >> RowsToBatches(schema=specs, identity_types=reading.source.identity_types,
                                                     **extra)  # fmt: skip
    else:
        relay = None if reading.progress is None else Relay(reading.progress_token + "/read")
        read = ReadRecordBatches(reading.files, reading.source.format, specs, delimiter=reading.source.delimiter,
                                 progress=relay)  # fmt: skip
        batches = pipeline | "Read" >> read
        checked = batches | "Validate" >> ValidateBatches(specs)
    if reading.dead_letter is None:
        return checked.good, None
    written = checked.dead | "DeadLetter" >> WriteDeadLetter(reading.dead_letter, [s.name for s in specs])
    return checked.good, written


@dataclass(frozen=True)
class CountingJob:
    """One pass over the data: its columns as declared (``specs``), what to count (``family``, in candidate
    shards of ``shard_size``), and the final step (``release``) that turns col: (candidate shard, counts) into
    the one element the job releases."""

    specs: Sequence[ColumnSpec]
    family: PredicateFamily
    release: beam.PTransform
    shard_size: int = DEFAULT_SHARD_SIZE

    def bounding(self, reading: Reading) -> beam.PTransform:
        """col: RecordBatch -> col: RecordBatch: the rows the family counts, as it carries them (``compact_rows``:
        a public function of each row), at most K of them per privacy unit."""
        unit = reading.unit
        return beam.Map(self.family.compact_rows) | BoundContributions(
            unit.column, unit.max_rows, seed=reading.seed, shards=shards(reading.files), keep_unit=False
        )

    def counting(self, reading: Reading) -> beam.PTransform:
        """col: RecordBatch (bounded: compacted) -> col: (candidate shard, counts)."""
        family = self.family.compacted if reading.unit.column else self.family
        return PredicateCounts(family, shard_size=self.shard_size)


@dataclass(frozen=True)
class KeyCountingJob:
    """One pass that counts the values of ``key_column`` found in the data (no candidate list): each privacy
    unit keeps at most K rows over at most ``max_keys`` keys, and ``release`` turns
    col: (key shard, Table[key, rows, units]) into the one element the job releases."""

    specs: Sequence[ColumnSpec]
    key_column: str
    max_keys: int
    release: beam.PTransform

    def bounding(self, reading: Reading) -> beam.PTransform:
        unit = reading.unit
        return BoundContributions(unit.column, unit.max_rows, key_column=self.key_column, max_keys=self.max_keys,
                                  seed=reading.seed, shards=shards(reading.files))  # fmt: skip

    def counting(self, reading: Reading) -> beam.PTransform:
        return KeyCounts(self.key_column, unit_column=reading.unit.column)


def shards(files: Sequence[str]) -> int:
    """How many shards bounding cuts the units into: from the input's size (see bounding.shards_for)."""
    size = readers.total_size(files) if files else None
    return DEFAULT_BOUNDING_SHARDS if size is None else shards_for(size)


def counting_pipeline(
    reading: Reading, job: CountingJob | KeyCountingJob, write: Callable[[object], None]
) -> beam.Pipeline:
    """The job's graph, not yet run: read, validate (rejected rows to the dead letter, if any), bound (with a
    unit column), count, release, ``write`` it."""
    pipeline = beam.Pipeline(options=runners.pipeline_options(reading.pipeline_args))
    if reading.guard is not None:
        write = functools.partial(_guarded, reading.guard, write)
    batches, dead_letter_written = read_valid_batches(pipeline, reading, job.specs)
    if reading.unit.column:
        batches = batches | "Bound" >> job.bounding(reading)
    release = (
        batches
        | "Count" >> job.counting(reading)  # col: (shard, counts)
        | "Release" >> job.release  # col: the release, once
    )
    if dead_letter_written is None:
        _ = release | "Write" >> beam.Map(write)
        return pipeline
    # The release is written last, once the dead letter is: a job that fails has released nothing, and one
    # that wrote its release has nothing left to fail (the ledger marks it done). One last step is also
    # what Beam's Dask runner needs: it computes only the graph's last step and what that step reads, so
    # a write on a branch of its own, as the dead letter's was, would never run there.
    _ = (
        (release | "Tag" >> beam.Map(_as_release), dead_letter_written | "Done" >> beam.Map(_as_done))
        | "Join" >> beam.Flatten()  # col: (is the release, payload), twice
        | "After" >> beam.combiners.ToList()
        | "Write" >> beam.Map(_write_release, write)
    )
    return pipeline


def _guarded(guard: Callable[[], None], write: Callable[[object], None], payload: object) -> None:
    guard()  # raises where this attempt no longer holds its release id: nothing published
    write(payload)


def _as_release(payload: object) -> tuple[bool, object]:
    return True, payload


def _as_done(_: object) -> tuple[bool, None]:
    return False, None


def _write_release(joined: list[tuple[bool, object]], write: Callable[[object], None]) -> None:
    (payload,) = [payload for is_release, payload in joined if is_release]
    write(payload)


def run_pipeline(reading: Reading, pipeline: beam.Pipeline) -> None:
    """Run ``pipeline`` (built by ``counting_pipeline``) to the end: returns once its release is written, and
    raises JobFailedError (one line) for whatever stopped it, the budget it reserved staying spent."""
    _LOG.info("running on %s: %s", pipeline.runner.__class__.__name__, reading.describe())
    log_dead_letter(reading.dead_letter)
    result = None
    try:
        with _telling_progress(reading) as finished:
            result = pipeline.run()
            runners.wait(result, reading.pipeline_args)
            finished()
    except runners.NoWorkerError as error:  # ours: says no data
        raise JobFailedError(f"the job failed: {error}; nothing was released, the budget reserved for it "
                             "stays spent") from error  # fmt: skip
    except Exception as error:  # whatever the runner raises: the user gets one line, the ledger "failed"
        raise JobFailedError(f"the job failed: {describe_error(error)}; nothing was released (a table written "
                             "without its manifest is none), the budget reserved for it stays spent"
                             ) from error  # fmt: skip
    finally:
        runners.close(result)
    # The release is written: from here on nothing may raise, or the ledger would mark a written release failed.
    log_row_counts(result)


@contextlib.contextmanager
def _telling_progress(reading: Reading) -> Iterator[Callable[[], None]]:
    """Within the block, ``reading.progress`` is told each split read (in this process), and whatever a step told
    through ``Relay(reading.progress_token)`` (a generator's rounds); the block calls what it is given once the
    pass has read everything."""
    if reading.progress is None:
        yield lambda: None
        return
    if isinstance(reading.source, Rows):  # no files: what steps tell (a generator's rounds) only
        with listening(reading.progress_token, reading.progress):
            yield lambda: None
        return
    total, done, lock = float(readers.total_bytes(reading.files)), [0.0], threading.Lock()
    what = f"reading {len(reading.files)} file{'' if len(reading.files) == 1 else 's'} ({total / 1e6:,.1f} MB)"
    shares = functools.cache(readers.split_bytes)  # a file's splits' bytes, read once a file

    def tell(split: tuple[str, str, int | None]) -> None:
        path, fmt, group = split
        with lock:  # splits may end on several of the runner's threads at once
            done[0] = min(done[0] + shares(path, fmt)[group], total)
            if done[0] < total:  # the last call, total of total, once the pass is over
                reading.progress(what, done[0], total)

    with listening(reading.progress_token + "/read", tell), listening(reading.progress_token, reading.progress):
        yield lambda: reading.progress(what, total, total)


def built(build: Callable[[], beam.Pipeline]) -> beam.Pipeline:
    """``build()``'s graph, built before the charge: what breaks it (a Beam option such as a pickler not installed,
    a strict type check, one of the library's own refusals) is a ValueError, nothing spent. No row is read to
    build a graph, so an error's text holds public information only."""
    try:
        return build()
    except (ValueError, InputError):
        raise
    except Exception as error:
        raise ValueError(f"the job's graph cannot be built: {type(error).__name__}: {first_line(error)}") from None


def read_back(path: str) -> dict:
    """A JSON document a job wrote, read back where the job was started: on a cluster a worker wrote it, so
    the path must be one this machine reaches too (gs://, a shared file system)."""
    try:
        return readers.read_json(path)
    except OSError as error:
        raise ValueError(
            f"the release was written to {path}, but cannot be read back here ({type(error).__name__}): on a "
            "cluster, the output must be a path the workers and this machine share (gs://, a shared file system)"
        ) from None


def log_dead_letter(dead_letter: str | None) -> None:
    """One fixed line, whatever the data: where rejected rows go, or how to keep them. Whether any row was
    rejected is not said at INFO or above: one person's bad row would be told by the line's presence."""
    if dead_letter is None:
        _LOG.info(
            "rows that fail validation are counted (at DEBUG, non-private), not kept: a dead letter (--dead-letter "
            "PATH) keeps them, with the reason (raw rows: an operator's file, outside any published folder)"
        )
    else:
        _LOG.info("rows that fail validation, if any, go to %s with the reason (raw rows: an operator's file)",
                  dead_letter)  # fmt: skip


def log_row_counts(result: beam.runners.runner.PipelineResult) -> None:
    """The rows read and rejected, and the values clamped into a numeric column's end bins, from the
    job's counters: exact, so not private, and logged at DEBUG only, labelled so. At INFO and above
    nothing that depends on the data (not even whether a row was rejected): logs travel further than
    the dead letter, and an exact count beside a release undoes its noise (the synthesize manifest's
    noisy row count)."""
    counts = {"rows_read": 0, "dead_letter_rows": 0}
    try:
        counters = result.metrics().query(MetricsFilter().with_namespace(METRICS_NAMESPACE))["counters"]
    except Exception as error:  # optional: the Dask runner has none ("collecting metrics will come later!")
        _LOG.debug("non-private: the runner's counters are unavailable (%s): rows read and rejected unknown",
                   type(error).__name__)  # fmt: skip
        return
    clamped: dict[str, int] = {}
    for counter in counters:
        name, value = counter.key.metric.name, counter.committed or counter.attempted or 0
        if name in counts:
            counts[name] += value
        elif name.startswith(CLAMPED):
            clamped[name.removeprefix(CLAMPED)] = clamped.get(name.removeprefix(CLAMPED), 0) + value
    clamps = "".join(f"; {n} values of {c} clamped into its end bins" for c, n in sorted(clamped.items()) if n)
    _LOG.debug("non-private: read %d rows; %d rejected%s", counts["rows_read"], counts["dead_letter_rows"], clamps)
