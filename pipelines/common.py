"""What every pipeline shares: flags, the one-line error convention, and reading validated batches."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import posixpath
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions

from beam_expmech import io
from beam_expmech.accounting import PrivacyBudget, Release
from beam_expmech.ledger import Ledger, OverspendError, UnknownDatasetError, budget_of
from beam_expmech.manifest import BETA, manifest
from beam_expmech.predicates import PredicateFamily
from beam_expmech.transforms import (
    BoundContributions,
    PredicateCounts,
    ReadRecordBatches,
    ValidateBatches,
    WriteDeadLetter,
)
from beam_expmech.transforms.counts import DEFAULT_SHARD_SIZE
from beam_expmech.transforms.read import METRICS_NAMESPACE

_LOG = logging.getLogger(__name__)

JOB_ERROR = 1
USAGE_ERROR = 2
BUDGET_ERROR = 3
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class JobFailedError(RuntimeError):
    """The job stopped after it started reading (a corrupt file, a lost worker): nothing was released,
    and the budget it reserved stays spent, since the data may have been read."""


def add_input_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", required=True, help="a file, a glob, or gs://bucket/path (Parquet, CSV or Avro)")
    parser.add_argument("--format", choices=io.FORMATS, help="the input format (default: from the file extension)")
    parser.add_argument(
        "--dead-letter",
        help="where rejected rows go, with the reason (CSV, local or gs://): raw data, an operator's file, to keep "
        "out of any published folder (default: OUT.dead_letter.csv beside --output)",
    )


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line (``error: ...``, exit 2), not the whole usage text.

    Every ``--some-flag`` is also accepted as ``--some_flag`` (not shown in --help): Dataflow
    Flex Template parameter names use underscores. Every command takes ``--log-level``.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.add_argument(
            "--log-level", choices=LOG_LEVELS, default="INFO", help="what to log on stderr (default INFO)"
        )

    def _add_action(self, action: argparse.Action) -> argparse.Action:
        action = super()._add_action(action)
        for name in action.option_strings:
            if name.startswith("--") and "-" in name[2:]:
                self._option_string_actions["--" + name[2:].replace("-", "_")] = action
        return action

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_ERROR, f"error: {self.prog}: {message} (see --help)\n")


def add_privacy_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--epsilon",
        type=float,
        required=True,
        help="privacy loss: how much one privacy unit can change the release's odds, at most a factor e^epsilon "
        "(smaller: more private, noisier)",
    )
    parser.add_argument(
        "--privacy-unit", help="the column that identifies whom the guarantee protects (default: each row is one)"
    )
    parser.add_argument(
        "--max-rows-per-unit",
        type=int,
        help="K: each unit keeps at most K rows, drawn at random; the noise grows with K (with --privacy-unit)",
    )
    parser.add_argument(
        "--budget-ledger", help="ledger file (local or gs://) charged with every release of the dataset, across runs"
    )
    parser.add_argument("--dataset-id", help="the dataset's id in --budget-ledger, whose total budget this run spends")
    parser.add_argument("--dry-run", action="store_true", help="print the plan; read no data, spend nothing")
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)  # tests only: the release is then not private


def charge(
    args: argparse.Namespace, release: Release, pipeline: str, *, delta: float = 0.0
) -> contextlib.AbstractContextManager:
    """Charge ``release`` to this run's (--epsilon, delta) budget and, with --budget-ledger, reserve
    it for --dataset-id now, before any data is read; the ledger marks it done or failed when
    the block ends. Raises (nothing spent) if it does not fit."""
    PrivacyBudget(epsilon=args.epsilon, delta=delta).charge(release)
    if args.budget_ledger is None:
        return contextlib.nullcontext()
    parameters = {k: v for k, v in vars(args).items() if isinstance(v, (str, int, float, bool, type(None)))}
    ledger = Ledger(args.budget_ledger)
    try:
        ledger.dataset(args.dataset_id)
    except UnknownDatasetError:
        raise ValueError(
            f"dataset {args.dataset_id!r} has no budget in {args.budget_ledger} (set one with: python -m "
            f"pipelines.ledger init --budget-ledger {args.budget_ledger} --dataset-id {args.dataset_id} --epsilon E)"
        ) from None
    return ledger.charged(
        args.dataset_id, release, pipeline=pipeline, parameters=parameters, output=getattr(args, "output", None)
    )


def release_manifest(
    args: argparse.Namespace,
    *,
    mechanism: str,
    cost: Release,
    accuracy: dict | None,
    beta: float | None = BETA,
    delta: float = 0.0,
    **details,
) -> dict:
    """The public fields every release carries (beam_expmech.manifest), from this run's flags, then ``details``."""
    return manifest(
        mechanism=mechanism,
        epsilon=args.epsilon,
        delta=delta,
        cost=cost,
        privacy_unit=args.privacy_unit,
        max_rows_per_unit=args.max_rows_per_unit,
        accuracy=accuracy,
        beta=beta,
        private_randomness=args.seed is None,
        **details,
    )


def dry_run(args: argparse.Namespace, release: Release, files: Sequence[str], plan: dict) -> bool:
    """With --dry-run, print what the run would do and spend (and the ledger's remaining budget)."""
    if not args.dry_run:
        return False
    unit = "each row" if args.privacy_unit is None else f"{args.privacy_unit}, at most {args.max_rows_per_unit} rows"
    lines = [
        "dry run: no data read, nothing spent",
        f"  input: {len(files)} file(s) matching {args.input}",
        f"  privacy unit: {unit}",
        f"  cost: {release.describe()}: {release.label}",
        *(f"  {key}: {json.dumps(value)}" for key, value in plan.items()),
    ]
    if args.budget_ledger is not None:
        budget = budget_of(Ledger(args.budget_ledger).dataset(args.dataset_id))
        lines.append(
            f"  ledger: dataset {args.dataset_id!r} has {budget.remaining():g} of epsilon={budget.epsilon:g} left"
        )
    print("\n".join(lines))
    return True


def check_unit_flags(args: argparse.Namespace) -> None:
    if (args.budget_ledger is None) != (args.dataset_id is None):
        raise ValueError("--budget-ledger and --dataset-id go together")
    if (args.privacy_unit is None) != (args.max_rows_per_unit is None):
        raise ValueError("--privacy-unit and --max-rows-per-unit go together")
    if args.max_rows_per_unit is not None and args.max_rows_per_unit < 1:
        raise ValueError(f"--max-rows-per-unit must be >= 1, got {args.max_rows_per_unit}")
    if args.dead_letter is not None and posixpath.normpath(args.dead_letter) == posixpath.normpath(args.output):
        raise ValueError("--dead-letter must not be --output: the dead letter holds raw rows")


Domain = dict[str, "int | tuple[str, ...]"]


def read_domain(path: str) -> Domain:
    """DOMAIN.json: {"column": number of codes} (values 0 .. n-1) or {"column": ["label", ...]}.

    A labelled column holds the labels in the data and in the output; inside, each label is its
    position in the list.
    """
    try:
        raw = json.loads(io.read_text(path))
    except ValueError:
        raise ValueError(f"{path}: not a JSON file") from None
    if not isinstance(raw, dict) or not raw:
        raise ValueError(f"{path}: not a JSON object of columns")
    domain: Domain = {}
    for column, value in raw.items():
        if (
            isinstance(value, list)
            and value
            and all(isinstance(v, str) for v in value)
            and len(set(value)) == len(value)
        ):
            domain[column] = tuple(value)
        elif isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            domain[column] = value
        else:
            raise ValueError(f"{path}: column {column!r} needs a size >= 1 or a list of distinct labels, got {value!r}")
    return domain


def domain_sizes(domain: Domain) -> dict[str, int]:
    return {c: v if isinstance(v, int) else len(v) for c, v in domain.items()}


def domain_spec(column: str, value: int | tuple[str, ...]) -> io.ColumnSpec:
    """How to read a column of the domain: int codes in [0, size), or one of its labels (as its code)."""
    if isinstance(value, int):
        return io.ColumnSpec(column, "int", domain=(0, value))
    return io.ColumnSpec(column, "label", labels=value)


def dead_letter_path(output: str, dead_letter: str | None = None) -> str:
    """Where rejected rows go: --dead-letter, or beside the release (OUT.json -> OUT.dead_letter.csv)."""
    return dead_letter or posixpath.splitext(output)[0] + ".dead_letter.csv"


def read_valid_batches(
    pipeline: beam.Pipeline, files: Sequence[str], fmt: str | None, specs: Sequence[io.ColumnSpec], dead_letter: str
):
    """col: RecordBatch of the rows that passed validation; the rest go to the ``dead_letter`` file."""
    batches = pipeline | "Read" >> ReadRecordBatches(files, fmt, [s.name for s in specs])
    checked = batches | "Validate" >> ValidateBatches(specs)
    _ = checked.dead | "DeadLetter" >> WriteDeadLetter(dead_letter, [s.name for s in specs])
    return checked.good


def unit_specs(args: argparse.Namespace) -> list[io.ColumnSpec]:
    """The privacy-unit column, if any: any type, never null."""
    return [io.ColumnSpec(args.privacy_unit, "any")] if args.privacy_unit else []


def check_input(args: argparse.Namespace, specs: Sequence[io.ColumnSpec]) -> list[str]:
    """The input files, after checking that each has every needed column (before any budget)."""
    names = [s.name for s in specs]
    if names.count(args.privacy_unit) > 1:  # a column is read once, as the unit or as a value
        raise ValueError(f"--privacy-unit {args.privacy_unit!r} is also a column the release reads")
    files = io.match_files(args.input)
    io.check_columns(files, args.format, names, identities=[s.name for s in specs if s.kind == "any"])
    return files


def counting_pipeline(
    args: argparse.Namespace,
    beam_args: list[str],
    files: Sequence[str],
    specs: Sequence[io.ColumnSpec],
    family: PredicateFamily,
    release: beam.PTransform,
    write: Callable[[object], None],
    *,
    shard_size: int = DEFAULT_SHARD_SIZE,
) -> beam.Pipeline:
    """The job's graph, not yet run: read, validate, bound, count ``family``, apply ``release``, ``write`` it.

    ``release`` turns col: (candidate shard, counts) into one element: the only thing that
    leaves the pipeline; its candidate shards hold ``shard_size`` candidates each.
    """
    pipeline = beam.Pipeline(options=PipelineOptions(beam_args))
    batches = read_valid_batches(pipeline, files, args.format, specs, dead_letter_path(args.output, args.dead_letter))
    if args.privacy_unit:
        batches = batches | "Bound" >> BoundContributions(args.privacy_unit, args.max_rows_per_unit, seed=args.seed)
    _ = (
        batches
        | "Count" >> PredicateCounts(family, shard_size=shard_size)  # col: (shard, counts)
        | "Release" >> release  # col: dict, once
        | "Write" >> beam.Map(write)
    )
    return pipeline


def run_counting_job(
    args: argparse.Namespace,
    beam_args: list[str],
    files: Sequence[str],
    specs: Sequence[io.ColumnSpec],
    family: PredicateFamily,
    release: beam.PTransform,
    write: Callable[[object], None] | None = None,
    *,
    shard_size: int = DEFAULT_SHARD_SIZE,
) -> dict | None:
    """Build ``counting_pipeline`` and run it to the end.

    By default the release is a JSON-ready dict, written to --output and returned as read back;
    ``write`` replaces that (and nothing is returned).
    """
    output, as_json = args.output, write is None
    if as_json:

        def write(payload):
            io.write_json(output, payload)

    pipeline = counting_pipeline(args, beam_args, files, specs, family, release, write, shard_size=shard_size)
    _LOG.info("running on %s: %d input file(s) matching %s", pipeline.runner.__class__.__name__, len(files), args.input)
    try:
        result = pipeline.run()
        result.wait_until_finish()
    except Exception as error:  # whatever the runner raises: the user gets one line, the ledger "failed"
        raise JobFailedError(f"the job failed: {io.describe_error(error)}; nothing was released, the budget "
                             "reserved for it stays spent") from error  # fmt: skip
    log_row_counts(result, dead_letter_path(args.output, args.dead_letter))
    return io.read_json(output) if as_json else None


def log_row_counts(result: beam.runners.runner.PipelineResult, dead_letter: str) -> None:
    """The rows read and rejected, from the job's counters: exact, so not private, and logged at
    DEBUG only, labelled so. At INFO and above no number that depends on the data: logs travel
    further than the dead letter, and an exact count beside a release undoes its noise (the
    synthesize manifest's noisy row count)."""
    counts = {"rows_read": 0, "dead_letter_rows": 0}
    for counter in result.metrics().query(MetricsFilter().with_namespace(METRICS_NAMESPACE))["counters"]:
        if counter.key.metric.name in counts:
            counts[counter.key.metric.name] += counter.committed or counter.attempted or 0
    _LOG.debug("non-private: read %d rows; %d rejected", counts["rows_read"], counts["dead_letter_rows"])
    if counts["dead_letter_rows"]:
        _LOG.warning(
            "rows were rejected: see %s (raw rows with the reason, an operator's file; their count at DEBUG)",
            dead_letter,
        )


def configure_logging(argv: Sequence[str]) -> None:
    """Beam's convention: the program sets up logging, the library only logs to its module loggers.

    Ours (``beam_expmech.*``, ``pipelines.*``) log at --log-level on stderr; Beam and the rest stay at
    WARNING whatever --log-level: at DEBUG Beam logs every element it processes, raw rows included.
    Where logging is set up already (a Dataflow worker, Airflow, pytest) its handlers are kept.
    """
    flag = argparse.ArgumentParser(add_help=False)
    flag.add_argument("--log-level", "--log_level", default="INFO")
    level = flag.parse_known_args(argv)[0].log_level
    level = level if level in LOG_LEVELS else "INFO"  # the command's own parser reports a bad value
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handler.addFilter(_first_line_of_beam_errors)
        root.addHandler(handler)
        root.setLevel(logging.WARNING)
    logging.getLogger("apache_beam").setLevel(logging.WARNING)  # even where a host set the root lower
    for name in ("beam_expmech", "pipelines"):
        logging.getLogger(name).setLevel(level)


def _first_line_of_beam_errors(record: logging.LogRecord) -> bool:
    """Beam logs a failed step with its traceback; the user sees one line, and of the error only what
    io.describe_error tells: its text may quote data (so at DEBUG too)."""
    if record.name.startswith("apache_beam") and record.exc_info and record.exc_info[1] is not None:
        record.msg, record.args = f"a step failed: {io.describe_error(record.exc_info[1])}", ()
        record.exc_info = record.exc_text = None
    elif record.name.startswith("apache_beam") and "\n" in record.getMessage():
        record.msg, record.args = record.getMessage().splitlines()[0], ()
    return True


def run_cli(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    """Run ``main``; a user error becomes one line on stderr and exit code 2, never a traceback."""
    configure_logging(sys.argv[1:] if argv is None else argv)
    try:
        return main(argv)
    except (io.InputError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return USAGE_ERROR
    except OverspendError as error:
        print(f"error: {error}", file=sys.stderr)
        return BUDGET_ERROR
    except JobFailedError as error:
        print(f"error: {error}", file=sys.stderr)
        return JOB_ERROR
