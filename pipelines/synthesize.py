"""Private synthetic data: one Beam pass counts the workload's marginals, a generator makes the rows.

    python -m pipelines.synthesize --input PATH --domain DOMAIN.json --epsilon E [--delta D]
        [--method aim|mwem|blr] [--workload-degree 3] [--columns a,b,c] [--rows N] [--rounds R]
        [--privacy-unit COL --max-rows-per-unit K] --output OUT.parquet|OUT.csv [Beam options]

DOMAIN.json is {"column": number of codes} (every value an integer code 0 .. size-1) or
{"column": ["label", ...]} (every value one of the labels; the output has labels too); other
values go to the dead letter with the reason, never clipped. The pass counts, in one go,
every k-way marginal of the columns (aim, mwem) or the full-domain histogram (blr); the
generator touches those counts only through mechanisms, then samples rows. aim (the default)
is rho-zCDP with rho the most that fits (epsilon, delta); mwem and blr are pure epsilon-DP.
The output keeps the columns and codes; OUT.manifest.json beside it says what was spent and
which marginals were measured (private outputs, so releasable).
"""

from __future__ import annotations

import argparse
import itertools
import posixpath
import sys

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from beam_expmech import io, parameters
from beam_expmech.accounting import Release, epsilon_to_zcdp
from beam_expmech.mechanisms.randomness import random_source
from beam_expmech.predicates import MarginalWorkload
from beam_expmech.synth import MAX_MEMORY, aim, blr, mwem
from beam_expmech.transforms import GatherCounts
from pipelines import common


def build_parser() -> common.ArgumentParser:
    """The command line (also read by the Dataflow template tests)."""
    parser = common.ArgumentParser(prog="python -m pipelines.synthesize", description=__doc__.splitlines()[0])
    common.add_input_flags(parser)
    parser.add_argument(
        "--domain", required=True, help='DOMAIN.json: {"column": number of codes} or {"column": ["label", ...]}'
    )
    common.add_privacy_flags(parser)
    parser.add_argument(
        "--delta",
        type=float,
        default=1e-9,
        help="aim: the small chance the epsilon bound may fail (default 1e-9; mwem and blr are pure: 0)",
    )
    parser.add_argument(
        "--method",
        choices=("aim", "mwem", "blr"),
        default="aim",
        help="aim: (epsilon, delta)-DP via zCDP, the most accurate (default); mwem, blr: pure epsilon-DP",
    )
    parser.add_argument(
        "--workload-degree", type=int, help="k of the k-way marginals (aim, mwem; default 3, or all columns if fewer)"
    )
    parser.add_argument("--columns", help="comma-separated subset of the domain's columns (default: all)")
    parser.add_argument("--rows", type=int, help="synthetic rows (default: the noisy size; required for blr)")
    parser.add_argument("--rounds", type=int, help="mwem: rounds (default 20); aim: first rounds' budget share")
    parser.add_argument("--output", required=True, help="OUT.parquet or OUT.csv (local or gs://)")
    return parser


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    return build_parser().parse_known_args(argv)


def manifest_path(output: str) -> str:
    return posixpath.splitext(output)[0] + ".manifest.json"


def generate(counts: np.ndarray, *, family: MarginalWorkload, args: argparse.Namespace, columns: list, domain: dict):
    """The only step that sees the counts: returns (synthetic columns, manifest)."""
    max_rows = args.max_rows_per_unit or 1
    if args.method == "blr":
        histogram = blr.blr_synthesize(
            counts, [domain[c] for c in columns], rows=args.rows, epsilon=args.epsilon, max_rows=max_rows, rng=args.seed
        )
        codes = blr.histogram_to_rows(histogram, [domain[c] for c in columns])
        table = {c: codes[:, i] for i, c in enumerate(columns)}
        details = {"rows": args.rows}
    else:
        workload = family.split(counts)
        if args.method == "aim":
            progress = _progress_bar() if sys.stderr.isatty() else None
            result = aim.aim(workload, domain, rho=args.rho, rounds=args.rounds, max_rows=max_rows, rng=args.seed,
                             progress=progress)  # fmt: skip
            details = {"rho": args.rho}
        else:
            result = mwem.mwem(
                workload, domain, epsilon=args.epsilon, rounds=args.rounds, max_rows=max_rows, rng=args.seed
            )
            details = {"rounds": args.rounds}
        rows = args.rows or result.rows
        table = result.model.sample(rows, random_source(None if args.seed is None else args.seed + 1))
        details |= {"rows": rows, "measured": [list(m) for m in result.measured]}
    manifest = {
        "method": args.method,
        "epsilon": args.epsilon,
        "delta": args.delta if args.method == "aim" else 0,
        "guarantee": "rho-zCDP, hence (epsilon, delta)-DP" if args.method == "aim" else "pure epsilon-DP",
        "columns": columns,
        "privacy_unit": args.privacy_unit,
        "max_rows_per_unit": args.max_rows_per_unit,
        "seed": None if args.seed is None else "set (tests only): NOT private",
        **details,
    }
    return table, manifest


def _progress_bar():
    """A one-line bar on the terminal: the share of the budget AIM has spent."""

    def show(share: float) -> None:
        filled = round(30 * share)
        print(f"\rAIM [{'#' * filled}{'.' * (30 - filled)}] {share:4.0%} of rho", end="", file=sys.stderr)
        if share >= 1:
            print(file=sys.stderr)

    return show


def write_outputs(payload, output: str, labels: dict[str, tuple[str, ...]]) -> None:
    """The table (Parquet or CSV by extension), then the manifest, each written atomically.

    Columns the domain file labels are written as labels, the others as their int codes.
    """
    columns, manifest = payload
    arrays = {c: pa.array(np.asarray(v, dtype=np.int64)) for c, v in columns.items()}
    table = pa.table({c: pa.array(labels[c]).take(v) if c in labels else v for c, v in arrays.items()})
    if output.lower().endswith(".csv"):
        data = io.table_to_csv(table)
    else:
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        data = sink.getvalue().to_pybytes()
    io.write_atomically(output, data)
    io.write_json(manifest_path(output), manifest)


def main(argv: list[str] | None = None) -> int:
    args, beam_args = parse_args(argv)
    common.check_unit_flags(args)
    parameters.positive_finite(args.epsilon, "epsilon")
    if args.method == "aim":
        parameters.probability(args.delta, "--delta")
    described = common.read_domain(args.domain)
    columns = args.columns.split(",") if args.columns else list(described)
    unknown = [c for c in columns if c not in described]
    if unknown:
        raise ValueError(f"column {unknown[0]!r} is not in the domain file {args.domain}")
    described = {c: described[c] for c in columns}
    domain = common.domain_sizes(described)
    max_rows = args.max_rows_per_unit or 1
    # The generator's own checks (and its memory) from public parameters: before any budget is spent.
    if args.method == "blr":
        if args.rows is None:
            raise ValueError("--rows is required with --method blr (the synthetic dataset's size)")
        parameters.count(args.rows, "--rows")
        memory = blr.check_parameters(list(domain.values()), rows=args.rows, max_rows=max_rows)
        family = MarginalWorkload([tuple(columns)], domain)
    else:
        degree = min(3, len(columns)) if args.workload_degree is None else args.workload_degree
        degree = parameters.count(degree, "--workload-degree", at_most=len(columns), of="columns")
        if args.rounds is not None:
            parameters.count(args.rounds, "--rounds")
        family = MarginalWorkload(list(itertools.combinations(columns, degree)), domain)
        if family.num_candidates > 50_000_000:
            raise ValueError(f"the {degree}-way marginals have {family.num_candidates:,} cells: too many to hold")
        if args.method == "aim":
            memory = aim.check_parameters(domain, family.marginals, rounds=args.rounds, max_rows=max_rows)
        else:
            args.rounds = args.rounds or mwem.DEFAULT_ROUNDS
            memory = mwem.check_parameters(domain, family.marginals, rounds=args.rounds, max_rows=max_rows)
    specs = [common.domain_spec(c, v) for c, v in described.items()] + common.unit_specs(args)
    files = common.check_input(args, specs)

    if args.method == "aim":
        args.rho = epsilon_to_zcdp(args.epsilon, delta=args.delta)
        cost, delta = Release.zcdp(args.rho, "synthetic data by aim"), args.delta
    else:
        cost, delta = Release.pure(args.epsilon, f"synthetic data by {args.method}"), 0.0
    release = GatherCounts() | "Generate" >> beam.Map(
        generate, family=family, args=args, columns=columns, domain=domain
    )
    output = args.output
    labels = {c: v for c, v in described.items() if not isinstance(v, int)}
    plan = {"method": args.method, "epsilon": args.epsilon, "delta": delta, "columns": columns,
            "workload": f"{len(family.marginals)} marginals, {family.num_candidates:,} cells",
            "generator memory": f"at most {memory / 2**20:,.0f} MiB of {MAX_MEMORY / 2**20:,.0f} MiB"}  # fmt: skip
    if common.dry_run(args, cost, files, plan):
        return 0
    with common.charge(args, cost, "synthesize", delta=delta):  # before any row is read
        common.run_counting_job(
            args, beam_args, files, specs, family, release, write=lambda p: write_outputs(p, output, labels)
        )
    manifest = io.read_json(manifest_path(output))
    guarantee = f"epsilon={args.epsilon:g}" + (f", delta={args.delta:g}" if args.method == "aim" else "")
    print(
        f"wrote {manifest['rows']:,} synthetic rows of {len(columns)} columns by {args.method}, "
        f"{guarantee}, to {output} (manifest: {manifest_path(output)})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(common.run_cli(main))
