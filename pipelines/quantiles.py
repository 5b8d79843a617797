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
import sys

from beam_expmech.releases import PrivateRelease, Quantiles
from beam_expmech.transforms.quantiles import JOINT_BINS
from pipelines import console, flags


def build_parser() -> flags.ArgumentParser:
    """The command line (also read by the Dataflow template tests)."""
    parser = flags.ArgumentParser(command="quantiles", description=__doc__.splitlines()[0])
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
    parser.add_argument(
        "--output",
        required=True,
        help="the release, OUT.json, OUT.csv or OUT.parquet (local or "
        "gs://): a table's public fields go to OUT.manifest.json beside it",
    )
    return parser


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    return build_parser().parse_known_args(argv)


def parse_quantiles(text: str) -> list[float]:
    """The numbers of --quantiles, as written (``PrivateQuantiles`` checks them)."""
    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"--quantiles must be numbers separated by commas, got {text!r}") from None


def declared(args: argparse.Namespace) -> PrivateRelease:
    """The release the flags declare."""
    query = Quantiles(args.column, args.lower, args.upper, parse_quantiles(args.quantiles), bins=args.bins,
                      method=args.method)  # fmt: skip
    return flags.declared_release(args, query)


def main(argv: list[str] | None = None) -> int:
    args, beam_args = parse_args(argv)
    release = declared(args)
    if args.dry_run:
        print(release.dry_run())
        return 0
    released = release.run(beam_args, progress=console.terminal_progress())
    values = ", ".join(f"q{q} = {v:.6g}" for q, v in released["quantiles"].items())
    print(f"{values}: {len(released['quantiles'])} quantiles of {args.column}, epsilon={args.epsilon:g}; "
          f"release {args.output}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(console.run_cli(main))
