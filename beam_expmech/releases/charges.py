"""What a run spends and says it spent: the charge before any row is read, and the dry run's account of it."""

from __future__ import annotations

import contextlib
import functools
import glob
import json
import posixpath
from collections.abc import Iterator

from apache_beam.io.filesystems import FileSystems

from beam_expmech.accounting import PrivacyBudget, Release
from beam_expmech.io import readers, release_files, writers
from beam_expmech.ledger import Ledger, UnknownDatasetError, budget_of
from beam_expmech.releases.declaration import Budget


@contextlib.contextmanager
def charge(budget: Budget, release: Release, *, delta: float, pipeline: str, parameters: dict,
           output: str | None, attempt: str | None = None) -> Iterator[None]:  # fmt: skip
    """Charge ``release`` to this run's (epsilon, ``delta``) budget and, with a ledger, reserve it for the
    dataset on entering the block, before any data is read; the ledger marks it done or failed when the block
    ends (``parameters``: the run's public parameters, recorded beside it). Raises (nothing spent) if it does
    not fit, and ``AlreadyReleased`` where the budget's release id is done already, or its release was written by
    an attempt that did not live to say so."""
    PrivacyBudget(epsilon=budget.epsilon, delta=delta).charge(release)
    if budget.ledger is None:
        yield
        return
    reservation = Ledger(budget.ledger).charged(
        budget.dataset_id, release, pipeline=pipeline, parameters=parameters, output=output,
        release_id=budget.release_id, attempt=attempt,
        drawn=None if output is None else functools.partial(drawn, output, budget.release_id),
    )  # fmt: skip
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(reservation)  # reads the ledger once: reserve, or refuse
        except UnknownDatasetError:
            raise ValueError(
                f"dataset {budget.dataset_id!r} has no budget in {budget.ledger} (set one with: beam-expmech ledger "
                f"init --budget-ledger {budget.ledger} --dataset-id {budget.dataset_id} --epsilon E)"
            ) from None
        yield  # the block's exception, if any, reaches the reservation: marked failed, charge kept


def drawn(output: str, release_id: str | None) -> tuple[bool, str | None]:
    """What earlier attempts of ``release_id`` left at ``output``: (True, None) where its release is complete (its
    manifest or JSON document, written last, naming that release id); else (False, the first trace of a draw that
    may have been seen: a table without its manifest, a staged table, released bin edges, a file half written), or
    (False, None): nothing of theirs. A document naming another release id is that release's: an attempt of this
    one would have retired it (a manifest) or replaced it (a JSON document) before writing anything."""
    document = release_files.manifest_path(output) if release_files.writes_manifest(output) else output
    if FileSystems.exists(document):
        try:
            named = json.loads(readers.read_text(document)).get("release_id")
        except Exception:  # not a document of ours: what it holds cannot be told
            return False, document
        if named == release_id:
            return True, None
        if named is None:
            return False, document
        return False, None  # another release's, whole: nothing of this one's at the output
    if FileSystems.exists(output):
        return False, output
    folder, name = posixpath.split(output)
    hexes, stem = "[0-9a-f]" * 16, posixpath.splitext(name)[0]
    # synthesis.py's staged table and bin edges, writers' half-written files: each named after the output, exactly
    patterns = [f".staged-{hexes}-{glob.escape(name)}", f".edges-{hexes}-{glob.escape(stem)}.json"]
    patterns += [glob.escape(writers.temporary_prefix(n)) + "*" for n in (name, release_files.manifest_path(name))]
    for pattern in patterns:
        found = [m.path for result in FileSystems.match([posixpath.join(glob.escape(folder), pattern)])
                 for m in result.metadata_list]  # fmt: skip
        if found:
            return False, found[0]
    return False, None


def dry_run_text(*, budget: Budget, cost: Release, unit: str, source: str, plan: dict,
                 recorded: dict | None = None) -> str:  # fmt: skip
    """What a run would do and spend, read from its public parameters (and the ledger's remaining budget; with a
    release id, what the ledger holds of it: ``recorded``, its record, None if it has none yet)."""
    lines = [
        "dry run: no data read, nothing spent",
        f"  input: {source}",
        f"  privacy unit: {unit}",
        f"  cost: {cost.describe()}: {cost.label}",
        *(f"  {key}: {json.dumps(value)}" for key, value in plan.items()),
    ]
    if budget.ledger is not None:
        left = budget_of(Ledger(budget.ledger).dataset(budget.dataset_id))
        lines.append(
            f"  ledger: dataset {budget.dataset_id!r} has {left.remaining():g} of epsilon={left.epsilon:g} left"
            + (f" and {left.remaining_delta():g} of delta={left.delta:g}" if left.delta else "")
        )
    if budget.release_id is not None:
        state = ("new: charged when it runs" if recorded is None else
                 "done already: a run reads nothing and spends nothing" if recorded["status"] == "done" else
                 f"charged already ({recorded['status']}): a run spends nothing more")  # fmt: skip
        lines.append(f"  release {budget.release_id!r}: {state}")
    return "\n".join(lines)
