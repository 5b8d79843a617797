"""Workload error of a synthetic table against the real one. NOT a release: it reads the real data.

    python -m pipelines.evaluate_synthetic REAL DOMAIN.json SYNTH [--degree 3] [--columns a,b,c]

For every k-way marginal of the columns (default: all of the domain's columns; a numeric column
counted by the bins of its grid, as synthesize counts it; private edges as SYNTH's manifest states
them), both tables' counts are normalised to probabilities and compared in L1 (0 .. 2); prints the
average and the largest over the workload: the AIM paper's workload error (McKenna et al. 2022),
twice the total variation distance that Private-PGM's scripts print.
Use it to judge a generator on data you may look at, never to publish.
"""

from __future__ import annotations

import itertools
import sys

import numpy as np

from beam_expmech.io import readers
from beam_expmech.io.validation import REASON, MalformedRows, validate
from beam_expmech.predicates import MarginalWorkload
from pipelines import console, domain_files, flags, synthesize


def workload_counts(path: str, workload: MarginalWorkload, domain: domain_files.Domain, domain_path: str) -> np.ndarray:
    """Summed workload counts of one table; a value outside its column's domain is an error, but for a numeric
    column's, clamped into its grid's end bin as synthesize counts it (the same ``ColumnSpec``)."""
    files = readers.match_files(path)
    readers.check_columns(files, None, list(workload.columns))
    domain = domain_files.with_input_types(domain, path, None, domain_path)
    specs = [domain_files.domain_spec(c, domain[c]) for c in workload.columns]
    total = np.zeros(workload.num_candidates, dtype=np.int64)
    for file in files:
        for split in readers.splits(file, readers.file_format(file)):
            for batch in readers.read_split(split, workload.columns):
                malformed = isinstance(batch, MalformedRows)
                good, bad = (None, batch.rows) if malformed else validate(batch, specs)
                if bad is not None:
                    raise ValueError(f"{file}: {bad.column(REASON)[0].as_py()} (and {bad.num_rows - 1} more rows)")
                total += workload.count(good)
    return total


def workload_errors(real: dict, synthetic: dict) -> dict:
    """L1 distance between the normalised marginals, per marginal."""
    errors = {}
    for marginal, counts in real.items():
        p, q = counts.ravel(), synthetic[marginal].ravel()
        errors[marginal] = float(np.abs(p / max(p.sum(), 1) - q / max(q.sum(), 1)).sum())
    return errors


def main(argv: list[str] | None = None) -> int:
    parser = flags.ArgumentParser(prog="python -m pipelines.evaluate_synthetic", description=__doc__.splitlines()[0])
    parser.add_argument("real")
    parser.add_argument("domain")
    parser.add_argument("synthetic")
    parser.add_argument("--degree", type=int, default=3)
    parser.add_argument("--columns", help="comma-separated (default: every column of the domain)")
    args = parser.parse_args(argv)
    domain = domain_files.read_domain(args.domain)
    if domain_files.private_grids(domain):  # their edges were released: the synthetic table's manifest states them
        manifest = synthesize.manifest_path(args.synthetic)
        try:
            released = readers.read_json(manifest)
        except (OSError, ValueError):
            raise ValueError(
                f"{args.domain} has private bin edges, stated in {manifest}, which cannot be read"
            ) from None
        domain = domain_files.with_released_edges(domain, released)
    columns = args.columns.split(",") if args.columns else list(domain)
    if not 1 <= args.degree <= len(columns):
        raise ValueError(f"--degree must be between 1 and the number of columns ({len(columns)})")
    workload = MarginalWorkload(list(itertools.combinations(columns, args.degree)), domain_files.domain_sizes(domain))
    real = workload.split(workload_counts(args.real, workload, domain, args.domain))
    synthetic = workload.split(workload_counts(args.synthetic, workload, domain, args.domain))
    errors = list(workload_errors(real, synthetic).values())
    print(
        f"{len(errors)} {args.degree}-way marginals: average L1 error {np.mean(errors):.4f}, max {np.max(errors):.4f} "
        "(evaluation against the real data: not a release)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(console.run_cli(main))
