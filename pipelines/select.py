"""Private selection: the top k values of a column, chosen by the exponential mechanism on Beam.

    python -m pipelines.select --input PATH --column COL (--candidates FILE | --candidate-range LO:HI)
        [--privacy-unit COL --max-rows-per-unit K] --epsilon E [--top-k K]
        [--mechanism exponential|permute-and-flip] --output OUT.json [Beam options]

The candidates are public (a file with one label a line, or an integer range LO..HI-1). Each
candidate's score is the number of rows whose column equals it; with --privacy-unit each
unit keeps at most K rows, so a score moves by at most K (sensitivity K, monotone). Only the
selection and public parameters are released, in OUT.json; rejected rows (raw data) go to
--dead-letter PATH, by default OUT.dead_letter.csv beside it.
"""

from __future__ import annotations

import argparse
import sys

import apache_beam as beam

from beam_expmech.io import readers
from beam_expmech.io.errors import InputError, first_line
from beam_expmech.io.validation import ColumnSpec
from beam_expmech.manifest import BETA, rows_per_unit
from beam_expmech.mechanisms import accuracy_bound
from beam_expmech.predicates import CategoryCounts
from beam_expmech.transforms import PrivateSelect
from beam_expmech.transforms.counts import DEFAULT_SHARD_SIZE
from pipelines import budget, console, flags, job

# Every candidate's count exists somewhere (the candidate set is public, zeros included): 2^32 of them
# are 32 GiB of counts across the workers, in 4,096 shards of the default size.
MAX_CANDIDATES = 1 << 32


def build_parser() -> flags.ArgumentParser:
    """The command line (also read by the Dataflow template tests)."""
    parser = flags.ArgumentParser(prog="python -m pipelines.select", description=__doc__.splitlines()[0])
    flags.add_input_flags(parser)
    parser.add_argument("--column", required=True, help="the column whose values are the candidates")
    candidates = parser.add_mutually_exclusive_group(required=True)
    candidates.add_argument("--candidates", help="a file (local or gs://) with one candidate label a line")
    candidates.add_argument("--candidate-range", help="integer candidates LO:HI (LO included, HI excluded)")
    flags.add_privacy_flags(parser)
    parser.add_argument("--top-k", type=int, default=1, help="how many candidates to select (default 1)")
    parser.add_argument(
        "--mechanism",
        choices=("exponential", "permute-and-flip"),
        default="exponential",
        help="exponential (default), or permute-and-flip: never less accurate at the same epsilon (--top-k 1 only)",
    )
    parser.add_argument(
        "--shard-size",
        type=int,
        default=DEFAULT_SHARD_SIZE,
        help=f"candidates per shard of the distributed selection (default {DEFAULT_SHARD_SIZE:,}): each shard's "
        "top k is drawn on a worker, then merged exactly; smaller spreads a huge candidate set over more workers",
    )
    parser.add_argument("--output", required=True, help="the release, OUT.json (local or gs://)")
    return parser


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    return build_parser().parse_known_args(argv)


def candidate_family(args: argparse.Namespace) -> tuple[CategoryCounts, ColumnSpec]:
    """The public candidates, and how the column must look for a row to count."""
    if args.candidate_range is not None:
        try:
            lo, hi = (int(part) for part in args.candidate_range.split(":"))
        except ValueError:
            raise ValueError(f"--candidate-range must be LO:HI with integers, got {args.candidate_range!r}") from None
        if hi <= lo:
            raise ValueError(f"--candidate-range {args.candidate_range} is empty")
        if hi - lo > MAX_CANDIDATES:
            raise ValueError(f"--candidate-range {args.candidate_range} holds over {MAX_CANDIDATES:,} candidates")
        return CategoryCounts(args.column, range(lo, hi)), ColumnSpec(args.column, "int")
    try:
        labels = [line.strip() for line in readers.read_text(args.candidates).splitlines() if line.strip()]
    except Exception as error:
        raise InputError(f"{args.candidates}: cannot read the candidates ({first_line(error)})") from None
    if not labels:
        raise ValueError(f"{args.candidates}: the candidate list is empty")
    return CategoryCounts(args.column, labels), ColumnSpec(args.column, "string")


def selection(args: argparse.Namespace, family: CategoryCounts) -> PrivateSelect:
    """The final step the command line asks for (also run in one process by the privacy audit).

    Sensitivity: each unit keeps at most K rows, each adding at most ``contribution`` to a count.
    """
    return PrivateSelect(
        epsilon=args.epsilon,
        sensitivity=rows_per_unit(args.max_rows_per_unit) * family.contribution,
        num_candidates=family.num_candidates,
        k=args.top_k,
        mechanism=args.mechanism,
        monotonic=family.monotonic,
        shard_size=args.shard_size,
        label=f"top-{args.top_k} of {args.column}",
        seed=args.seed,
    )


def main(argv: list[str] | None = None) -> int:
    args, beam_args = parse_args(argv)
    flags.check_unit_flags(args)
    family, spec = candidate_family(args)
    select = selection(args, family)
    sensitivity = select.sensitivity
    specs = [spec, *flags.unit_specs(args)]
    files = job.check_input(args, specs)

    cost = select.cost
    loss = accuracy_bound(
        epsilon=args.epsilon / args.top_k,
        sensitivity=sensitivity,
        beta=BETA,
        num_candidates=family.num_candidates,
        monotonic=family.monotonic,
    )
    public = budget.release_manifest(
        args,
        mechanism=args.mechanism,
        cost=cost,
        accuracy={"loss_per_pick": loss},
        sensitivity=sensitivity,
        monotonic=family.monotonic,
        num_candidates=family.num_candidates,
        top_k=args.top_k,
    )
    release_selection = select | "Labels" >> beam.Map(lambda chosen: {"selected": family.labels(chosen), **public})
    if budget.dry_run(args, cost, files, public):
        return 0
    with budget.charge(args, cost, "select"):  # before any row is read
        released = job.run_counting_job(
            args, beam_args, job.CountingJob(files, specs, family, release_selection, shard_size=args.shard_size)
        )

    print(
        f"selected {', '.join(released['selected'])}: top-{args.top_k} of {family.num_candidates} candidates by "
        f"{args.mechanism}, epsilon={args.epsilon:g}, sensitivity {sensitivity:g}; release {args.output}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(console.run_cli(main))
