"""What a run spends and says it spent: the charge before any row is read, the dry run, the release's fields."""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Iterator, Sequence

from beam_expmech.accounting import PrivacyBudget, Release
from beam_expmech.ledger import Ledger, UnknownDatasetError, budget_of
from beam_expmech.manifest import BETA, manifest


@contextlib.contextmanager
def charge(args: argparse.Namespace, release: Release, pipeline: str, *, delta: float = 0.0) -> Iterator[None]:
    """Charge ``release`` to this run's (--epsilon, delta) budget and, with --budget-ledger, reserve
    it for --dataset-id on entering the block, before any data is read; the ledger marks it done or
    failed when the block ends. Raises (nothing spent) if it does not fit."""
    PrivacyBudget(epsilon=args.epsilon, delta=delta).charge(release)
    if args.budget_ledger is None:
        yield
        return
    parameters = {k: v for k, v in vars(args).items() if isinstance(v, (str, int, float, bool, type(None)))}
    reservation = Ledger(args.budget_ledger).charged(
        args.dataset_id, release, pipeline=pipeline, parameters=parameters, output=getattr(args, "output", None)
    )
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(reservation)  # reads the ledger once: reserve, or refuse
        except UnknownDatasetError:
            raise ValueError(
                f"dataset {args.dataset_id!r} has no budget in {args.budget_ledger} (set one with: python -m pipelines."
                f"ledger init --budget-ledger {args.budget_ledger} --dataset-id {args.dataset_id} --epsilon E)"
            ) from None
        yield  # the block's exception, if any, reaches the reservation: marked failed, charge kept


def release_manifest(
    args: argparse.Namespace,
    *,
    mechanism: str,
    cost: Release,
    accuracy: dict | None,
    beta: float | None = BETA,
    delta: float = 0.0,
    **details,
) -> dict:
    """The public fields every release carries (beam_expmech.manifest), from this run's flags, then ``details``."""
    return manifest(
        mechanism=mechanism,
        epsilon=args.epsilon,
        delta=delta,
        cost=cost,
        privacy_unit=args.privacy_unit,
        max_rows_per_unit=args.max_rows_per_unit,
        accuracy=accuracy,
        beta=beta,
        private_randomness=args.seed is None,
        **details,
    )


def dry_run(args: argparse.Namespace, release: Release, files: Sequence[str], plan: dict) -> bool:
    """With --dry-run, print what the run would do and spend (and the ledger's remaining budget)."""
    if not args.dry_run:
        return False
    unit = "each row" if args.privacy_unit is None else f"{args.privacy_unit}, at most {args.max_rows_per_unit} rows"
    lines = [
        "dry run: no data read, nothing spent",
        f"  input: {len(files)} file(s) matching {args.input}",
        f"  privacy unit: {unit}",
        f"  cost: {release.describe()}: {release.label}",
        *(f"  {key}: {json.dumps(value)}" for key, value in plan.items()),
    ]
    if args.budget_ledger is not None:
        budget = budget_of(Ledger(args.budget_ledger).dataset(args.dataset_id))
        lines.append(
            f"  ledger: dataset {args.dataset_id!r} has {budget.remaining():g} of epsilon={budget.epsilon:g} left"
            + (f" and {budget.remaining_delta():g} of delta={budget.delta:g}" if budget.delta else "")
        )
    print("\n".join(lines))
    return True
