"""The privacy-budget ledger: set a dataset's total budget once, and show what was spent on it.

    python -m pipelines.ledger init --budget-ledger PATH --dataset-id ID --epsilon E [--delta D]
    python -m pipelines.ledger show --budget-ledger PATH --dataset-id ID

PATH is local or gs://. Every pipeline run with --budget-ledger PATH --dataset-id ID reserves
its cost there before it reads any data, and is refused (exit code 3) when the dataset's
remaining budget is too small.
"""

from __future__ import annotations

import sys

from beam_expmech.ledger import Ledger, budget_of
from pipelines import console, flags


def main(argv: list[str] | None = None) -> int:
    parser = flags.ArgumentParser(prog="python -m pipelines.ledger", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name, text in (("init", "set a dataset's total budget (once)"), ("show", "print a dataset's releases")):
        command = commands.add_parser(name, help=text)
        command.add_argument("--budget-ledger", required=True, help="ledger file, local or gs://")
        command.add_argument("--dataset-id", required=True)
        if name == "init":
            command.add_argument("--epsilon", type=float, required=True, help="the dataset's lifetime epsilon")
            command.add_argument("--delta", type=float, default=0.0, help="its lifetime delta (default 0: pure DP)")
    args = parser.parse_args(argv)
    ledger = Ledger(args.budget_ledger)
    if args.command == "init":
        ledger.init(args.dataset_id, epsilon=args.epsilon, delta=args.delta)
        print(f"dataset {args.dataset_id!r}: budget epsilon={args.epsilon:g}, delta={args.delta:g} in {ledger.path}")
        return 0
    dataset = ledger.dataset(args.dataset_id)
    budget = budget_of(dataset)
    print(f"{'time':<25} {'pipeline':<11} {'epsilon':>8} {'rho':>9} {'delta':>9} {'status':<9} output")
    for record in dataset["releases"]:
        epsilon, rho, delta = ("-" if record.get(field) is None else format(record[field], ".3g")
                               for field in ("epsilon", "rho", "delta"))  # fmt: skip
        print(f"{record['time']:<25} {record['pipeline']:<11} {epsilon:>8} {rho:>9} {delta:>9} "
              f"{record['status']:<9} {record['output']}")  # fmt: skip
    print(
        f"dataset {args.dataset_id!r}: epsilon={budget.epsilon:g} delta={budget.delta:g}, "
        f"spent {budget.spent():g}, remaining {budget.remaining():g} (and {budget.remaining_delta():g} of delta)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(console.run_cli(main))
