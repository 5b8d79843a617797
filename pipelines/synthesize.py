"""Private synthetic data: one Beam pass counts the workload's marginals, a generator makes the rows.

    python -m pipelines.synthesize --input PATH --domain DOMAIN.json --epsilon E [--delta D]
        [--method auto|aim|mwem|blr] [--workload-degree 3] [--columns a,b,c] [--rows N | --max-synthetic-rows M]
        [--rounds R] [--target COLUMN]
        [--privacy-unit COL --max-rows-per-unit K] --output OUT.parquet|OUT.csv [Beam options]

DOMAIN.json is {"column": number of codes} (every value an integer code 0 .. size-1) or
{"column": ["label", ...]} (every value one of the labels; the output has labels too); other
values go to the dead letter with the reason, never clipped. Or {"column": {"lower": L,
"upper": U, "bins": B}}: numbers, each counted as its bin among B equal-width bins over [L, U]
(public), values outside [L, U] clamped into the end bins (counted in the non-private log at
DEBUG), NaN, infinities and nulls to the dead letter; the output holds a number drawn uniformly
inside each synthetic row's bin (post-processing), an integer if the input's schema says the
column holds integers, and the manifest states the grid. With {"bins": "private", "count": B,
"share": s} the B - 1 inner edges are the column's private quantiles (JointExp with s x epsilon,
in a first data pass), stated in the manifest; the generator spends the rest, and the run is
charged once for both passes.

The pass counts, in one go, every k-way marginal of the columns (auto, aim, mwem) or the full-domain
histogram (blr); the generator touches those counts only through mechanisms, then samples rows:
--rows of them, or its noisy size capped at --max-synthetic-rows (a public maximum). The memory all
that holds, the table's included, is checked before any budget is spent; the table is written in
chunks by the step that draws it, and moved to OUT by the job's last step.
auto (the default) counts the rows with 1 to 2% of epsilon (Laplace; 0.5% of its rho) and, where
that count says the data are too small for AIM's rounds, releases each column's 1-way marginal with
Laplace noise (the columns independent), else runs AIM with the rest: (epsilon, delta)-DP, and the
manifest's "generator" says which ran. With --target COLUMN (the column the rows will be used to
predict) the small-data path measures that column's 2-way marginal with each other column instead,
each column drawn given the target (naive Bayes). aim is AIM alone, rho-zCDP with rho the most that fits
(epsilon, delta); mwem and blr are pure epsilon-DP. The output keeps the columns and codes (labels,
numbers); OUT.manifest.json beside it says what was spent, which marginals were measured (private
outputs, so releasable) and each numeric column's grid.
"""

from __future__ import annotations

import argparse
import sys

from beam_expmech.io.release_files import manifest_path
from beam_expmech.releases import PrivateRelease, Synthesis
from beam_expmech.releases.domains import read_domain
from beam_expmech.transforms.synthesis import APPROXIMATE, METHODS
from pipelines import console, flags

AIM_DELTA = 1e-9


def build_parser() -> flags.ArgumentParser:
    """The command line (also read by the Dataflow template tests)."""
    parser = flags.ArgumentParser(command="synthesize", description=__doc__.splitlines()[0])
    flags.add_input_flags(parser)
    parser.add_argument(
        "--domain",
        required=True,
        help='DOMAIN.json: {"column": number of codes}, {"column": ["label", ...]} or '
        '{"column": {"lower": L, "upper": U, "bins": B}} (or "bins": "private", "count": B, "share": S)',
    )
    flags.add_privacy_flags(parser)
    parser.add_argument(
        "--delta",
        type=float,
        help=f"auto, aim: the small chance the epsilon bound may fail (default {AIM_DELTA:g}); mwem and blr are pure "
        "epsilon-DP and take none",
    )
    parser.add_argument(
        "--method",
        choices=METHODS,
        default="auto",
        help="auto (default): AIM, or independent 1-way marginals where a private count of the rows (1 to 2 percent of "
        "epsilon) says the data are too small for AIM, (epsilon, delta)-DP; aim: AIM alone, (epsilon, delta)-DP via "
        "zCDP (a rho that composes with other zCDP releases); mwem, blr: pure epsilon-DP",
    )
    parser.add_argument(
        "--workload-degree",
        type=int,
        help="k of the k-way marginals (auto, aim, mwem; default 3, or all columns if fewer)",
    )
    parser.add_argument("--columns", help="comma-separated subset of the domain's columns (default: all)")
    parser.add_argument("--rows", type=int, help="synthetic rows (default: the noisy size; required for blr)")
    parser.add_argument(
        "--max-synthetic-rows",
        type=int,
        help="without --rows, the most rows drawn: the noisy size is capped at it (default 10,000,000, or "
        "fewer where those would not fit in the generator's memory; the dry run and the manifest state it)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        help="mwem: rounds (default 20); aim, and auto where it runs AIM: first rounds' budget share",
    )
    parser.add_argument(
        "--target",
        help="auto: the column the synthetic rows will be used to predict; where the data are small, auto measures "
        "its 2-way marginal with each other column (naive Bayes) in place of independent 1-ways",
    )
    parser.add_argument("--output", required=True, help="OUT.parquet, OUT.csv or OUT.avro (local or gs://)")
    return parser


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    return build_parser().parse_known_args(argv)


def declared(args: argparse.Namespace) -> PrivateRelease:
    """The release the flags declare."""
    query = Synthesis(read_domain(args.domain), method=args.method, columns=args.columns and args.columns.split(","),
                      degree=args.workload_degree, rows=args.rows, max_synthetic_rows=args.max_synthetic_rows,
                      rounds=args.rounds, target=args.target, domain_name=args.domain)  # fmt: skip
    if args.method not in APPROXIMATE and args.delta is not None:
        raise ValueError(f"--delta is for auto and aim: {args.method} is pure epsilon-DP")
    delta = (AIM_DELTA if args.delta is None else args.delta) if args.method in APPROXIMATE else 0.0
    return flags.declared_release(args, query, delta=delta)


def main(argv: list[str] | None = None) -> int:
    args, beam_args = parse_args(argv)
    release = declared(args)
    if args.dry_run:
        print(release.dry_run())
        return 0
    manifest = release.run(beam_args, progress=console.terminal_progress())
    guarantee = f"epsilon={args.epsilon:g}" + (f", delta={manifest['delta']:g}" if args.method in APPROXIMATE else "")
    generator = manifest.get("generator", args.method)  # which auto chose: a function of a released count
    print(
        f"wrote {manifest['rows']:,} synthetic rows of {len(manifest['columns'])} columns by {generator}, "
        f"{guarantee}, to {args.output} (manifest: {manifest_path(args.output)})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(console.run_cli(main))
