"""A privacy-budget ledger that survives runs and races: every release over a dataset's lifetime is counted.

One JSON document (local path or gs://) holds, per dataset id, the total budget (set once) and
every release charged to it: time, pipeline, parameters, epsilon, rho, output, status. A run
reserves its charge before it reads any data (``reserve``); the charge stays whatever happens
next, since the data may have been touched, and ``finish`` only marks the release done or
failed. Composition is ``accounting.PrivacyBudget``'s, so a ledger and a single run agree.

A release may carry an id of the operator's (``release_id``: a scheduler's "this release of this
partition"): it is charged once. Asked again, a release id that is done raises ``AlreadyReleased``
(nothing charged, nothing to run); one whose attempts failed is run again under its charge, its
attempts counted, unless an attempt holds it (a lease, renewed while it runs: ``ReleaseBusyError``);
with other parameters it is refused (docs/DESIGN.md: a named release is charged once).

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
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from beam_expmech.accounting import BudgetExceededError, PrivacyBudget, Release
from beam_expmech.io import writers

_VERSION = 1
_LOG = logging.getLogger(__name__)
LEASE_SECONDS = 300.0  # how long a release id's attempt holds its record without renewing (it renews each fifth)


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


class LostReleaseError(RuntimeError):
    """An attempt no longer holds its release id (its lease ran out and another attempt took it over): it must not
    publish, nor mark the record."""


class ReleaseBusyError(RuntimeError):
    """Another attempt of the release id holds the record (its lease has not run out); nothing was charged."""


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

    def init(self, dataset_id: str, *, epsilon: float, delta: float = 0.0, exist_ok: bool = False) -> bool:
        """Set the total budget of ``dataset_id``, once; whether it was set now. Setting it again is refused, but
        with ``exist_ok`` where the dataset has this very budget already (a scheduler opening a dataset a
        partition or a period): then nothing changes."""
        PrivacyBudget(epsilon=epsilon, delta=delta)  # validates both
        made = []

        def change(document: dict) -> None:
            dataset = document["datasets"].get(dataset_id)
            if dataset is None:
                document["datasets"][dataset_id] = {"epsilon": epsilon, "delta": delta, "created": _now(),
                                                    "releases": []}  # fmt: skip
                made.append(dataset_id)
            elif not exist_ok:
                raise LedgerError(f"dataset {dataset_id!r} already has a budget in {self.path}")
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
                 release_id: str | None, attempt: str | None = None) -> dict:  # fmt: skip
        """``reserve``'s record as stored."""
        record_id = uuid.uuid4().hex
        wanted = _wanted(release, pipeline=pipeline, parameters=parameters, output=output)
        reserved = []

        def change(document: dict) -> None:
            reserved.clear()
            dataset = self._dataset(document, dataset_id)
            if release_id is not None:
                earlier = _named(dataset, release_id)
                if earlier is not None:
                    reserved.append(self._again(dataset_id, earlier, wanted, attempt))
                    return
            budget = budget_of(dataset)
            try:
                budget.charge(release)  # before anything is written
            except BudgetExceededError:
                raise OverspendError(dataset_id, budget, release) from None
            record = {"id": record_id, "time": _now(), **wanted, "status": "reserved"}
            if release_id is not None:
                record |= {"release_id": release_id, "attempts": 1, **_lease(attempt)}
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

    def _again(self, dataset_id: str, record: dict, wanted: dict, attempt: str | None) -> dict:
        """The stored ``record`` of a release id asked for again with ``wanted``: raises if it differs, is done, or
        has an attempt that holds its lease; else taken for one more attempt (a lease of its own)."""
        _check_same(dataset_id, record, wanted)
        if record["status"] == "done":
            raise AlreadyReleased(dataset_id, record["release_id"], record["output"])
        if record["status"] == "reserved" and "lease_until" in record and \
                datetime.fromisoformat(record["lease_until"]) > _clock():  # fmt: skip
            raise ReleaseBusyError(f"release {record['release_id']!r} of dataset {dataset_id!r} has an attempt "
                                   f"running (its lease runs to {record['lease_until']}): nothing spent; try again "
                                   "once it has ended, or its lease has run out")  # fmt: skip
        record["attempts"] = record.get("attempts", 1) + 1
        record |= {"status": "reserved", "last_attempt": _now(), **_lease(attempt)}
        return record

    def state(self, dataset_id: str, release: Release, *, release_id: str, pipeline: str, parameters: dict,
              output: str | None) -> dict | None:  # fmt: skip
        """The record ``release_id`` names (None: a new id), read only; ``LedgerError`` if it names another
        release or other parameters."""
        wanted = _wanted(release, pipeline=pipeline, parameters=parameters, output=output)
        record = _named(self.dataset(dataset_id), release_id)
        if record is not None:
            _check_same(dataset_id, record, wanted)
        return record

    def finish(self, dataset_id: str, record_id: str, status: str, *, attempt: str | None = None) -> None:
        """Mark a reserved release ``done`` or ``failed``; its charge stays either way. With ``attempt`` (a release
        id's attempt token), only while that attempt still holds the record."""
        if status not in ("done", "failed"):
            raise ValueError(f"status must be done or failed, got {status!r}")

        def change(document: dict) -> None:
            for record in self._dataset(document, dataset_id)["releases"]:
                if record["id"] == record_id:
                    if attempt is not None and record.get("attempt") != attempt:
                        raise LostReleaseError(f"release {record.get('release_id')!r}: its lease ran out and another "
                                               "attempt took it over; this one published nothing")  # fmt: skip
                    record["status"] = status
                    record.pop("lease_until", None)
                    return
            raise LedgerError(f"no release {record_id} for dataset {dataset_id!r}")

        self._store.update(change)
        level = logging.INFO if status == "done" else logging.WARNING
        _LOG.log(level, "dataset %r: release %s marked %s; its charge stays", dataset_id, record_id, status)

    def check_holding(self, dataset_id: str, release_id: str, attempt: str, *, margin: float) -> None:
        """Raise ``LostReleaseError`` unless ``attempt`` holds ``release_id`` with at least ``margin`` seconds of its
        lease left: what a job checks right before it publishes."""
        record = _named(self.dataset(dataset_id), release_id)
        if record is None or record.get("attempt") != attempt or record["status"] != "reserved":
            raise LostReleaseError(f"release {release_id!r}: another attempt holds it; this one publishes nothing")
        if datetime.fromisoformat(record["lease_until"]) < _clock() + timedelta(seconds=margin):
            raise LostReleaseError(f"release {release_id!r}: its lease is running out (not renewed); this attempt "
                                   "publishes nothing")  # fmt: skip

    def _renew(self, dataset_id: str, record_id: str, attempt: str) -> None:
        """Extend the lease of ``attempt`` on the record, while it holds it."""

        def change(document: dict) -> None:
            for record in self._dataset(document, dataset_id)["releases"]:
                if record["id"] == record_id and record.get("attempt") == attempt and record["status"] == "reserved":
                    record.update(_lease(attempt))

        self._store.update(change)

    def dataset(self, dataset_id: str) -> dict:
        """The dataset's budget and releases, as stored."""
        return self._dataset(self._store.read()[0], dataset_id)

    def datasets(self) -> dict[str, dict]:
        """Every dataset's budget and releases, as stored, by id (read once; none in an empty or missing ledger)."""
        return self._store.read()[0]["datasets"]

    @contextlib.contextmanager
    def charged(self, dataset_id: str, release: Release, *,
                drawn: Callable[[], tuple[bool, str | None]] | None = None, attempt: str | None = None,
                **details) -> Iterator[str]:  # fmt: skip
        """Reserve ``release``, run the block, then mark it done, or failed if the block raises.

        A release id's later attempt asks ``drawn()`` what earlier attempts left at the output: (True, _), the
        release complete and its own (an attempt that wrote it and died before it said so), marks it done and
        raises ``AlreadyReleased``; (False, PATH), a trace of a draw that may have been seen (a table without
        its manifest, a staged table), raises ``LedgerError``: a new draw needs a new charge. While the block
        runs, its attempt (``attempt``: its token, known to the job's ``LeaseGuard``) renews its lease
        (``LEASE_SECONDS``) every fifth of it: an attempt that dies loses the record once the lease runs out, and a
        concurrent one is refused (``ReleaseBusyError``).
        """
        record = self._reserve(dataset_id, release, release_id=details.pop("release_id", None), attempt=attempt,
                               **details)  # fmt: skip
        record_id, attempt = record["id"], record.get("attempt")
        if record.get("attempts", 1) > 1 and drawn is not None:
            complete, trace = drawn()
            if complete:
                self.finish(dataset_id, record_id, "done", attempt=attempt)
                raise AlreadyReleased(dataset_id, record["release_id"], record["output"])
            if trace is not None:
                self.finish(dataset_id, record_id, "failed", attempt=attempt)
                raise LedgerError(f"release {record['release_id']!r} of dataset {dataset_id!r}: an earlier attempt "
                                  f"left {trace}, a draw that may have been seen; drawing again needs a new charge "
                                  "(a new release id), once it is removed")  # fmt: skip
        stop = threading.Event()
        if attempt is not None:
            threading.Thread(target=self._keep_lease, args=(dataset_id, record_id, attempt, stop), daemon=True,
                             name="beam-expmech-lease").start()  # fmt: skip
        try:
            yield record_id
        except BaseException:
            stop.set()
            self.finish(dataset_id, record_id, "failed", attempt=attempt)
            raise
        stop.set()
        self.finish(dataset_id, record_id, "done", attempt=attempt)

    def _keep_lease(self, dataset_id: str, record_id: str, attempt: str, stop: threading.Event) -> None:
        while not stop.wait(LEASE_SECONDS / 5):
            try:
                self._renew(dataset_id, record_id, attempt)
            except Exception as error:  # a missed renewal: the next one may pass; the lease has four more fifths
                _LOG.warning("ledger %s: the lease of release %s was not renewed (%s)", self.path, record_id,
                             type(error).__name__)  # fmt: skip

    def _dataset(self, document: dict, dataset_id: str) -> dict:
        if dataset_id not in document["datasets"]:
            raise UnknownDatasetError(f"dataset {dataset_id!r} has no budget in {self.path}: set it once first (init)")
        return document["datasets"][dataset_id]


@dataclass(frozen=True)
class LeaseGuard:
    """Called by a job's last step right before it publishes (pickled with it, wherever it runs): raises
    ``LostReleaseError`` unless the attempt still holds its release id with half a lease to spare."""

    ledger: str
    dataset_id: str
    release_id: str
    attempt: str

    def __call__(self) -> None:
        Ledger(self.ledger).check_holding(self.dataset_id, self.release_id, self.attempt, margin=LEASE_SECONDS / 2)


def _named(dataset: dict, release_id: str) -> dict | None:
    """The dataset's record of ``release_id``, if any (one at most: a release id is charged once)."""
    return next((r for r in dataset["releases"] if r.get("release_id") == release_id), None)


def _wanted(release: Release, *, pipeline: str, parameters: dict, output: str | None) -> dict:
    """What a record says of its release, compared when its release id is asked for again."""
    return {"pipeline": pipeline, "parameters": parameters, "label": release.label, "epsilon": release.epsilon,
            "rho": release.rho, "delta": release.delta, "output": output}  # fmt: skip


def _check_same(dataset_id: str, record: dict, wanted: dict) -> None:
    stored = record.get("parameters") or {}
    differing = [f"parameter {key}" for key in {**stored, **wanted["parameters"]}
                 if stored.get(key) != wanted["parameters"].get(key)]  # fmt: skip
    differing += [key for key, value in wanted.items() if record.get(key) != value and key != "parameters"]
    if differing:
        raise LedgerError(f"release {record['release_id']!r} of dataset {dataset_id!r} was charged for another "
                          f"release ({differing[0]} differs): an id names one release; give a new id")  # fmt: skip


def _lease(attempt: str | None = None) -> dict:
    """An attempt's token and the time its hold on the record runs out."""
    until = _clock() + timedelta(seconds=LEASE_SECONDS)
    return {"attempt": attempt or uuid.uuid4().hex, "lease_until": until.isoformat(timespec="milliseconds")}


def _clock() -> datetime:
    return datetime.now(UTC)


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


__all__ = [
    "AlreadyReleased",
    "LeaseGuard",
    "Ledger",
    "LedgerError",
    "LostReleaseError",
    "OverspendError",
    "ReleaseBusyError",
    "budget_of",
]
