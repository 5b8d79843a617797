"""One pass over the data on Beam: read the files, validate, bound, count (a predicate family, or the keys of a
column), then the final step."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter

from beam_expmech.accounting import Release
from beam_expmech.io import readers, writers
from beam_expmech.io.errors import InputError, describe_error, first_line
from beam_expmech.io.validation import ColumnSpec
from beam_expmech.predicates import PredicateFamily
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
from pipelines import budget, runners

_LOG = logging.getLogger(__name__)


class JobFailedError(RuntimeError):
    """The job stopped after it started reading (a corrupt file, a lost worker): nothing was released,
    and the budget it reserved stays spent, since the data may have been read."""


def check_input(
    args: argparse.Namespace, specs: Sequence[ColumnSpec], labels: Mapping[str, Sequence[str]] | None = None
) -> list[str]:
    """The input files, after checking (before any budget) that each has every needed column, and, in typed
    files (Parquet, Avro), of a type the release can read: numbers where it reads numbers, and values that
    can equal the public ``labels`` a column is matched against (validation.schema_conflict)."""
    names = [s.name for s in specs]
    if names.count(args.privacy_unit) > 1:  # a column is read once, as the unit or as a value
        raise ValueError(f"--privacy-unit {args.privacy_unit!r} is also a column the release reads")
    reserved = [n for n in names if n.startswith("__")]  # the columns bounding adds (HASH, PRIORITY, CANDIDATE)
    if reserved:
        raise ValueError(f"column {reserved[0]!r}: names beginning with '__' are the library's own; rename it")
    files = readers.match_files(args.input)
    read = {writers.location(f) for f in files}
    written = [f"--{f.replace('_', '-')}" for f in ("output", "dead_letter") if getattr(args, f, None)
               and writers.location(getattr(args, f)) in read]  # fmt: skip
    if written:
        raise ValueError(f"{written[0]} is one of the input files: a run must not write over its data")
    identities = [s.name for s in specs if s.kind == "any"]
    labels = {**{s.name: s.labels for s in specs if s.labels}, **(labels or {})}  # a domain's labels are matched too
    readers.check_columns(files, args.format, names, identities, {s.name: s.kind for s in specs}, labels)
    return files


def read_valid_batches(
    pipeline: beam.Pipeline,
    files: Sequence[str],
    fmt: str | None,
    specs: Sequence[ColumnSpec],
    dead_letter: str | None,
):
    """col: RecordBatch of the rows that passed validation, and the rest's ``dead_letter`` file's write (a
    PCollection of one element, once written), or None without a dead letter: rejected rows are then only
    counted (the non-private counter)."""
    batches = pipeline | "Read" >> ReadRecordBatches(files, fmt, specs)
    checked = batches | "Validate" >> ValidateBatches(specs)
    if dead_letter is None:
        return checked.good, None
    return checked.good, checked.dead | "DeadLetter" >> WriteDeadLetter(dead_letter, [s.name for s in specs])


@dataclass(frozen=True)
class CountingJob:
    """One pass over the data: the input ``files``, their columns as declared (``specs``), what to count
    (``family``, in candidate shards of ``shard_size``), and the final step (``release``) that turns
    col: (candidate shard, counts) into the one element the job releases."""

    files: Sequence[str]
    specs: Sequence[ColumnSpec]
    family: PredicateFamily
    release: beam.PTransform
    shard_size: int = DEFAULT_SHARD_SIZE

    def bounding(self, args: argparse.Namespace) -> beam.PTransform:
        """col: RecordBatch -> col: RecordBatch: the rows the family counts, as it carries them (``compact_rows``:
        a public function of each row), at most --max-rows-per-unit of them per --privacy-unit."""
        return beam.Map(self.family.compact_rows) | BoundContributions(
            args.privacy_unit, args.max_rows_per_unit, seed=args.seed, shards=shards(self.files), keep_unit=False
        )

    def counting(self, args: argparse.Namespace) -> beam.PTransform:
        """col: RecordBatch (bounded: compacted) -> col: (candidate shard, counts)."""
        family = self.family.compacted if args.privacy_unit else self.family
        return PredicateCounts(family, shard_size=self.shard_size)


@dataclass(frozen=True)
class KeyCountingJob:
    """One pass that counts the values of ``key_column`` found in the data (no candidate list): each
    --privacy-unit keeps at most K rows over at most ``max_keys`` keys, and ``release`` turns
    col: (key shard, Table[key, rows, units]) into the one element the job releases."""

    files: Sequence[str]
    specs: Sequence[ColumnSpec]
    key_column: str
    max_keys: int
    release: beam.PTransform

    def bounding(self, args: argparse.Namespace) -> beam.PTransform:
        return BoundContributions(args.privacy_unit, args.max_rows_per_unit, key_column=self.key_column,
                                  max_keys=self.max_keys, seed=args.seed, shards=shards(self.files))  # fmt: skip

    def counting(self, args: argparse.Namespace) -> beam.PTransform:
        return KeyCounts(self.key_column, unit_column=args.privacy_unit)


def shards(files: Sequence[str]) -> int:
    """How many shards bounding cuts the units into: from the input's size (see bounding.shards_for)."""
    size = readers.total_size(files)
    return DEFAULT_BOUNDING_SHARDS if size is None else shards_for(size)


def counting_pipeline(
    args: argparse.Namespace,
    beam_args: list[str],
    job: CountingJob | KeyCountingJob,
    write: Callable[[object], None],
    dead_letter: str | None = None,
) -> beam.Pipeline:
    """The job's graph, not yet run: read, validate (rejected rows to ``dead_letter``, if any), bound (with
    --privacy-unit), count, release, ``write`` it."""
    pipeline = beam.Pipeline(options=runners.pipeline_options(beam_args))
    batches, dead_letter_written = read_valid_batches(pipeline, job.files, args.format, job.specs, dead_letter)
    if args.privacy_unit:
        batches = batches | "Bound" >> job.bounding(args)
    release = (
        batches
        | "Count" >> job.counting(args)  # col: (shard, counts)
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


def _as_release(payload: object) -> tuple[bool, object]:
    return True, payload


def _as_done(_: object) -> tuple[bool, None]:
    return False, None


def _write_release(joined: list[tuple[bool, object]], write: Callable[[object], None]) -> None:
    (payload,) = [payload for is_release, payload in joined if is_release]
    write(payload)


def run_counting_job(
    args: argparse.Namespace,
    beam_args: list[str],
    job: CountingJob | KeyCountingJob,
    write: Callable[[object], None] | None = None,
    dead_letter: str | None = None,
    pipeline: beam.Pipeline | None = None,
) -> None:
    """Run ``pipeline`` (by default ``counting_pipeline``, built here) to the end.

    By default the release is a JSON-ready dict, written to --output (``read_release`` reads it back);
    ``write`` replaces that. Rejected rows go to ``dead_letter`` (default: none, counted only). Returns once
    the release is written: in ``budget.charge``'s block, nothing else, so that the ledger marks it done
    exactly when it is written.
    """
    if pipeline is None:
        pipeline = counting_pipeline(args, beam_args, job, write or _json_writer(args.output), dead_letter)
    _LOG.info(
        "running on %s: %d input file(s) matching %s", pipeline.runner.__class__.__name__, len(job.files), args.input
    )
    log_dead_letter(dead_letter)
    result = None
    try:
        result = pipeline.run()
        runners.wait(result, beam_args)
    except runners.NoWorkerError as error:  # ours: says no data
        raise JobFailedError(f"the job failed: {error}; nothing was released, the budget reserved for it "
                             "stays spent") from error  # fmt: skip
    except Exception as error:  # whatever the runner raises: the user gets one line, the ledger "failed"
        raise JobFailedError(f"the job failed: {describe_error(error)}; nothing was released, the budget "
                             "reserved for it stays spent") from error  # fmt: skip
    finally:
        runners.close(result)
    # The release is written: from here on nothing may raise, or the ledger would mark a written release failed.
    log_row_counts(result)


def built(build: Callable[[], beam.Pipeline]) -> beam.Pipeline:
    """``build()``'s graph, built before the charge: what breaks it (a Beam option such as a pickler not installed,
    a strict type check, one of the library's own refusals) is one line, exit code 2, nothing spent. No row is
    read to build a graph, so an error's text holds public information only."""
    try:
        return build()
    except (ValueError, InputError):
        raise
    except Exception as error:
        raise ValueError(f"the job's graph cannot be built: {type(error).__name__}: {first_line(error)}") from None


def _json_writer(output: str) -> Callable[[object], None]:
    def write(payload: object) -> None:
        writers.write_json(output, payload)

    return write


def run_charged(
    args: argparse.Namespace,
    beam_args: list[str],
    job: CountingJob | KeyCountingJob,
    cost: Release,
    pipeline: str,
    *,
    delta: float = 0.0,
) -> dict:
    """The JSON release of ``job``, charged: the runner checked and the graph built first (a Dask scheduler
    that does not answer, a Beam option that breaks the graph: nothing spent), ``cost`` charged before any row
    is read, and the release read back after the charge's block, so that the ledger marks the run done exactly
    when the release is written."""
    runners.check_runner(beam_args)
    graph = built(lambda: counting_pipeline(args, beam_args, job, _json_writer(args.output), args.dead_letter))
    with budget.charge(args, cost, pipeline, delta=delta):
        run_counting_job(args, beam_args, job, dead_letter=args.dead_letter, pipeline=graph)
    return read_release(args.output)


def read_release(output: str) -> dict:
    """The JSON release ``run_counting_job`` wrote, read back where the job was started: on a cluster a
    worker wrote it, so --output must be a path this machine reaches too (gs://, a shared file system)."""
    try:
        return readers.read_json(output)
    except OSError as error:
        raise ValueError(
            f"the release was written to {output}, but cannot be read back here ({type(error).__name__}): on a "
            "cluster, --output must be a path the workers and this machine share (gs://, a shared file system)"
        ) from None


def log_dead_letter(dead_letter: str | None) -> None:
    """One fixed line, whatever the data: where rejected rows go, or how to keep them. Whether any row was
    rejected is not said at INFO or above: one person's bad row would be told by the line's presence."""
    if dead_letter is None:
        _LOG.info(
            "rows that fail validation are counted (at DEBUG, non-private), not kept: --dead-letter PATH keeps "
            "them, with the reason (raw rows: an operator's file, outside any published folder)"
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
