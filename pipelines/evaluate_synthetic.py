"""Workload error of a synthetic table against the real one. NOT a release: it reads the real data.

    python -m pipelines.evaluate_synthetic REAL DOMAIN.json SYNTH [--degree 3] [--columns a,b,c]
        [--json evaluation.json] [--report report.html]

For every k-way marginal of the columns (default: all of the domain's columns; a numeric column
counted by the bins of its grid, as synthesize counts it; private edges as SYNTH's manifest states
them), both tables' counts are normalised to probabilities and compared in L1 (0 .. 2); prints the
average and the largest over the workload: the AIM paper's workload error (McKenna et al. 2022),
twice the total variation distance that Private-PGM's scripts print. ``--json`` writes the whole
evaluation (``evaluation``: each marginal's error, each column's shares in both tables, the cells of the
worst and a typical marginal), ``--report`` the same as one HTML page for the data owner
(``evaluation_report``). Use it to judge a generator on data you may look at, never to publish.
"""

from __future__ import annotations

import itertools
import sys

import numpy as np

from beam_expmech.grids import NumericGrid
from beam_expmech.io import readers, writers
from beam_expmech.io.release_files import manifest_path
from beam_expmech.io.validation import MalformedRows, reason_column, validate
from beam_expmech.predicates import MarginalWorkload
from beam_expmech.releases import domains
from pipelines import console, evaluation_report, flags

NOTICE = "Evaluation against the real data \u2014 not a differentially private release; do not publish."
HEAT_MAP_CELLS = 4096  # a marginal with more cells is in the error table only


def workload_counts(path: str, workload: MarginalWorkload, domain: domains.Domain, domain_path: str) -> np.ndarray:
    """Summed workload counts of one table; a value outside its column's domain is an error, but for a numeric
    column's, clamped into its grid's end bin as synthesize counts it (the same ``ColumnSpec``)."""
    files = readers.match_files(path)
    readers.check_columns(files, None, list(workload.columns))
    domain = domains.with_input_types(domain, path, None, domain_path)
    specs = [domains.domain_spec(c, domain[c]) for c in workload.columns]
    total = np.zeros(workload.num_candidates, dtype=np.int64)
    for file in files:
        for split in readers.splits(file, readers.file_format(file)):
            for batch in readers.read_split(split, workload.columns):
                malformed = isinstance(batch, MalformedRows)
                good, bad = (None, batch.rows) if malformed else validate(batch, specs)
                if bad is not None:
                    reason = bad.column(reason_column(workload.columns))[0].as_py()
                    raise ValueError(f"{file}: {reason} (and {bad.num_rows - 1} more rows)")
                total += workload.count(good)
    return total


def workload_errors(real: dict, synthetic: dict) -> dict:
    """L1 distance between the normalised marginals, per marginal."""
    errors = {}
    for marginal, counts in real.items():
        p, q = counts.ravel(), synthetic[marginal].ravel()
        errors[marginal] = float(np.abs(p / max(p.sum(), 1) - q / max(q.sum(), 1)).sum())
    return errors


def bin_labels(value: int | tuple[str, ...] | NumericGrid) -> list[str]:
    """What each code of a column stands for, as the report shows it: its label, its code, or its bin's range
    (an integer grid's first to last integer, a float grid's [edge, next edge), the last closed)."""
    if isinstance(value, int):
        return [str(code) for code in range(value)]
    if not isinstance(value, NumericGrid):
        return list(value)
    if value.integer:
        first, last = (r.tolist() for r in value.integer_ranges)
        return [f"{a}" if a == b else f"{a}\u2013{b}" for a, b in zip(first, last, strict=True)]
    edges = [_number(e) for e in value.edges.tolist()]
    return [f"[{a}, {b}{']' if i == value.bins - 1 else ')'}" for i, (a, b) in enumerate(itertools.pairwise(edges))]


def _number(x: float) -> str:
    """A bin edge, short: 17, 2.5, 0.3333."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:.4g}"


def _probabilities(counts: np.ndarray) -> list:
    return (counts / max(int(counts.sum()), 1)).tolist()


def evaluation(real: str, domain_path: str, synthetic: str, degree: int = 3, columns: list[str] | None = None) -> dict:
    """The whole evaluation as one JSON-ready dict, what ``--json`` writes and ``--report`` draws: the workload's
    errors (each marginal's, sorted from the worst, their average, median and max), each column's distribution in
    both tables (probabilities, by code, with what each code stands for), and the worst and a typical (median
    error) marginal's cells in both tables (for degree 2 or more, among the marginals of at most
    HEAT_MAP_CELLS cells)."""
    domain = domains.read_domain(domain_path)
    if domains.private_grids(domain):  # their edges were released: the synthetic table's manifest states them
        manifest = manifest_path(synthetic)
        try:
            released = readers.read_json(manifest)
        except (OSError, ValueError):
            raise ValueError(
                f"{domain_path} has private bin edges, stated in {manifest}, which cannot be read"
            ) from None
        domain = domains.with_released_edges(domain, released)
    columns = columns or list(domain)
    if not 1 <= degree <= len(columns):
        raise ValueError(f"--degree must be between 1 and the number of columns ({len(columns)})")
    marginals = list(itertools.combinations(columns, degree))
    # One pass over each table counts the workload and every column's 1-way marginal together.
    workload = MarginalWorkload(list(dict.fromkeys([(c,) for c in columns] + marginals)), domains.domain_sizes(domain))
    real_counts = workload.split(workload_counts(real, workload, domain, domain_path))
    synthetic_counts = workload.split(workload_counts(synthetic, workload, domain, domain_path))
    errors = workload_errors({m: real_counts[m] for m in marginals}, synthetic_counts)
    ranked = sorted(marginals, key=lambda m: -errors[m])  # stable: ties keep the workload's order
    labels = {c: bin_labels(v) for c, v in domains.with_input_types(domain, real, None, domain_path).items()}
    values = list(errors.values())
    result = {
        "evaluation": NOTICE,
        "real": real,
        "synthetic": synthetic,
        "domain": domain_path,
        "degree": degree,
        "rows": {
            "real": int(real_counts[(columns[0],)].sum()),
            "synthetic": int(synthetic_counts[(columns[0],)].sum()),
        },
        "workload": {
            "marginals": len(values),
            "average_error": float(np.mean(values)),
            "median_error": float(np.median(values)),
            "max_error": float(np.max(values)),
        },
        "errors": [{"columns": list(m), "error": errors[m]} for m in ranked],
        "columns": [
            {
                "name": c,
                "kind": _kind(domain[c]),
                "values": labels[c],
                "real": _probabilities(real_counts[(c,)]),
                "synthetic": _probabilities(synthetic_counts[(c,)]),
                "error": workload_errors({(c,): real_counts[(c,)]}, synthetic_counts)[(c,)],
            }
            for c in columns
        ],
        "heat_maps": [],
        "heat_map_cells": HEAT_MAP_CELLS,
        "marginals_too_large_to_draw": 0,
    }
    if degree >= 2:
        drawable = [m for m in ranked if real_counts[m].size <= HEAT_MAP_CELLS]
        result["marginals_too_large_to_draw"] = len(ranked) - len(drawable)
        picks = dict.fromkeys(drawable[:1] + drawable[len(drawable) // 2 :][:1])  # worst first: then the median
        result["heat_maps"] = [
            {
                "role": role,
                "columns": list(m),
                "error": errors[m],
                "rank": ranked.index(m) + 1,
                "values": [labels[c] for c in m],
                "real": _probabilities(real_counts[m]),
                "synthetic": _probabilities(synthetic_counts[m]),
            }
            for role, m in zip(("worst", "typical"), picks, strict=False)
        ]
    return result


def _kind(value: int | tuple[str, ...] | NumericGrid) -> str:
    if isinstance(value, NumericGrid):
        return "numeric"
    return "codes" if isinstance(value, int) else "labels"


def main(argv: list[str] | None = None) -> int:
    parser = flags.ArgumentParser(command="evaluate_synthetic", description=__doc__.splitlines()[0])
    parser.add_argument("real")
    parser.add_argument("domain")
    parser.add_argument("synthetic")
    parser.add_argument("--degree", type=int, default=3)
    parser.add_argument("--columns", help="comma-separated (default: every column of the domain)")
    parser.add_argument("--json", help="write the evaluation here as JSON (local or gs://; not a release)")
    parser.add_argument("--report", help="write the evaluation here as one self-contained HTML page (not a release)")
    args = parser.parse_args(argv)
    for flag, path in (("--json", args.json), ("--report", args.report)):
        if path and writers.inside(path, writers.published_folder(args.synthetic)):  # exact shares of the real data
            raise ValueError(f"{flag} must lie outside the synthetic table's folder (where releases are published)")
    result = evaluation(
        args.real, args.domain, args.synthetic, args.degree, args.columns.split(",") if args.columns else None
    )
    if args.json:
        writers.write_json(args.json, result)
    if args.report:
        writers.write_atomically(args.report, evaluation_report.render(result).encode())
    workload = result["workload"]
    print(
        f"{workload['marginals']} {args.degree}-way marginals: average L1 error {workload['average_error']:.4f}, "
        f"max {workload['max_error']:.4f} (evaluation against the real data: not a release)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(console.run_cli(main))
