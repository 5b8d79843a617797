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

from beam_expmech import parameters
from beam_expmech.io import readers
from beam_expmech.io.errors import InputError, first_line
from beam_expmech.releases import PrivateRelease, Select
from beam_expmech.releases.queries import PUBLIC_MECHANISMS
from beam_expmech.transforms.counts import DEFAULT_SHARD_SIZE
from beam_expmech.transforms.keys import MECHANISMS as KEY_MECHANISMS
from pipelines import console, flags


def build_parser() -> flags.ArgumentParser:
    """The command line (also read by the Dataflow template tests)."""
    parser = flags.ArgumentParser(command="select", description=__doc__.splitlines()[0])
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
        help=f"candidates per shard of the distributed selection (default {DEFAULT_SHARD_SIZE:,}): each shard's "
        "top k is drawn on a worker, then merged exactly; smaller spreads a huge candidate set over more workers",
    )
    parser.add_argument(
        "--output",
        required=True,
        help="the release, OUT.json, OUT.csv or OUT.parquet (local or "
        "gs://): a table's public fields go to OUT.manifest.json beside it",
    )
    return parser


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    return build_parser().parse_known_args(argv)


def candidates(args: argparse.Namespace) -> range | list[str] | None:
    """The public candidates the flags name (a range, or the labels of a file), or None: keys found in the data."""
    if args.candidate_range is not None:
        try:
            lo, hi = (int(part) for part in args.candidate_range.split(":"))
        except ValueError:
            raise ValueError(f"--candidate-range must be LO:HI with integers, got {args.candidate_range!r}") from None
        return range(lo, hi)
    if args.candidates is None:
        return None
    try:
        labels = [line.strip() for line in readers.read_text(args.candidates).splitlines() if line.strip()]
    except Exception as error:
        raise InputError(f"{args.candidates}: cannot read the candidates ({first_line(error)})") from None
    if not labels:
        raise ValueError(f"{args.candidates}: the candidate list is empty")
    return labels


def check_flags(args: argparse.Namespace) -> None:
    """The flags that go only with public candidates, or only with keys found in the data: one given where it
    would do nothing is refused (before anything is read)."""
    if args.candidates is not None or args.candidate_range is not None:
        if args.delta is not None or args.max_keys_per_unit is not None:
            raise ValueError("--delta and --max-keys-per-unit are for keys found in the data, without candidates")
        return
    if args.delta is None:
        raise ValueError("keys found in the data need --delta (or give --candidates or --candidate-range)")
    parameters.probability(args.delta, "--delta")


def declared(args: argparse.Namespace) -> PrivateRelease:
    """The release the flags declare."""
    query = Select(args.column, candidates=candidates(args), k=args.top_k, mechanism=args.mechanism,
                   shard_size=args.shard_size)  # fmt: skip
    return flags.declared_release(args, query, delta=args.delta or 0.0, max_keys=args.max_keys_per_unit)


def main(argv: list[str] | None = None) -> int:
    args, beam_args = parse_args(argv)
    check_flags(args)
    release = declared(args)
    if args.dry_run:
        print(release.dry_run())
        return 0
    released = release.run(beam_args, progress=console.terminal_progress())
    found, k, mechanism = released["selected"], released["top_k"], released["mechanism"]
    if args.candidates is None and args.candidate_range is None:
        fewer = "" if len(found) == k else f" ({len(found)} of {k}: the others did not clear the threshold)"
        shown = ", ".join(json.dumps(key, ensure_ascii=False) for key in found)  # quoted: a key may hold anything
        print(f"selected {shown or 'no key'}{fewer}: top-{k} keys of {args.column} found in the data by "
              f"{mechanism}, epsilon={args.epsilon:g}, delta={released['delta']:g}; release {args.output}")  # fmt: skip
        return 0
    print(
        f"selected {', '.join(found)}: top-{k} of {released['num_candidates']} candidates by {mechanism}, "
        f"epsilon={args.epsilon:g}, sensitivity {released['sensitivity']:g}; release {args.output}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(console.run_cli(main))
