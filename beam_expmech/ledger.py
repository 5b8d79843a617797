"""A privacy-budget ledger that survives runs and races: every release over a dataset's lifetime is counted.

One JSON document (local path or gs://) holds, per dataset id, the total budget (set once) and
every release charged to it: time, pipeline, parameters, epsilon, rho, output, status. A run
reserves its charge before it reads any data (``reserve``); the charge stays whatever happens
next, since the data may have been touched, and ``finish`` only marks the release done or
failed. Composition is ``accounting.PrivacyBudget``'s, so a ledger and a single run agree.

A release may carry an id of the operator's (``release_id``: a scheduler's "this release of this
partition"): it is charged once. Asked again, a release id that is done raises ``AlreadyReleased``
(nothing charged, nothing to run); one whose attempts failed is run again under its charge, its
attempts counted (docs/DESIGN.md: a release is charged once by its id); with other parameters it
is refused.

Concurrency: every change is read, modify, write-if-unchanged, retried on conflict.
- Local: an exclusive ``fcntl`` lock on PATH.lock around the read and an atomic rename.
- gs://: the object's generation as a precondition (compare-and-swap); a concurrent writer
  makes the upload fail with 412 and the change is retried from a fresh read.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import secrets
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

from beam_expmech.accounting import BudgetExceededError, PrivacyBudget, Release
from beam_expmech.io import writers

_VERSION = 1
_LOG = logging.getLogger(__name__)


class LedgerError(ValueError):
    """The ledger cannot do what was asked (no such dataset, budget already set, unreadable file)."""


class UnknownDatasetError(LedgerError):
    """The ledger holds no budget for this dataset id."""


class AlreadyReleased(Exception):
    """The release id names a release that is written already: nothing was charged, nothing is to run."""

    def __init__(self, dataset_id: str, release_id: str, output: str | None):
        self.dataset_id, self.release_id, self.output = dataset_id, release_id, output
        where = f" ({output})" if output else ""
        super().__init__(f"release {release_id!r} of dataset {dataset_id!r} is done already{where}: nothing read, "
                         "nothing spent")  # fmt: skip


class OverspendError(RuntimeError):
    """A run would take a dataset past its budget; nothing was charged."""

    def __init__(self, dataset_id: str, budget: PrivacyBudget, release: Release):
        delta = f"{budget.remaining_delta():g} of its delta={budget.delta:g}" if budget.delta else "delta=0"
        super().__init__(
            f"dataset {dataset_id!r}: {budget.remaining():g} of its epsilon={budget.epsilon:g} ({delta}) remains, "
            f"and this run asks for {release.describe()}: refused, nothing spent"
        )


class Ledger:
    """The budget ledger at ``path`` (local, or gs://bucket/object)."""

    def __init__(self, path: str):
        self.path = path
        self._store = _GcsStore(path) if path.startswith("gs://") else _LocalStore(path)

    def init(self, dataset_id: str, *, epsilon: float, delta: float = 0.0) -> None:
        """Set the total budget of ``dataset_id``, once; setting it again is refused."""
        PrivacyBudget(epsilon=epsilon, delta=delta)  # validates both

        def change(document: dict) -> None:
            if dataset_id in document["datasets"]:
                raise LedgerError(f"dataset {dataset_id!r} already has a budget in {self.path}")
            document["datasets"][dataset_id] = {
                "epsilon": epsilon,
                "delta": delta,
                "created": _now(),
                "releases": [],
            }

        self._store.update(change)

    def ensure(self, dataset_id: str, *, epsilon: float, delta: float = 0.0) -> bool:
        """Set the total budget of ``dataset_id`` unless it has this very budget already (whether it was set now);
        another budget is refused. For a scheduler that opens a dataset a partition or a period."""
        PrivacyBudget(epsilon=epsilon, delta=delta)
        made = []

        def change(document: dict) -> None:
            dataset = document["datasets"].get(dataset_id)
            if dataset is None:
                document["datasets"][dataset_id] = {"epsilon": epsilon, "delta": delta, "created": _now(),
                                                    "releases": []}  # fmt: skip
                made.append(dataset_id)
            elif (dataset["epsilon"], dataset["delta"]) != (epsilon, delta):
                raise LedgerError(f"dataset {dataset_id!r} has another budget in {self.path} (epsilon="
                                  f"{dataset['epsilon']:g}, delta={dataset['delta']:g}): it is set once")  # fmt: skip

        self._store.update(change)
        return bool(made)

    def reserve(self, dataset_id: str, release: Release, *, pipeline: str, parameters: dict, output: str | None,
                release_id: str | None = None) -> str:  # fmt: skip
        """Charge ``release`` to ``dataset_id`` before the data is read; the record's id.

        Raises ``OverspendError`` (recording nothing) when it would overspend. With a ``release_id`` the ledger
        holds already: ``AlreadyReleased`` if it is done; if not, the same record, its attempts counted and
        nothing charged again; ``LedgerError`` if it was charged for another release or other parameters.
        """
        return self._reserve(dataset_id, release, pipeline=pipeline, parameters=parameters, output=output,
                             release_id=release_id)["id"]  # fmt: skip

    def _reserve(self, dataset_id: str, release: Release, *, pipeline: str, parameters: dict, output: str | None,
                 release_id: str | None) -> dict:  # fmt: skip
        """``reserve``'s record as stored."""
        record_id = uuid.uuid4().hex
        wanted = {"pipeline": pipeline, "parameters": parameters, "label": release.label, "epsilon": release.epsilon,
                  "rho": release.rho, "delta": release.delta, "output": output}  # fmt: skip
        reserved = []

        def change(document: dict) -> None:
            reserved.clear()
            dataset = self._dataset(document, dataset_id)
            if release_id is not None:
                earlier = next((r for r in dataset["releases"] if r.get("release_id") == release_id), None)
                if earlier is not None:
                    reserved.append(self._again(dataset_id, earlier, wanted))
                    return
            budget = budget_of(dataset)
            try:
                budget.charge(release)  # before anything is written
            except BudgetExceededError:
                raise OverspendError(dataset_id, budget, release) from None
            record = {"id": record_id, "time": _now(), **wanted, "status": "reserved"}
            if release_id is not None:
                record |= {"release_id": release_id, "attempts": 1}
            dataset["releases"].append(record)
            reserved.append(record)

        self._store.update(change)
        (record,) = reserved
        if record["id"] == record_id:
            _LOG.info("dataset %r: reserved %s for %s (release %s)", dataset_id, release.describe(), pipeline,
                      release_id or record_id)  # fmt: skip
        else:
            _LOG.info("dataset %r: release %r charged already: attempt %d, nothing more spent", dataset_id,
                      release_id, record["attempts"])  # fmt: skip
        return record

    def _again(self, dataset_id: str, record: dict, wanted: dict) -> dict:
        """The stored ``record`` of a release id asked for again with ``wanted``: raises if it is done or
        differs; else marked reserved for one more attempt."""
        stored = record.get("parameters") or {}
        differing = [f"parameter {key}" for key in {**stored, **wanted["parameters"]}
                     if stored.get(key) != wanted["parameters"].get(key)]  # fmt: skip
        differing += [key for key, value in wanted.items() if record.get(key) != value and key != "parameters"]
        if differing:
            raise LedgerError(f"release {record['release_id']!r} of dataset {dataset_id!r} was charged for another "
                              f"release ({differing[0]} differs): an id names one release; give a new id")  # fmt: skip
        if record["status"] == "done":
            raise AlreadyReleased(dataset_id, record["release_id"], record["output"])
        record["attempts"] = record.get("attempts", 1) + 1
        record["status"], record["last_attempt"] = "reserved", _now()
        return record

    def finish(self, dataset_id: str, record_id: str, status: str) -> None:
        """Mark a reserved release ``done`` or ``failed``; its charge stays either way."""
        if status not in ("done", "failed"):
            raise ValueError(f"status must be done or failed, got {status!r}")

        def change(document: dict) -> None:
            for record in self._dataset(document, dataset_id)["releases"]:
                if record["id"] == record_id:
                    record["status"] = status
                    return
            raise LedgerError(f"no release {record_id} for dataset {dataset_id!r}")

        self._store.update(change)
        level = logging.INFO if status == "done" else logging.WARNING
        _LOG.log(level, "dataset %r: release %s marked %s; its charge stays", dataset_id, record_id, status)

    def dataset(self, dataset_id: str) -> dict:
        """The dataset's budget and releases, as stored."""
        return self._dataset(self._store.read()[0], dataset_id)

    def datasets(self) -> dict[str, dict]:
        """Every dataset's budget and releases, as stored, by id (read once; none in an empty or missing ledger)."""
        return self._store.read()[0]["datasets"]

    @contextlib.contextmanager
    def charged(self, dataset_id: str, release: Release, *, written: Callable[[], bool] | None = None,
                **details) -> Iterator[str]:  # fmt: skip
        """Reserve ``release``, run the block, then mark it done, or failed if the block raises.

        A release id's later attempt whose release is ``written`` already (an attempt that wrote it and died
        before it said so) is marked done and raises ``AlreadyReleased``: written once, never drawn again.
        """
        record = self._reserve(dataset_id, release, release_id=details.pop("release_id", None), **details)
        record_id = record["id"]
        if record.get("attempts", 1) > 1 and written is not None and written():
            self.finish(dataset_id, record_id, "done")
            raise AlreadyReleased(dataset_id, record["release_id"], record["output"])
        try:
            yield record_id
        except BaseException:
            self.finish(dataset_id, record_id, "failed")
            raise
        self.finish(dataset_id, record_id, "done")

    def _dataset(self, document: dict, dataset_id: str) -> dict:
        if dataset_id not in document["datasets"]:
            raise UnknownDatasetError(f"dataset {dataset_id!r} has no budget in {self.path}: set it once first (init)")
        return document["datasets"][dataset_id]


def budget_of(dataset: dict) -> PrivacyBudget:
    """The dataset's budget with every recorded release charged to it, failed ones included."""
    budget = PrivacyBudget(epsilon=dataset["epsilon"], delta=dataset["delta"])
    for record in dataset["releases"]:
        budget.charge(Release(record["label"], record["epsilon"], record["rho"], record.get("delta", 0.0)))
    return budget


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _empty() -> dict:
    return {"version": _VERSION, "datasets": {}}


def _parse(data: bytes | None, path: str) -> dict:
    if data is None:
        return _empty()
    try:
        document = json.loads(data)
    except ValueError:
        raise LedgerError(f"{path}: not a valid ledger (not JSON)") from None
    if not isinstance(document, dict) or document.get("version") != _VERSION:
        raise LedgerError(f"{path}: not a ledger of version {_VERSION}")
    if not isinstance(document.get("datasets"), dict):
        raise LedgerError(f"{path}: not a valid ledger (no datasets)")
    return document


def _encode(document: dict) -> bytes:
    return (json.dumps(document, indent=1, sort_keys=True) + "\n").encode()


class _LocalStore:
    def __init__(self, path: str):
        self.path = path

    def read(self) -> tuple[dict, None]:
        try:
            with open(self.path, "rb") as handle:
                return _parse(handle.read(), self.path), None
        except FileNotFoundError:
            return _empty(), None

    def update(self, change: Callable[[dict], None]) -> None:
        with open(self.path + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, even on a crash
            document, _ = self.read()
            change(document)
            writers.write_atomically(self.path, _encode(document))


class _GcsStore:
    _ATTEMPTS = 50

    def __init__(self, path: str):
        from google.cloud import storage

        bucket, _, name = path[len("gs://") :].partition("/")
        if not bucket or not name:
            raise LedgerError(f"{path}: a gs:// ledger needs a bucket and an object name")
        self.path = path
        client = (
            storage.Client.create_anonymous_client() if os.environ.get("STORAGE_EMULATOR_HOST") else storage.Client()
        )
        self._bucket = client.bucket(bucket)
        self._name = name

    def read(self) -> tuple[dict, int]:
        """The document and its generation (0: no object yet)."""
        blob = self._bucket.get_blob(self._name)
        if blob is None:
            return _empty(), 0
        return _parse(blob.download_as_bytes(if_generation_match=blob.generation), self.path), blob.generation

    def update(self, change: Callable[[dict], None]) -> None:
        from google.api_core import exceptions

        for attempt in range(self._ATTEMPTS):
            try:
                document, generation = self.read()
            except exceptions.PreconditionFailed:  # changed between listing and download
                continue
            change(document)
            try:
                self._bucket.blob(self._name).upload_from_string(
                    _encode(document), content_type="application/json", if_generation_match=generation
                )
                return
            except exceptions.PreconditionFailed:  # someone else wrote first: start again from their version
                _LOG.debug("%s: a concurrent write won (attempt %d); retrying", self.path, attempt + 1)
                time.sleep(secrets.randbelow(1000) / 1000 * 0.05 * 2 ** min(attempt, 5))  # jitter
        raise LedgerError(f"{self.path}: gave up after {self._ATTEMPTS} conflicting writes")


__all__ = ["AlreadyReleased", "Ledger", "LedgerError", "OverspendError", "budget_of"]
