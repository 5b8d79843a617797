"""Private quantiles of a numeric column: a sharded histogram on Beam, then the exponential mechanism.

    python -m pipelines.quantiles --input PATH --column COL --lower L --upper U --quantiles 0.1,0.5,0.9
        --epsilon E [--privacy-unit COL --max-rows-per-unit K] [--bins B] --output OUT.json [Beam options]

Each worker counts the column on a public grid of B equal bins over [L, U] (values outside are
clamped into the end bins; NaN, infinities and nulls go to the dead letter); the counts are
summed, and one final step picks, for each quantile, a bin by the exponential mechanism with
the bin width as base measure and a uniform point inside it (beam_expmech.mechanisms.quantile).
Each of m quantiles spends epsilon / m; the released values are sorted. Not sorted data: no
worker ever holds the column.
"""

from __future__ import annotations

import argparse
import math
import sys

import apache_beam as beam

from beam_expmech.io.validation import ColumnSpec
from beam_expmech.manifest import BETA, rows_per_unit
from beam_expmech.mechanisms.quantile import rank_error_bound
from beam_expmech.predicates import HistogramCounts
from beam_expmech.transforms import GatherCounts, PrivateQuantiles
from beam_expmech.transforms.quantiles import JOINT_BINS
from pipelines import budget, console, flags, job


def build_parser() -> flags.ArgumentParser:
    """The command line (also read by the Dataflow template tests)."""
    parser = flags.ArgumentParser(prog="python -m pipelines.quantiles", description=__doc__.splitlines()[0])
    flags.add_input_flags(parser)
    parser.add_argument("--column", required=True, help="the numeric column")
    parser.add_argument("--lower", type=float, required=True, help="public lower end of the range")
    parser.add_argument("--upper", type=float, required=True, help="public upper end of the range")
    parser.add_argument("--quantiles", required=True, help="comma-separated, each strictly between 0 and 1")
    flags.add_privacy_flags(parser)
    parser.add_argument("--bins", type=int, default=1 << 16, help="bins of the public grid (default 2^16)")
    parser.add_argument(
        "--method",
        choices=("independent", "joint"),
        default="independent",
        help="independent: each quantile with epsilon / m on the full grid (default); joint: JointExp "
        f"(Gillenwater et al. 2021), all m together with epsilon, on at most {JOINT_BINS} regrouped bins. "
        "Joint is the more accurate for many quantiles or a small epsilon on continuous data; with many "
        "tied values (integer codes) use independent.",
    )
    parser.add_argument("--output", required=True, help="the release, OUT.json (local or gs://)")
    return parser


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    return build_parser().parse_known_args(argv)


def parse_quantiles(text: str) -> list[float]:
    """The numbers of --quantiles, as written (``PrivateQuantiles`` checks them)."""
    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"--quantiles must be numbers separated by commas, got {text!r}") from None


def final_step(args: argparse.Namespace, family: HistogramCounts) -> PrivateQuantiles:
    """The final step the command line asks for: summed histogram -> quantiles (also run by the privacy audit).

    Sensitivity: each unit keeps at most K = --max-rows-per-unit rows (1 without a unit column).
    """
    return PrivateQuantiles(
        epsilon=args.epsilon,
        quantiles=parse_quantiles(args.quantiles),
        family=family,
        method=args.method,
        max_rows=rows_per_unit(args.max_rows_per_unit),
        seed=args.seed,
    )


def main(argv: list[str] | None = None) -> int:
    args, beam_args = parse_args(argv)
    flags.check_unit_flags(args)
    if not (math.isfinite(args.upper - args.lower) and args.lower < args.upper):
        raise ValueError(f"--lower must be below --upper, both finite; got {args.lower} and {args.upper}")
    family = HistogramCounts(args.column, args.lower, args.upper, args.bins)
    step = final_step(args, family)  # checks epsilon and the quantiles, and rehearses them on the grid
    epsilon, quantiles, max_rows = step.epsilon, step.quantiles, step.max_rows
    specs = [ColumnSpec(args.column, "float"), *flags.unit_specs(args)]
    files = job.check_input(args, specs)

    each = epsilon / len(quantiles)
    if args.method == "joint":
        mechanism = "JointExp: one exponential mechanism over all the sorted quantiles (Gillenwater et al. 2021)"
        accuracy, beta = {"bin_width": step.widest_bin}, None  # no probabilistic bound stated: no beta
    else:
        mechanism = "exponential mechanism per quantile over a histogram, base measure = bin width"
        accuracy, beta = (
            {
                "bin_width": step.widest_bin,
                "rank_error": {
                    f"{q:g}": rank_error_bound(epsilon=each, bins=args.bins, q=q, max_rows=max_rows, beta=BETA)
                    for q in quantiles
                },
            },
            BETA,
        )
    public = budget.release_manifest(
        args,
        mechanism=mechanism + "; uniform point inside the chosen bin",
        cost=step.cost,
        accuracy=accuracy,
        beta=beta,
        method=args.method,
        epsilon_per_quantile=each if args.method == "independent" else None,
        lower=args.lower,
        upper=args.upper,
        bins=args.bins,
    )
    release = GatherCounts() | step | "Manifest" >> beam.Map(lambda values: {"quantiles": values, **public})
    if budget.dry_run(args, step.cost, files, public):
        return 0
    released = job.run_charged(args, beam_args, job.CountingJob(files, specs, family, release), step.cost, "quantiles")
    values = ", ".join(f"q{q} = {v:.6g}" for q, v in released["quantiles"].items())
    print(f"{values}: {len(quantiles)} quantiles of {args.column}, epsilon={epsilon:g}; release {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(console.run_cli(main))
