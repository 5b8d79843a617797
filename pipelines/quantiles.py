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
import functools
import math
import sys
from collections.abc import Callable

import apache_beam as beam
import numpy as np

from beam_expmech import io, parameters
from beam_expmech.accounting import Release
from beam_expmech.mechanisms.joint_quantiles import joint_quantiles
from beam_expmech.mechanisms.quantile import private_quantile, rank_error_bound
from beam_expmech.mechanisms.randomness import random_source
from beam_expmech.predicates import HistogramCounts
from beam_expmech.transforms import GatherCounts
from pipelines import common

BETA = 0.05
JOINT_BINS = 1024


def build_parser() -> common.ArgumentParser:
    """The command line (also read by the Dataflow template tests)."""
    parser = common.ArgumentParser(prog="python -m pipelines.quantiles", description=__doc__.splitlines()[0])
    common.add_input_flags(parser)
    parser.add_argument("--column", required=True, help="the numeric column")
    parser.add_argument("--lower", type=float, required=True, help="public lower end of the range")
    parser.add_argument("--upper", type=float, required=True, help="public upper end of the range")
    parser.add_argument("--quantiles", required=True, help="comma-separated, each strictly between 0 and 1")
    common.add_privacy_flags(parser)
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
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"--quantiles must be numbers separated by commas, got {text!r}") from None
    if not values:
        raise ValueError("--quantiles is empty")
    for q in values:
        parameters.probability(q, f"quantile {q}")
    if len(set(values)) != len(values):
        raise ValueError(f"--quantiles has a duplicate: {text}")
    return values


def release_quantiles(
    histogram: np.ndarray, *, family: HistogramCounts, quantiles: list, method: str, epsilon: float, max_rows: int,
    public: dict, seed,
) -> dict:  # fmt: skip
    """The only step that sees the histogram: m private quantiles, sorted."""
    source = random_source(seed)
    ordered = sorted(quantiles)
    if method == "joint":
        # Regroup to at most JOINT_BINS bins along public edges: JointExp's sampler is quadratic in bins.
        cuts = np.unique(np.linspace(0, histogram.size, min(histogram.size, JOINT_BINS) + 1).round().astype(int))
        coarse = np.add.reduceat(histogram, cuts[:-1])
        values = joint_quantiles(coarse, family.edges[cuts], ordered, epsilon=epsilon, max_rows=max_rows, rng=source)
    else:
        each = epsilon / len(quantiles)
        values = [
            private_quantile(histogram, family.edges, q, epsilon=each, max_rows=max_rows, rng=source) for q in ordered
        ]
    # Sorting is post-processing: quantiles come out in order whatever the noise did.
    return {"quantiles": {f"{q:g}": v for q, v in zip(ordered, sorted(values), strict=True)}, **public}


def release_step(args: argparse.Namespace, family: HistogramCounts, public: dict) -> Callable[[np.ndarray], dict]:
    """The final step the command line asks for: summed histogram -> release (also run by the privacy audit).

    Sensitivity: each unit keeps at most K = --max-rows-per-unit rows (1 without a unit column).
    """
    return functools.partial(
        release_quantiles,
        family=family,
        quantiles=parse_quantiles(args.quantiles),
        method=args.method,
        epsilon=args.epsilon,
        max_rows=args.max_rows_per_unit or 1,
        public=public,
        seed=args.seed,
    )


def charged(args: argparse.Namespace) -> Release:
    """What the release costs: the m quantiles together are epsilon-DP and epsilon^2/8-zCDP (JointExp is one
    exponential mechanism; independent ones are m of epsilon/m each, which compose to no more)."""
    return Release.exponential_mechanism(args.epsilon, f"{len(parse_quantiles(args.quantiles))} quantiles of "
                                         f"{args.column}")  # fmt: skip


def rehearse(step: Callable[[np.ndarray], dict], family: HistogramCounts) -> None:
    """Run the final step once on an empty histogram, before any budget is spent: whatever it refuses of
    its public parameters (quantiles too fine, a grid whose regrouped edges collapse) fails here, not
    after the charge. It reads no data; its draw is thrown away."""
    try:
        step(np.zeros(family.num_candidates, dtype=np.int64))
    except (ValueError, ArithmeticError) as error:
        raise ValueError(f"these quantiles cannot be released on this grid: {io.first_line(error)}") from None


def main(argv: list[str] | None = None) -> int:
    args, beam_args = parse_args(argv)
    common.check_unit_flags(args)
    epsilon = parameters.positive_finite(args.epsilon, "epsilon")
    quantiles = parse_quantiles(args.quantiles)
    if not (math.isfinite(args.upper - args.lower) and args.lower < args.upper):
        raise ValueError(f"--lower must be below --upper, both finite; got {args.lower} and {args.upper}")
    family = HistogramCounts(args.column, args.lower, args.upper, args.bins)
    specs = [io.ColumnSpec(args.column, "float"), *common.unit_specs(args)]
    files = common.check_input(args, specs)

    max_rows = args.max_rows_per_unit or 1
    cost = charged(args)
    each = epsilon / len(quantiles)
    if args.method == "joint":
        mechanism = "JointExp: one exponential mechanism over all the sorted quantiles (Gillenwater et al. 2021)"
        accuracy = {"bin_width": (args.upper - args.lower) / min(args.bins, JOINT_BINS)}
    else:
        mechanism = "exponential mechanism per quantile over a histogram, base measure = bin width"
        accuracy = {
            "beta": BETA,
            "bin_width": (args.upper - args.lower) / args.bins,
            "rank_error": {
                f"{q:g}": rank_error_bound(epsilon=each, bins=args.bins, q=q, max_rows=max_rows, beta=BETA)
                for q in sorted(quantiles)
            },
        }
    public = {
        "mechanism": mechanism + "; uniform point inside the chosen bin",
        "method": args.method,
        "epsilon": epsilon,
        "epsilon_per_quantile": each if args.method == "independent" else None,
        "lower": args.lower,
        "upper": args.upper,
        "bins": args.bins,
        "privacy_unit": args.privacy_unit,
        "max_rows_per_unit": args.max_rows_per_unit,
        "accuracy": accuracy,
        "private_randomness": args.seed is None,
    }
    step = release_step(args, family, public)
    rehearse(step, family)
    release = GatherCounts() | "Quantiles" >> beam.Map(step)
    if common.dry_run(args, cost, files, public):
        return 0
    with common.charge(args, cost, "quantiles"):  # before any row is read
        released = common.run_counting_job(args, beam_args, files, specs, family, release)
    values = ", ".join(f"q{q} = {v:.6g}" for q, v in released["quantiles"].items())
    print(f"{values}: {len(quantiles)} quantiles of {args.column}, epsilon={epsilon:g}; release {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(common.run_cli(main))
