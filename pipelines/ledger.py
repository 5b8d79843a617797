"""The privacy-budget ledger: set a dataset's total budget once, and show what was spent on it.

    beam-expmech ledger init --budget-ledger PATH --dataset-id ID --epsilon E [--delta D] [--exist-ok]
    beam-expmech ledger show --budget-ledger PATH [--dataset-id ID] [--json]

(or ``python -m pipelines.ledger ...``). PATH is local or gs://. Every pipeline run with --budget-ledger
PATH --dataset-id ID reserves its cost there before it reads any data, and is refused (exit code 3) when
the dataset's remaining budget is too small. ``init --exist-ok`` succeeds where the dataset has this very
budget already (a scheduler opening a dataset a period); another budget is refused either way.

``show --dataset-id ID`` prints the dataset's releases, one a line, then its budget; ``show`` alone, one
line a dataset. A zCDP release (synthesize's Gaussian noise) is stored with its rho and no epsilon: show
states the epsilon that rho gives at its run's delta (``parameters["delta"]``, by
``accounting.zcdp_to_epsilon``), marked ``*``; ``-`` where nothing can be derived. An unknown dataset id
or a file that is not a ledger: one line on stderr, exit code 2.

``show --json`` prints one JSON document on stdout, and nothing else; its keys are stable:

- with --dataset-id, an object: ``dataset_id``; ``epsilon`` and ``delta``, the dataset's total budget;
  ``created``; ``spent_epsilon``, ``remaining_epsilon``, ``remaining_delta``; ``release_count``; and
  ``releases``, every record as stored (``id``, ``time``, ``pipeline``, ``parameters``, ``label``,
  ``epsilon``, ``rho``, ``delta``, ``output``, ``status``; ``release_id`` and ``attempts`` where the run
  named its release, null otherwise) with two keys added: ``epsilon_at_delta``, the
  epsilon derived from ``rho`` at ``parameters["delta"]`` where ``epsilon`` is null (else null), and
  ``stated_epsilon``, ``epsilon`` or else ``epsilon_at_delta`` (null if neither);
- without, a list of those objects without ``releases``, one a dataset (``[]`` for an empty or missing ledger).
"""

from __future__ import annotations

import argparse
import json
import sys

from beam_expmech.accounting import zcdp_to_epsilon
from beam_expmech.ledger import Ledger, budget_of
from pipelines import console, flags

DERIVED_MARK = "*"


def main(argv: list[str] | None = None) -> int:
    """``ledger init`` or ``ledger show`` with ``argv`` (default: the process's); 0, or raises a LedgerError."""
    args = _parser().parse_args(argv)
    ledger = Ledger(args.budget_ledger)
    if args.command == "init":
        if not ledger.init(args.dataset_id, epsilon=args.epsilon, delta=args.delta, exist_ok=args.exist_ok):
            print(f"dataset {args.dataset_id!r}: has budget epsilon={args.epsilon:g}, delta={args.delta:g} already "
                  f"in {ledger.path}")  # fmt: skip
            return 0
        print(f"dataset {args.dataset_id!r}: budget epsilon={args.epsilon:g}, delta={args.delta:g} in {ledger.path}")
    elif args.dataset_id is None:
        _show_datasets(ledger.datasets(), ledger.path, as_json=args.json)
    else:
        _show_dataset(args.dataset_id, ledger.dataset(args.dataset_id), as_json=args.json)
    return 0


def _parser() -> flags.ArgumentParser:
    parser = flags.ArgumentParser(command="ledger", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    init = commands.add_parser("init", help="set a dataset's total budget (once)")
    show = commands.add_parser("show", help="print a dataset's releases, or every dataset's budget",
                               description=__doc__[__doc__.index("``show --dataset-id") :].replace("``", ""),
                               formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    for command in (init, show):
        command.add_argument("--budget-ledger", required=True, help="ledger file, local or gs://")
    init.add_argument("--dataset-id", required=True)
    init.add_argument("--epsilon", type=float, required=True, help="the dataset's lifetime epsilon")
    init.add_argument("--delta", type=float, default=0.0, help="its lifetime delta (default 0: pure DP)")
    init.add_argument("--exist-ok", action="store_true", help="succeed where the dataset has this budget already")
    show.add_argument("--dataset-id", help="the dataset whose releases to print (default: list every dataset)")
    show.add_argument("--json", action="store_true", help="print one JSON document for scripts (its keys: above)")
    return parser


def summary(dataset_id: str, dataset: dict) -> dict:
    """A stored dataset's budget, what is spent of it and its number of releases, under --json's keys."""
    budget = budget_of(dataset)
    return {
        "dataset_id": dataset_id,
        "epsilon": dataset["epsilon"],
        "delta": dataset["delta"],
        "created": dataset.get("created"),
        "spent_epsilon": budget.spent(),
        "remaining_epsilon": budget.remaining(),
        "remaining_delta": budget.remaining_delta(),
        "release_count": len(dataset["releases"]),
    }


def stated_release(record: dict) -> dict:
    """A release record as stored, with the epsilon it states (``epsilon_at_delta``, ``stated_epsilon``)."""
    at_delta = epsilon_at_delta(record)
    stated = record["epsilon"] if record.get("epsilon") is not None else at_delta
    older = {"epsilon": None, "rho": None, "delta": 0.0, "release_id": None, "attempts": None}  # keys a record may lack
    return {**older, **record, "epsilon_at_delta": at_delta, "stated_epsilon": stated}


def epsilon_at_delta(record: dict) -> float | None:
    """The epsilon a zCDP release's rho gives at its run's delta (``parameters["delta"]``); None where the
    record has an epsilon of its own, or no rho, or no delta > 0 to convert it at."""
    parameters = record.get("parameters")
    delta = parameters.get("delta") if isinstance(parameters, dict) else None
    if record.get("epsilon") is not None or record.get("rho") is None:
        return None
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 < delta < 1:
        return None
    return zcdp_to_epsilon(record["rho"], delta=delta)


def _show_datasets(datasets: dict[str, dict], path: str, *, as_json: bool) -> None:
    summaries = [summary(dataset_id, dataset) for dataset_id, dataset in datasets.items()]
    if as_json:
        print(json.dumps(summaries, indent=2))
        return
    lines = [_summary_line(each) for each in summaries] or [f"no datasets in {path} (set a budget with init)"]
    print("\n".join(lines))


def _show_dataset(dataset_id: str, dataset: dict, *, as_json: bool) -> None:
    releases = [stated_release(record) for record in dataset["releases"]]
    if as_json:
        print(json.dumps({**summary(dataset_id, dataset), "releases": releases}, indent=2))
        return
    print(f"{'time':<25} {'pipeline':<11} {'epsilon':>8} {'rho':>9} {'delta':>9} {'status':<9} output")
    for record in releases:
        epsilon, rho, delta = (_number(record[field]) for field in ("stated_epsilon", "rho", "delta"))
        epsilon += DERIVED_MARK if record["epsilon_at_delta"] is not None else ""
        print(f"{record['time']:<25} {record['pipeline']:<11} {epsilon:>8} {rho:>9} {delta:>9} "
              f"{record['status']:<9} {record['output']}{_named(record)}")  # fmt: skip
    print(_summary_line(summary(dataset_id, dataset)))
    if any(record["epsilon_at_delta"] is not None for record in releases):
        print(f"{DERIVED_MARK} a zCDP release: the epsilon of its rho at its run's delta (the ledger stores the rho)")


def _summary_line(dataset: dict) -> str:
    """One line of a dataset's ``summary``."""
    count = dataset["release_count"]
    return (
        f"dataset {dataset['dataset_id']!r}: epsilon={dataset['epsilon']:g} delta={dataset['delta']:g}, "
        f"spent {dataset['spent_epsilon']:g}, remaining {dataset['remaining_epsilon']:g} "
        f"(and {dataset['remaining_delta']:g} of delta), {count} release{'' if count == 1 else 's'}"
    )


def _named(record: dict) -> str:
    """What a line says of a named release: its id, and its attempts where there were several."""
    if record["release_id"] is None:
        return ""
    attempts = f", {record['attempts']} attempts" if (record["attempts"] or 1) > 1 else ""
    return f"  (release {record['release_id']}{attempts})"


def _number(value: float | None) -> str:
    return "-" if value is None else format(value, ".3g")


if __name__ == "__main__":
    sys.exit(console.run_cli(main))
