"""The private halfspace learner: the best weights pi with pi . x >= y over bit records, on Beam.

    python -m pipelines.learn --input PATH --features a,b,c --label y --weights -1,0,1
        [--max-candidates N | --candidates FILE] --epsilon E [--privacy-unit COL --max-rows-per-unit K]
        --output OUT.json [Beam options]

Candidates are public: every vector of the given weight values (or the vectors in FILE, one
comma-separated line each), read exactly as written (0.1 is 1/10; 1/3 may be written so), so
that whether a candidate fits a record is decided in exact arithmetic. The data pass counts the
bit patterns of (features, label), which must be 0 or 1 (other values go to the dead letter);
the final step scores every candidate by the number of records it fits (a count: monotone,
sensitivity K) and picks one with the exponential mechanism. Only the chosen weights and public
parameters are released; the training accuracy is not (it would be a non-private release).
"""

from __future__ import annotations

import argparse
import sys

from beam_expmech import halfspaces
from beam_expmech.io import readers
from beam_expmech.releases import Halfspace, PrivateRelease
from pipelines import console, flags


def build_parser() -> flags.ArgumentParser:
    """The command line (also read by the Dataflow template tests)."""
    parser = flags.ArgumentParser(command="learn", description=__doc__.splitlines()[0])
    flags.add_input_flags(parser)
    parser.add_argument("--features", required=True, help="comma-separated bit columns x_1 .. x_d")
    parser.add_argument("--label", required=True, help="the bit column y")
    parser.add_argument("--weights", help="weight values of the grid (default -1,0,1)")
    candidates = parser.add_mutually_exclusive_group()
    candidates.add_argument(
        "--max-candidates",
        type=int,
        default=halfspaces.DEFAULT_MAX_CANDIDATES,
        help=f"size of the public grid of weight vectors (default {halfspaces.DEFAULT_MAX_CANDIDATES:,})",
    )
    candidates.add_argument("--candidates", help="a file of weight vectors, one comma-separated line each")
    flags.add_privacy_flags(parser)
    parser.add_argument(
        "--output",
        required=True,
        help="the release, OUT.json, OUT.csv or OUT.parquet (local or "
        "gs://): a table's public fields go to OUT.manifest.json beside it",
    )
    return parser


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    argv, bound = list(sys.argv[1:] if argv is None else argv), []
    while argv:  # "--weights -1,0,1" reads to argparse like an option: bind the value explicitly
        token = argv.pop(0)
        bound.append(f"--weights={argv.pop(0)}" if token == "--weights" and argv else token)
    return build_parser().parse_known_args(bound)


def candidate_rows(args: argparse.Namespace) -> list[list[str]] | None:
    """The weight vectors of --candidates, as written (one comma-separated line each), or None."""
    if args.candidates is None:
        return None
    return [line.split(",") for line in readers.read_text(args.candidates).splitlines() if line.strip()]


def declared(args: argparse.Namespace) -> PrivateRelease:
    """The release the flags declare."""
    weights = None if args.weights is None else [w for w in args.weights.split(",") if w.strip()]
    query = Halfspace([f.strip() for f in args.features.split(",") if f.strip()], args.label, weights=weights,
                      candidates=candidate_rows(args), max_candidates=args.max_candidates)  # fmt: skip
    return flags.declared_release(args, query)


def main(argv: list[str] | None = None) -> int:
    args, beam_args = parse_args(argv)
    release = declared(args)
    if args.dry_run:
        print(release.dry_run())
        return 0
    released = release.run(beam_args, progress=console.terminal_progress())
    print(
        f"weights {released['weights']} for {', '.join(released['features'])} >= {args.label}: one of "
        f"{released['num_candidates']:,} candidates by the exponential mechanism, epsilon={args.epsilon:g}; "
        f"release {args.output}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(console.run_cli(main))
