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

import apache_beam as beam

from beam_expmech import halfspaces
from beam_expmech.io import readers
from beam_expmech.io.validation import ColumnSpec
from beam_expmech.manifest import BETA, rows_per_unit
from beam_expmech.mechanisms import accuracy_bound
from beam_expmech.predicates import MarginalCounts
from beam_expmech.transforms import GatherCounts, PrivateHalfspace
from pipelines import budget, console, flags, job


def build_parser() -> flags.ArgumentParser:
    """The command line (also read by the Dataflow template tests)."""
    parser = flags.ArgumentParser(prog="python -m pipelines.learn", description=__doc__.splitlines()[0])
    flags.add_input_flags(parser)
    parser.add_argument("--features", required=True, help="comma-separated bit columns x_1 .. x_d")
    parser.add_argument("--label", required=True, help="the bit column y")
    parser.add_argument("--weights", default="-1,0,1", help="weight values of the grid (default -1,0,1)")
    candidates = parser.add_mutually_exclusive_group()
    candidates.add_argument(
        "--max-candidates",
        type=int,
        default=halfspaces.DEFAULT_MAX_CANDIDATES,
        help=f"size of the public grid of weight vectors (default {halfspaces.DEFAULT_MAX_CANDIDATES:,})",
    )
    candidates.add_argument("--candidates", help="a file of weight vectors, one comma-separated line each")
    flags.add_privacy_flags(parser)
    parser.add_argument("--output", required=True, help="the release, OUT.json (local or gs://)")
    return parser


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    argv, bound = list(sys.argv[1:] if argv is None else argv), []
    while argv:  # "--weights -1,0,1" reads to argparse like an option: bind the value explicitly
        token = argv.pop(0)
        bound.append(f"--weights={argv.pop(0)}" if token == "--weights" and argv else token)
    return build_parser().parse_known_args(bound)


def feature_columns(args: argparse.Namespace) -> list[str]:
    features = [f.strip() for f in args.features.split(",") if f.strip()]
    if not features or len(set(features)) != len(features) or args.label in features:
        raise ValueError("--features must name distinct columns, none of them the --label")
    if len(features) > halfspaces.MAX_FEATURES:
        raise ValueError(f"at most {halfspaces.MAX_FEATURES} features, got {len(features)}")
    return features


def candidate_matrix(args: argparse.Namespace, num_features: int) -> halfspaces.Candidates:
    """The public candidates, with their weights read exactly as written (0.1 is 1/10)."""
    if args.candidates is None:
        try:
            weights = [halfspaces.exact_weight(w) for w in args.weights.split(",") if w.strip()]
        except ValueError:
            raise ValueError(f"--weights must be numbers separated by commas, got {args.weights!r}") from None
        return halfspaces.weight_grid(weights, num_features, max_candidates=args.max_candidates, name="--weights")
    try:
        rows = [
            [halfspaces.exact_weight(w) for w in line.split(",")]
            for line in readers.read_text(args.candidates).splitlines()
            if line.strip()
        ]
    except ValueError:
        raise ValueError(f"{args.candidates}: every line must be comma-separated numbers") from None
    if any(len(row) != num_features for row in rows):
        raise ValueError(f"{args.candidates}: every line must hold {num_features} weights")
    return halfspaces.check_candidates(
        rows, num_features, max_candidates=halfspaces.DEFAULT_MAX_CANDIDATES, name=args.candidates
    )


def final_step(args: argparse.Namespace, candidates: halfspaces.Candidates) -> PrivateHalfspace:
    """The final step the command line asks for, on the gathered pattern counts (also run by the privacy audit).

    Sensitivity: each privacy unit adds or removes at most K = --max-rows-per-unit records (1 without a unit
    column), so each fit count moves by at most K.
    """
    return PrivateHalfspace(
        epsilon=args.epsilon, candidates=candidates, max_rows=rows_per_unit(args.max_rows_per_unit), seed=args.seed
    )


def pattern_family(args: argparse.Namespace, features: list[str]) -> tuple[MarginalCounts, list[ColumnSpec]]:
    """The bit patterns of (features, label) the data pass counts, and how the columns must look to count."""
    columns = [*features, args.label]
    specs = [ColumnSpec(c, "int", domain=(0, 2)) for c in columns] + flags.unit_specs(args)
    return MarginalCounts(columns, [2] * len(columns)), specs


def main(argv: list[str] | None = None) -> int:
    args, beam_args = parse_args(argv)
    flags.check_unit_flags(args)
    features = feature_columns(args)
    candidates = candidate_matrix(args, len(features))
    step = final_step(args, candidates)
    family, specs = pattern_family(args, features)
    loss = accuracy_bound(
        epsilon=step.epsilon, sensitivity=step.sensitivity, beta=BETA, num_candidates=len(candidates), monotonic=True
    )
    files = job.check_input(args, specs)

    public = budget.release_manifest(
        args,
        mechanism="exponential",
        cost=step.cost,
        accuracy={"records_fit_below_best": loss},
        features=features,
        label=args.label,
        rule="sum(weights[j] * features[j]) >= label",
        sensitivity=step.sensitivity,
        monotonic=True,
        num_candidates=len(candidates),
    )
    release = GatherCounts() | step | "Manifest" >> beam.Map(lambda weights: {"weights": weights, **public})
    if budget.dry_run(args, step.cost, files, public):
        return 0
    released = job.run_charged(args, beam_args, job.CountingJob(files, specs, family, release), step.cost, "learn")
    print(
        f"weights {released['weights']} for {', '.join(features)} >= {args.label}: one of {len(candidates):,} "
        f"candidates by the exponential mechanism, epsilon={args.epsilon:g}; release {args.output}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(console.run_cli(main))
