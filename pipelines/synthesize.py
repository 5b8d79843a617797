"""Private synthetic data: one Beam pass counts the workload's marginals, a generator makes the rows.

    python -m pipelines.synthesize --input PATH --domain DOMAIN.json --epsilon E [--delta D]
        [--method aim|mwem|blr] [--workload-degree 3] [--columns a,b,c] [--rows N | --max-synthetic-rows M] [--rounds R]
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

The pass counts, in one go, every k-way marginal of the columns (aim, mwem) or the full-domain
histogram (blr); the generator touches those counts only through mechanisms, then samples rows:
--rows of them, or its noisy size capped at --max-synthetic-rows (a public maximum). The memory all
that holds, the table's included, is checked before any budget is spent; the table is written in
chunks by the step that draws it, and moved to OUT by the job's last step.
aim (the default) is rho-zCDP with rho the most that fits (epsilon, delta); mwem and blr are
pure epsilon-DP. The output keeps the columns and codes (labels, numbers); OUT.manifest.json
beside it says what was spent, which marginals were measured (private outputs, so releasable)
and each numeric column's grid.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import posixpath
import sys
import uuid

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems

from beam_expmech import parameters
from beam_expmech.accounting import compose
from beam_expmech.grids import NumericGrid
from beam_expmech.io import writers
from beam_expmech.io.validation import ColumnSpec
from beam_expmech.manifest import rows_per_unit
from beam_expmech.predicates import HistogramCounts
from beam_expmech.synth import MAX_MEMORY
from beam_expmech.transforms import GatherCounts, PrivateQuantiles, PrivateSynthesis
from beam_expmech.transforms.quantiles import JOINT_BINS
from pipelines import budget, console, domain_files, flags, job, runners


def build_parser() -> flags.ArgumentParser:
    """The command line (also read by the Dataflow template tests)."""
    parser = flags.ArgumentParser(prog="python -m pipelines.synthesize", description=__doc__.splitlines()[0])
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
    parser.add_argument(
        "--max-synthetic-rows",
        type=int,
        help="without --rows, the most rows drawn: the noisy size is capped at it (default 10,000,000, or "
        "fewer where those would not fit in the generator's memory; the dry run and the manifest state it)",
    )
    parser.add_argument("--rounds", type=int, help="mwem: rounds (default 20); aim: first rounds' budget share")
    parser.add_argument("--output", required=True, help="OUT.parquet or OUT.csv (local or gs://)")
    return parser


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    return build_parser().parse_known_args(argv)


def manifest_path(output: str) -> str:
    return posixpath.splitext(output)[0] + ".manifest.json"


def _progress_bar():
    """A one-line bar on the terminal: the share of the budget AIM has spent."""

    def show(share: float) -> None:
        filled = round(30 * share)
        print(f"\rAIM [{'#' * filled}{'.' * (30 - filled)}] {share:4.0%} of rho", end="", file=sys.stderr)
        if share >= 1:
            print(file=sys.stderr)

    return show


def _as_array(values) -> pa.Array:
    """Floats (a numeric float column) as float64, anything else (codes, integers) as int64."""
    values = np.asarray(values)
    return pa.array(values if values.dtype.kind == "f" else values.astype(np.int64, copy=False))


def staged_path(output: str) -> str:
    """Where the step that draws the synthetic table writes it (hidden, beside OUT, a name of this run's own):
    the job's last step, once the dead letter is written, moves it to OUT."""
    folder, name = posixpath.split(output)
    return posixpath.join(folder, f".staged-{uuid.uuid4().hex[:16]}-{name}")


def stage_table(payload, path: str, labels: dict[str, tuple[str, ...]]) -> tuple[str, dict]:
    """The synthetic table written to ``path`` (Parquet or CSV by its extension), atomically, a chunk of rows at a
    time (``writers.write_table_atomically``: Parquet row groups, pieces of CSV), in the step that drew it: so
    that the whole table is held once, never again as bytes, nor encoded and decoded by Beam on its way to the
    job's last step, which gets (``path``, the manifest) instead.

    Columns the domain file labels are written as labels, numeric columns as their numbers (int64 or
    float64), the others as their int codes (int64).
    """
    columns, manifest = payload
    names = list(columns)
    rows = len(columns[names[0]])
    kinds = {c: pa.string() if c in labels else _as_array(columns[c][:0]).type for c in names}
    taken = {c: pa.array(labels[c]) for c in names if c in labels}
    # A row's bytes at most, as Arrow's arrays or as CSV text: a number's 24 characters, a label quoted with
    # its quotes doubled; so a chunk stays near writers.TABLE_CHUNK_BYTES however wide the rows.
    row_bytes = sum(32 + (2 * max(len(v.encode()) for v in labels[c]) if c in labels else 0) for c in names)
    step = writers.table_chunk_rows(row_bytes)

    def chunks():
        for start in range(0, max(rows, 1), step):  # one chunk even of no rows: the header
            arrays = {c: _as_array(columns[c][start : start + step]) for c in names}
            yield pa.table({c: taken[c].take(v) if c in taken else v for c, v in arrays.items()})

    writers.write_table_atomically(path, pa.schema(list(kinds.items())), chunks())
    return path, manifest


def publish(staged: tuple[str, dict], output: str) -> None:
    """The job's last step: the staged table moved to OUT (``writers.rename_atomically``), then the manifest
    written beside it, atomically."""
    path, manifest = staged
    writers.rename_atomically(path, output)
    writers.write_json(manifest_path(output), manifest)


def _edge_steps(args: argparse.Namespace, private: dict[str, domain_files.PrivateGrid], max_rows: int) -> dict:
    """Each private grid's quantiles step: its count - 1 quantiles drawn together (JointExp) with its share of
    --epsilon, on a public histogram of JOINT_BINS bins over [lower, upper]. Built (and rehearsed) before any
    budget is spent; the shares must leave the generator some of --epsilon."""
    shares = math.fsum(p.share for p in private.values())
    if shares >= 1:
        raise ValueError(f"{args.domain}: the private grids' shares add up to {shares:g}; they must leave the "
                         "generator some of --epsilon")  # fmt: skip
    return {c: PrivateQuantiles(epsilon=p.share * args.epsilon, quantiles=p.quantiles,
                                family=HistogramCounts(c, p.lower, p.upper, JOINT_BINS), method="joint",
                                max_rows=max_rows, seed=args.seed)
            for c, p in private.items()}  # fmt: skip


def _released_quantiles(
    args: argparse.Namespace, beam_args: list[str], files: list[str], spec: ColumnSpec, quantiles: PrivateQuantiles
) -> np.ndarray:
    """One data pass: a column's quantiles (read as ``spec``), released (charged with the run), written to
    a hidden file of this run's own beside OUT and read back (on a cluster a worker writes it), then that file
    removed: the manifest states the edges."""
    folder, name = posixpath.split(posixpath.splitext(args.output)[0])
    path = posixpath.join(folder, f".edges-{uuid.uuid4().hex[:16]}-{name}.json")
    job.run_counting_job(
        args,
        beam_args,
        job.CountingJob(files, [spec, *flags.unit_specs(args)], quantiles.family, GatherCounts() | quantiles),
        write=lambda values: writers.write_json(path, values),
    )
    values = job.read_release(path)
    FileSystems.delete([path])
    return np.array(list(values.values()), dtype=np.float64)


def _composition(step: PrivateSynthesis, edges: dict) -> dict:
    """AIM beside private edges: the route its rho took (``accounting.zcdp_beside``), the edges' epsilon and
    rho, and AIM's rho (public parameters), for the manifest and the dry run; {} otherwise."""
    if step.share is None or not edges:
        return {}
    epsilon, rho = math.fsum(e.cost.epsilon for e in edges.values()), math.fsum(e.cost.rho for e in edges.values())
    if step.share.route == "basic":
        rule = (f"basic composition: the edges epsilon={epsilon:g}-DP, AIM rho={step.rho:g}-zCDP, hence "
                f"(epsilon={step.cost.epsilon:g}, delta={step.delta:g})-DP; the epsilons add")  # fmt: skip
    else:
        rule = f"zCDP: the edges rho={rho:g} (epsilon={epsilon:g}), AIM rho={step.rho:g}; the rhos add"
    return {"route": step.share.route, "rule": rule, "edges_epsilon": epsilon, "edges_rho": rho, "aim_rho": step.rho}


def _guarantee(step: PrivateSynthesis) -> str:
    if step.share is None:
        return "pure epsilon-DP"
    if step.share.route == "basic":
        return "rho-zCDP, hence (epsilon less the edges', delta)-DP; with the edges', (epsilon, delta)-DP"
    return "rho-zCDP, hence (epsilon, delta)-DP"


def main(argv: list[str] | None = None) -> int:
    args, beam_args = parse_args(argv)
    flags.check_unit_flags(args)
    if not args.output.lower().endswith((".parquet", ".csv")):
        raise ValueError(f"--output must end in .parquet or .csv (the table's format), got {args.output!r}")
    manifest = manifest_path(args.output)
    if os.path.isdir(manifest) or (
        args.budget_ledger and writers.location(args.budget_ledger) == writers.location(manifest)
    ):
        raise ValueError(f"the manifest's place, {manifest}, is a folder or the ledger: choose another --output")
    parameters.positive_finite(args.epsilon, "epsilon")
    if args.method == "aim":
        parameters.probability(args.delta, "--delta")
    described = domain_files.read_domain(args.domain)
    columns = args.columns.split(",") if args.columns else list(described)
    repeated = [c for i, c in enumerate(columns) if c in columns[:i]]
    if repeated:  # the table would hold it once, while the line and the manifest counted it twice
        raise ValueError(f"--columns names {repeated[0]!r} more than once")
    unknown = [c for c in columns if c not in described]
    if unknown:
        raise ValueError(f"column {unknown[0]!r} is not in the domain file {args.domain}")
    described = {c: described[c] for c in columns}
    domain = domain_files.domain_sizes(described)
    # Flag-level checks that name the flags; the step checks the rest (and the generator's memory) when
    # built: all before any budget is spent.
    if args.method == "blr" and args.rows is None:
        raise ValueError("--rows is required with --method blr (the synthetic dataset's size)")
    for flag, value in (
        ("--rows", args.rows),
        ("--rounds", args.rounds),
        ("--max-synthetic-rows", args.max_synthetic_rows),
    ):
        if value is not None:
            parameters.count(value, flag)
    if args.rows is not None and args.max_synthetic_rows is not None:
        raise ValueError("--max-synthetic-rows caps the noisy size, drawn only without --rows: give one of them")
    if args.method != "blr" and args.workload_degree is not None:
        parameters.count(args.workload_degree, "--workload-degree", at_most=len(columns), of="columns")
    # A numeric column's grid: integer or float, from the input's schema (no row read).
    described = domain_files.with_input_types(described, args.input, args.format, args.domain)
    numeric, private = domain_files.grids(described), domain_files.private_grids(described)
    max_rows = rows_per_unit(args.max_rows_per_unit)
    edges = _edge_steps(args, private, max_rows)  # rehearsed when built, like every step
    epsilon, elsewhere = args.epsilon, []  # what the generator may spend: what the edges leave
    if edges and args.method == "aim":  # AIM's rho beside the edges' releases, by the better route
        elsewhere = [e.cost for e in edges.values()]
    elif edges:
        epsilon = args.epsilon * (1 - math.fsum(p.share for p in private.values()))

    def synthesis(grids: dict[str, NumericGrid]) -> PrivateSynthesis:
        return PrivateSynthesis(method=args.method, domain=domain, epsilon=epsilon, delta=args.delta,
                                degree=args.workload_degree, rows=args.rows, max_synthetic_rows=args.max_synthetic_rows,
                                rounds=args.rounds, max_rows=max_rows,
                                grids=grids, elsewhere=elsewhere, seed=args.seed,
                                progress=_progress_bar() if sys.stderr.isatty() else None)  # fmt: skip

    step = synthesis(numeric)  # its checks before any budget; built again with the released edges' grids
    family = step.family

    def column_specs() -> list:  # each column read through its grid once the edges are released
        return [domain_files.domain_spec(c, numeric.get(c, v)) for c, v in described.items()] + flags.unit_specs(args)

    files = job.check_input(args, column_specs())

    delta, cost = step.delta, step.cost
    if edges:
        label = f"synthetic data by {args.method}, bin edges of {', '.join(edges)} by quantiles"
        cost = compose([cost, *(e.cost for e in edges.values())], label)
    output = args.output
    labels = {c: v for c, v in described.items() if isinstance(v, tuple)}
    plan = {"method": args.method, "epsilon": args.epsilon, "delta": delta, "columns": columns,
            "workload": f"{len(family.marginals)} marginals, {family.num_candidates:,} cells",
            "synthetic rows": f"{args.rows:,}" if args.rows else f"the noisy size, at most {step.max_synthetic_rows:,}",
            "memory": f"at most {step.memory / 2**20:,.0f} MiB of {MAX_MEMORY / 2**20:,.0f} MiB"}  # fmt: skip
    if edges:
        plan["private bin edges"] = ", ".join(f"{c}: {private[c].count} bins, epsilon {e.epsilon:g}"
                                              for c, e in edges.items())  # fmt: skip
    composition = _composition(step, edges)
    if composition:
        plan["composition"] = composition["rule"]
    if budget.dry_run(args, cost, files, plan):
        return 0

    def main_pass(step: PrivateSynthesis) -> tuple[job.CountingJob, beam.Pipeline]:
        """The data pass that counts the workload and releases the table, built (not run)."""
        stated = {c: g.manifest() | ({"edges_epsilon": edges[c].epsilon} if c in edges else {})
                  for c, g in numeric.items()}  # fmt: skip
        public = budget.release_manifest(
            args,
            mechanism=args.method,
            cost=cost,
            delta=delta,
            accuracy=None,
            method=args.method,
            guarantee=_guarantee(step),
            columns=columns,
            **({"composition": composition} if composition else {}),
            **({"numeric": stated} if numeric else {}),
        )
        release = (
            GatherCounts()
            | step
            | "Manifest" >> beam.MapTuple(lambda table, details: (table, public | details))
            | "Stage" >> beam.Map(stage_table, staged, labels)  # in the step that drew it: no copy through Beam
        )
        counting = job.CountingJob(files, column_specs(), family, release)
        write = lambda payload: publish(payload, output)  # noqa: E731
        return counting, job.built(lambda: job.counting_pipeline(args, beam_args, counting, write, args.dead_letter))

    staged = staged_path(output)
    runners.check_runner(beam_args)  # a Dask scheduler that does not answer: nothing spent
    counting, graph = main_pass(step)  # built before the charge: a Beam option that breaks it spends nothing
    with budget.charge(args, cost, "synthesize", delta=delta):  # before any row is read, edges' passes included
        for column, quantiles in edges.items():
            spec = domain_files.domain_spec(column, private[column])
            numeric[column] = private[column].grid(_released_quantiles(args, beam_args, files, spec, quantiles))
        if edges:  # the same checks as before the charge, passed then, and the pass built on the released grids
            counting, graph = main_pass(synthesis(numeric))
        try:
            job.run_counting_job(args, beam_args, counting, dead_letter=args.dead_letter, pipeline=graph)
        except BaseException:
            with contextlib.suppress(Exception):  # a staged table the failed job never published
                FileSystems.delete([staged])
            raise
    manifest = job.read_release(manifest_path(output))
    guarantee = f"epsilon={args.epsilon:g}" + (f", delta={args.delta:g}" if args.method == "aim" else "")
    print(
        f"wrote {manifest['rows']:,} synthetic rows of {len(columns)} columns by {args.method}, "
        f"{guarantee}, to {output} (manifest: {manifest_path(output)})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(console.run_cli(main))
