"""Workload error of a synthetic table against the real one. NOT a release: it reads the real data.

    python -m pipelines.evaluate_synthetic REAL DOMAIN.json SYNTH [--degree 3] [--columns a,b,c]
        [--delimiter ';'] [--target COLUMN] [--json evaluation.json] [--report report.html]

For every k-way marginal of the columns (default: all of the domain's columns; a numeric column
counted by the bins of its grid, as synthesize counts it; private edges as SYNTH's manifest states
them), both tables' counts are normalised to probabilities and compared in L1 (0 .. 2); prints the
average and the largest over the workload: the AIM paper's workload error (McKenna et al. 2022),
twice the total variation distance that Private-PGM's scripts print. Beside it, two baselines on the same
workload, computed from the real data (the report is not a release): the real table's columns taken as
independent at their exact 1-way shares, and a bootstrap resample of as many rows as the synthetic table.
``--json`` writes the whole evaluation (``evaluation``: each marginal's error and the baselines', each
column's shares in both tables, the cells of the worst and a typical marginal, the release's parameters from
the manifest beside SYNTH), ``--report`` the same as one HTML page for the data owner (``evaluation_report``).
``--target COLUMN`` adds what the rows are worth to a model of that column (``learning``: train on synthetic,
test on real rows held out).
Use it to judge a generator on data you may look at, never to publish.
"""

from __future__ import annotations

import functools
import itertools
import sys
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from beam_expmech.grids import NumericGrid
from beam_expmech.io import readers, writers
from beam_expmech.io.release_files import manifest_path
from beam_expmech.io.validation import MalformedRows, reason_column, validate
from beam_expmech.predicates import MarginalCounts, MarginalWorkload
from beam_expmech.releases import domains
from pipelines import console, evaluation_report, flags, learning

NOTICE = "Evaluation against the real data \u2014 not a differentially private release; do not publish."
# What the report states of the release, from the synthetic table's manifest.
RELEASE_FIELDS = (
    "mechanism",
    "generator",
    "target",
    "epsilon",
    "delta",
    "rho",
    "privacy_unit",
    "max_rows_per_unit",
    "rows",
    "release_id",
    "private_randomness",
)
BOOTSTRAP_SEED = 0  # the report is not a release: a fixed seed, so that two reports of one table agree
HEAT_MAP_CELLS = 4096  # a marginal with more cells is in the error table only


def validated_batches(path: str, columns: list[str], domain: domains.Domain, domain_path: str,
                      delimiter: str = ",") -> Iterator[pa.RecordBatch]:  # fmt: skip
    """One table's ``columns``, batch by batch, validated (a CSV file's fields split at ``delimiter``); a value
    outside its column's domain is an error, but for a numeric column's, clamped into its grid's end bin as
    synthesize counts it (the same ``ColumnSpec``)."""
    files = readers.match_files(path)
    readers.check_columns(files, None, columns, delimiter=delimiter)
    domain = domains.with_input_types(domain, path, None, domain_path, delimiter)
    specs = [domains.domain_spec(c, domain[c]) for c in columns]
    for file in files:
        for split in readers.splits(file, readers.file_format(file)):
            for batch in readers.read_split(split, columns, delimiter):
                malformed = isinstance(batch, MalformedRows)
                good, bad = (None, batch.rows) if malformed else validate(batch, specs)
                if bad is not None:
                    reason = bad.column(reason_column(columns))[0].as_py()
                    raise ValueError(f"{file}: {reason} (and {bad.num_rows - 1} more rows)")
                yield good


def workload_counts(path: str, workload: MarginalWorkload, domain: domains.Domain, domain_path: str,
                    delimiter: str = ",") -> np.ndarray:  # fmt: skip
    """Summed workload counts of one table (``validated_batches``)."""
    total = np.zeros(workload.num_candidates, dtype=np.int64)
    for batch in validated_batches(path, list(workload.columns), domain, domain_path, delimiter):
        total += workload.count(batch)
    return total


def table_codes(path: str, domain: domains.Domain, domain_path: str, delimiter: str = ",", *,
                share: float = 1.0) -> dict[str, np.ndarray]:  # fmt: skip
    """Each of ``domain``'s columns of one table as its codes (a number's bin), row by row (``validated_batches``);
    each row kept with probability ``share`` (by a fixed seed: the evaluation is not a release), so that a large
    table's rows are not all held."""
    coders = {c: MarginalCounts((c,), [size]) for c, size in domains.domain_sizes(domain).items()}
    codes: dict[str, list[np.ndarray]] = {c: [] for c in domain}
    rng = np.random.default_rng(learning.SPLIT_SEED)
    for batch in validated_batches(path, list(domain), domain, domain_path, delimiter):
        kept = np.flatnonzero(rng.random(batch.num_rows) < share) if share < 1 else None
        for column, coder in coders.items():
            column_codes = coder.candidate_of(batch)
            codes[column].append(column_codes if kept is None else column_codes[kept])
    return {c: np.concatenate(v) if v else np.zeros(0, np.int64) for c, v in codes.items()}


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


def evaluation(real: str, domain_path: str, synthetic: str, degree: int = 3, columns: list[str] | None = None,
               delimiter: str = ",", target: str | None = None) -> dict:  # fmt: skip
    """The whole evaluation as one JSON-ready dict, what ``--json`` writes and ``--report`` draws: the workload's
    errors (each marginal's, sorted from the worst, their average, median and max), each column's distribution in
    both tables (probabilities, by code, with what each code stands for), and the worst and a typical (median
    error) marginal's cells in both tables (for degree 2 or more, among the marginals of at most
    HEAT_MAP_CELLS cells); with a ``target`` column, what a classifier of it trained on the synthetic rows scores on
    real rows held out, beside one trained on the other real rows (``learning``)."""
    domain = domains.read_domain(domain_path)
    released = _manifest(synthetic)
    if domains.private_grids(domain):  # their edges were released: the synthetic table's manifest states them
        if released is None:
            raise ValueError(
                f"{domain_path} has private bin edges, stated in {manifest_path(synthetic)}, which cannot be read"
            )
        domain = domains.with_released_edges(domain, released)
    columns = columns or list(domain)
    if not 1 <= degree <= len(columns):
        raise ValueError(f"--degree must be between 1 and the number of columns ({len(columns)})")
    if target is not None and (target not in columns or len(columns) < 2):
        raise ValueError(f"--target {target!r} must be one of the columns evaluated, beside another")
    marginals = list(itertools.combinations(columns, degree))
    # One pass over each table counts the workload and every column's 1-way marginal together.
    workload = MarginalWorkload(list(dict.fromkeys([(c,) for c in columns] + marginals)), domains.domain_sizes(domain))
    if delimiter != "," and not any(readers.file_format(f) == "csv" for p in (real, synthetic)
                                    for f in readers.match_files(p)):  # fmt: skip
        raise ValueError("--delimiter is for CSV files, and neither table is one")
    real_counts = workload.split(workload_counts(real, workload, domain, domain_path, delimiter))
    synthetic_counts = workload.split(workload_counts(synthetic, workload, domain, domain_path, delimiter))
    errors = workload_errors({m: real_counts[m] for m in marginals}, synthetic_counts)
    ranked = sorted(marginals, key=lambda m: -errors[m])  # stable: ties keep the workload's order
    synthetic_rows = int(synthetic_counts[(columns[0],)].sum())
    baselines = {
        "independent": workload_errors({m: real_counts[m] for m in marginals},
                                       {m: independent(real_counts, m) for m in marginals}),
        "bootstrap": workload_errors({m: real_counts[m] for m in marginals},
                                     bootstrap(real_counts, marginals, synthetic_rows)),
    }  # fmt: skip
    typed = domains.with_input_types(domain, real, None, domain_path, delimiter)
    labels = {c: bin_labels(v) for c, v in typed.items()}
    values = list(errors.values())
    result = {
        "evaluation": NOTICE,
        "real": real,
        "synthetic": synthetic,
        "domain": domain_path,
        "degree": degree,
        "rows": {"real": int(real_counts[(columns[0],)].sum()), "synthetic": synthetic_rows},
        "release": None if released is None else {key: released.get(key) for key in RELEASE_FIELDS},
        "workload": {"marginals": len(values), **_spread(values)},
        "baselines": {
            "independent": _spread(list(baselines["independent"].values())),
            "bootstrap": {
                "rows": synthetic_rows,
                "seed": BOOTSTRAP_SEED,
                **_spread(list(baselines["bootstrap"].values())),
            },
        },
        "errors": [
            {
                "columns": list(m),
                "error": errors[m],
                "independent": baselines["independent"][m],
                "bootstrap": baselines["bootstrap"][m],
            }
            for m in ranked
        ],
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
        "learning": None,
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
    if target is not None:  # a second pass over each table: its rows (at most about learning.MAX_ROWS), not counts
        chosen = {c: domain[c] for c in columns}
        tables = [table_codes(path, chosen, domain_path, delimiter, share=min(1.0, learning.MAX_ROWS / max(rows, 1)))
                  for path, rows in ((real, result["rows"]["real"]), (synthetic, synthetic_rows))]  # fmt: skip
        result["learning"] = learning.train_on_synthetic(*tables, domains.domain_sizes(chosen), target)
        result["learning"]["synthesized_for"] = _synthesized_for(released, target)
    return result


def _synthesized_for(released: dict | None, target: str) -> str | None:
    """What the manifest says the rows were synthesized for, where that is not ``target``: "the target 'X'" or "no
    target" (the generator then kept no model of it in particular); None where it is ``target`` or there is no
    manifest."""
    if released is None or released.get("target") == target:
        return None
    return "no target" if released.get("target") is None else f"the target {released['target']!r}"


def independent(counts: dict, marginal: tuple[str, ...]) -> np.ndarray:
    """The marginal that the real table's own 1-way shares give, its columns taken as independent (the real row
    count's worth): what a generator that measured only 1-way marginals, exactly, would reach."""
    shares = [counts[(c,)] / max(int(counts[(c,)].sum()), 1) for c in marginal]
    return functools.reduce(np.multiply.outer, shares) * int(counts[(marginal[0],)].sum())


def bootstrap(counts: dict, marginals: list[tuple[str, ...]], rows: int) -> dict:
    """Each marginal of ``rows`` rows drawn at random from the real table (with replacement): a multinomial draw
    at the real shares, a fixed seed: the error that sampling alone gives a table of that many rows."""
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    drawn = {}
    for m in marginals:
        shares = counts[m].ravel() / max(int(counts[m].sum()), 1)
        drawn[m] = rng.multinomial(rows, shares / shares.sum()) if shares.sum() else np.zeros_like(shares)
    return drawn


def _spread(values: list[float]) -> dict:
    return {"average_error": float(np.mean(values)), "median_error": float(np.median(values)),
            "max_error": float(np.max(values))}  # fmt: skip


def _manifest(synthetic: str) -> dict | None:
    """The manifest synthesize wrote beside the table (its parameters), or None where there is none to read."""
    try:
        manifest = readers.read_json(manifest_path(synthetic))
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


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
    parser.add_argument(
        "--delimiter",
        default=",",
        type=flags.delimiter,
        help="CSV only: the character between fields of both tables (default ','; ';', '|', '\\t')",
    )
    parser.add_argument(
        "--target",
        help="a column to predict: also train a classifier of it on the synthetic rows and score it on real rows "
        "held out, beside one trained on the other real rows",
    )
    parser.add_argument("--json", help="write the evaluation here as JSON (local or gs://; not a release)")
    parser.add_argument("--report", help="write the evaluation here as one self-contained HTML page (not a release)")
    args = parser.parse_args(argv)
    for flag, path in (("--json", args.json), ("--report", args.report)):
        if path and writers.inside(path, writers.published_folder(args.synthetic)):  # exact shares of the real data
            raise ValueError(f"{flag} must lie outside the synthetic table's folder (where releases are published)")
    result = evaluation(args.real, args.domain, args.synthetic, args.degree,
                        args.columns.split(",") if args.columns else None, args.delimiter, args.target)  # fmt: skip
    if args.json:
        writers.write_json(args.json, result)
    if args.report:
        writers.write_atomically(args.report, evaluation_report.render(result).encode())
    workload = result["workload"]
    print(
        f"{workload['marginals']} {args.degree}-way marginals: average L1 error {workload['average_error']:.4f}, "
        f"max {workload['max_error']:.4f} (evaluation against the real data: not a release)"
    )
    if result["learning"] is not None:
        learned = result["learning"]
        synthetic, real = learned["trained_on_synthetic"], learned["trained_on_real"]
        print(f"{args.target}, held-out real rows: AUC {_score(synthetic['auc'])} trained on the synthetic rows, "
              f"{_score(real['auc'])} on the other real rows; accuracy {synthetic['accuracy']:.3f} and "
              f"{real['accuracy']:.3f} (the most common class: {learned['majority_class_accuracy']:.3f})")  # fmt: skip
        if learned["synthesized_for"] is not None:
            print(f"note: the synthetic rows were synthesized for {learned['synthesized_for']} (their manifest), "
                  f"not --target {args.target!r}", file=sys.stderr)  # fmt: skip
    return 0


def _score(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


if __name__ == "__main__":
    sys.exit(console.run_cli(main))
