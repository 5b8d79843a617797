"""Private selection: the top k values of a column, chosen by the exponential mechanism on Beam.

    python -m pipelines.select --input PATH --column COL (--candidates FILE | --candidate-range LO:HI)
        [--privacy-unit COL --max-rows-per-unit K] --epsilon E [--top-k K]
        [--mechanism exponential|permute-and-flip] --output OUT.json [Beam options]
    python -m pipelines.select --input PATH --column COL --epsilon E --delta D [--top-k K]
        [--privacy-unit COL --max-rows-per-unit K [--max-keys-per-unit L]]
        [--mechanism keys-then-laplace|keys-then-exponential|limited-domain] --output OUT.json [Beam options]

With candidates, they are public (a file with one label a line, or an integer range LO..HI-1).
Without, they are the column's values, found privately ((epsilon, delta)-DP: a key only one
unit holds is released with probability below delta), and fewer than k may be released. Each
candidate's score is the number of rows whose column equals it; with --privacy-unit each unit
keeps at most K rows (over at most L keys), so a score moves by at most K (sensitivity K,
monotone). Only the selection and public parameters are released, in OUT.json; rejected rows
(raw data) are counted, and kept only where --dead-letter PATH says (outside OUT.json's folder).
"""

from __future__ import annotations

import argparse
import json
import sys

import apache_beam as beam

from beam_expmech import parameters
from beam_expmech.io import readers
from beam_expmech.io.errors import InputError, first_line
from beam_expmech.io.validation import ColumnSpec
from beam_expmech.manifest import BETA, rows_per_unit
from beam_expmech.mechanisms import accuracy_bound
from beam_expmech.predicates import CategoryCounts
from beam_expmech.transforms import PrivateSelect
from beam_expmech.transforms.counts import DEFAULT_SHARD_SIZE
from beam_expmech.transforms.keys import MECHANISMS as KEY_MECHANISMS
from beam_expmech.transforms.keys import PrivateTopKeys
from pipelines import budget, console, flags, job

# Every candidate's count exists somewhere (the candidate set is public, zeros included): 2^32 of them
# are 32 GiB of counts across the workers, in 4,096 shards of the default size.
MAX_CANDIDATES = 1 << 32
PUBLIC_MECHANISMS = ("exponential", "permute-and-flip")


def build_parser() -> flags.ArgumentParser:
    """The command line (also read by the Dataflow template tests)."""
    parser = flags.ArgumentParser(prog="python -m pipelines.select", description=__doc__.splitlines()[0])
    flags.add_input_flags(parser)
    parser.add_argument("--column", required=True, help="the column whose values are the candidates")
    candidates = parser.add_mutually_exclusive_group()
    candidates.add_argument("--candidates", help="a file (local or gs://) with one candidate label a line")
    candidates.add_argument("--candidate-range", help="integer candidates LO:HI (LO included, HI excluded)")
    flags.add_privacy_flags(parser)
    parser.add_argument(
        "--delta",
        type=float,
        help="without --candidates or --candidate-range (keys found in the data): the chance, at most, that a key "
        "one unit holds is released because of it (required there; e.g. 1e-6, below 1 / the number of units)",
    )
    parser.add_argument(
        "--max-keys-per-unit",
        type=int,
        help="L, keys found in the data: each unit keeps rows of at most L of its keys, drawn at random "
        "(with --privacy-unit; default K, the most K rows can hold)",
    )
    parser.add_argument("--top-k", type=int, default=1, help="how many candidates to select (default 1)")
    parser.add_argument(
        "--mechanism",
        choices=(*PUBLIC_MECHANISMS, *KEY_MECHANISMS),
        help="with candidates: exponential (default), or permute-and-flip: never less accurate at the same epsilon "
        f"(--top-k 1 only); keys found in the data: {KEY_MECHANISMS[0]} (default: it finds more of the true top k), "
        f"{KEY_MECHANISMS[1]} or {KEY_MECHANISMS[2]}",
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
    args, beam_args = build_parser().parse_known_args(argv)
    if args.mechanism is None:  # the default depends on where the candidates come from
        keys = args.candidates is None and args.candidate_range is None
        args.mechanism = KEY_MECHANISMS[0] if keys else PUBLIC_MECHANISMS[0]
    return args, beam_args


def candidate_family(args: argparse.Namespace) -> tuple[CategoryCounts, ColumnSpec]:
    """The public candidates, and how the column must look for a row to count."""
    if args.candidate_range is not None:
        try:
            lo, hi = (int(part) for part in args.candidate_range.split(":"))
        except ValueError:
            raise ValueError(f"--candidate-range must be LO:HI with integers, got {args.candidate_range!r}") from None
        if hi <= lo:
            raise ValueError(f"--candidate-range {args.candidate_range} is empty")
        if lo < -(2**63) or hi > 2**63:  # the column is read as int64: beyond it a value would wrap onto another
            raise ValueError(f"--candidate-range {args.candidate_range} reaches beyond 64-bit integers")
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


def check_flags(args: argparse.Namespace) -> None:
    """The flags that go with public candidates, or with keys found in the data (before anything is read)."""
    flags.check_unit_flags(args)
    if args.candidates is not None or args.candidate_range is not None:
        if args.mechanism not in PUBLIC_MECHANISMS:
            raise ValueError(f"--mechanism {args.mechanism} is for keys found in the data, without candidates")
        if args.delta is not None or args.max_keys_per_unit is not None:
            raise ValueError("--delta and --max-keys-per-unit are for keys found in the data, without candidates")
        return
    if args.mechanism not in KEY_MECHANISMS:
        raise ValueError(f"--mechanism {args.mechanism} needs --candidates or --candidate-range")
    if args.delta is None:
        raise ValueError("keys found in the data need --delta (or give --candidates or --candidate-range)")
    parameters.probability(args.delta, "--delta")
    if args.max_keys_per_unit is not None and args.privacy_unit is None:
        raise ValueError("--max-keys-per-unit goes with --privacy-unit (without it each row is a unit of one key)")
    if args.max_keys_per_unit is not None and args.max_keys_per_unit < 1:
        raise ValueError(f"--max-keys-per-unit must be >= 1, got {args.max_keys_per_unit}")


def key_selection(args: argparse.Namespace) -> PrivateTopKeys:
    """The final step over keys found in the data (also run in one process by the privacy audit).

    Sensitivity: each unit keeps at most K rows over at most L keys (L = K unless bounded further).
    """
    max_rows = rows_per_unit(args.max_rows_per_unit)
    return PrivateTopKeys(
        epsilon=args.epsilon,
        delta=args.delta,
        k=args.top_k,
        max_rows=max_rows,
        max_keys=min(max_rows, args.max_keys_per_unit or max_rows),  # K rows touch at most K keys
        mechanism=args.mechanism,
        label=f"top-{args.top_k} keys of {args.column}",
        seed=args.seed,
    )


def select_keys(args: argparse.Namespace, beam_args: list[str]) -> int:
    """The top k of keys found in the data: fewer when fewer clear the privacy threshold."""
    step = key_selection(args)
    specs = [ColumnSpec(args.column, "string"), *flags.unit_specs(args)]
    files = job.check_input(args, specs)
    public = budget.release_manifest(
        args,
        mechanism=step.mechanism,
        cost=step.cost,
        delta=step.delta,
        accuracy=step.accuracy(),
        beta=None,
        sensitivity=step.max_rows,
        max_keys_per_unit=step.max_keys,
        top_k=step.k,
        candidates="keys found in the data",
    )
    release = step | "Labels" >> beam.Map(lambda chosen: {"selected": chosen, **public})
    if budget.dry_run(args, step.cost, files, public):
        return 0
    counting = job.KeyCountingJob(files, specs, args.column, step.max_keys, release)
    released = job.run_charged(args, beam_args, counting, step.cost, "select", delta=step.delta)
    found = released["selected"]
    fewer = "" if len(found) == step.k else f" ({len(found)} of {step.k}: the others did not clear the threshold)"
    shown = ", ".join(json.dumps(key, ensure_ascii=False) for key in found)  # quoted: a key may hold any character
    print(
        f"selected {shown or 'no key'}{fewer}: top-{step.k} keys of {args.column} found in the data by "
        f"{step.mechanism}, epsilon={args.epsilon:g}, delta={step.delta:g}; release {args.output}"
    )
    return 0


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
    check_flags(args)
    if args.candidates is None and args.candidate_range is None:
        return select_keys(args, beam_args)
    family, spec = candidate_family(args)
    select = selection(args, family)
    sensitivity = select.sensitivity
    specs = [spec, *flags.unit_specs(args)]
    labels = None if family.values is None else {args.column: family.values.to_pylist()}
    files = job.check_input(args, specs, labels)  # candidates the column's type can never equal: refused

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
    counting = job.CountingJob(files, specs, family, release_selection, shard_size=args.shard_size)
    released = job.run_charged(args, beam_args, counting, cost, "select")

    print(
        f"selected {', '.join(released['selected'])}: top-{args.top_k} of {family.num_candidates} candidates by "
        f"{args.mechanism}, epsilon={args.epsilon:g}, sensitivity {sensitivity:g}; release {args.output}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(console.run_cli(main))
