"""A private release, declared once as data and run with one call: the source, the privacy unit and its bounds, the
budget, the query and where it is written. From the declaration the library derives, before any row is read, every
sensitivity, the cost, the checks that public information allows (the files' schemas, the places written), the dry
run, the charge (the run's budget and the dataset's ledger), the Beam graph and the release's public fields.

What is taken from others: PipelineDP's ``AggregateParams`` and Tumult's ``Session`` (bounds and budget declared
once, sensitivities derived), OpenDP's split of the score transformation from the selector. What is left: a
budget accountant split lazily across aggregations after the graph is built (PipelineDP's
``compute_budgets``: a release here is charged whole before its data are read, and one declaration is one
release), and a session that holds the data (the dataset's budget lives in a ledger across runs instead).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import tempfile
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import fields as dataclass_fields

import numpy as np
import pyarrow as pa

from beam_expmech import parameters
from beam_expmech.io import avro_tables, release_files, writers
from beam_expmech.ledger import AlreadyReleased, LeaseGuard, Ledger, UnknownDatasetError
from beam_expmech.releases import charges, passes, runners
from beam_expmech.releases.declaration import EACH_ROW, Budget, Files, PrivacyUnit, Rows
from beam_expmech.releases.queries import Halfspace, Quantiles, Select
from beam_expmech.releases.synthesis import Synthesis
from beam_expmech.synth import Progress

QUERIES = (Select, Quantiles, Halfspace, Synthesis)
Query = Select | Quantiles | Halfspace | Synthesis
# A file name's bytes at most: the run writes ".staged-" + 16 hex + "-" + the name, and ".edges-...-STEM.json",
# beside it, within a file system's 255.
MAX_NAME_BYTES = 200


class PrivateRelease:
    """One differentially private release: ``query`` over ``source`` (``Files`` or ``Rows``), each privacy
    ``unit`` bounded as declared, charged to ``budget`` before any row is read, written to ``output`` in the
    format its name says (a selection, quantiles or a halfspace: .json, .csv or .parquet, the latter two with
    NAME.manifest.json beside; synthetic rows: .parquet, .csv or .avro, with their manifest). ``dead_letter``: where
    rejected rows are kept (raw data: outside the output's folder; default none, only counted). ``seed``: tests
    only (the release is then not private).

    Privacy: the query's guarantee at the declared budget (pure epsilon-DP, or (epsilon, delta)-DP for keys found
    in the data and AIM), for the declared unit; every sensitivity is derived from the unit's bounds, never given.
    Everything is checked when it is made (``ValueError`` or ``InputError``, nothing read or spent); ``run``
    charges and releases.
    """

    def __init__(self, *, source: Files | Rows | str, query: Query, budget: Budget, output: str,
                 unit: PrivacyUnit = EACH_ROW, dead_letter: str | None = None,
                 seed: int | None = None):  # fmt: skip
        self.source = Files(source) if isinstance(source, str) else source
        if not isinstance(self.source, (Files, Rows)):
            raise ValueError("source must be Files(pattern), Rows(read) or a file pattern")
        if not isinstance(query, QUERIES):
            raise ValueError(f"query must be a Select, Quantiles, Halfspace or Synthesis, got {type(query).__name__}")
        if not isinstance(budget, Budget) or not isinstance(unit, PrivacyUnit):
            raise ValueError("budget must be a Budget, and unit a PrivacyUnit")
        self.query, self.budget, self.unit, self.seed = query, budget, unit, parameters.test_seed(seed)
        self.output = destination(output, "output")
        self.dead_letter = None if dead_letter is None else destination(dead_letter, "dead_letter")
        synthesis = isinstance(query, Synthesis)
        fmt = release_files.table_format(self.output) if synthesis else release_files.result_format(self.output)
        beside = release_files.manifest_path(self.output) if synthesis or fmt != "json" else None
        check_destinations(self.output, self.dead_letter, budget.ledger, beside)
        self.prepared = query.prepare(unit, budget, seed, self.source)
        if fmt == "avro":  # Avro's rules are on the columns' names
            avro_tables.avro_schema(pa.schema([(c, pa.int64()) for c in self.prepared.described]))
        writers.json_bytes(self.fields)  # every public field as JSON: refused here, not after the charge
        writers.json_bytes(self.parameters())  # and what the ledger records
        if self.seed is not None and budget.release_id is not None:
            raise ValueError("a test seed draws the same noise every run (not private): a named release may not "
                             "take one")  # fmt: skip
        self.recorded = self._recorded()  # what the ledger holds of a named release (None: nothing yet)
        done = self.recorded is not None and self.recorded["status"] == "done"
        # A named release that is done: what ``run`` raises; nothing below is needed, nor read.
        self.done = AlreadyReleased(budget.dataset_id, budget.release_id, self.recorded["output"]) if done else None
        written = {"output": self.output, "the output's manifest": beside, "dead_letter": self.dead_letter}
        self.files = () if self.done else passes.check_input(self.source, self.prepared.specs, self.prepared.labels,
                                                             unit=unit, writes=written)  # fmt: skip

    @property
    def cost(self):
        """What the release costs (``accounting.Release``), from public parameters only."""
        return self.prepared.cost

    @property
    def fields(self) -> dict:
        """The public fields the release will state beside its result."""
        return self.prepared.fields

    def dry_run(self) -> str:
        """What ``run`` would read, do and spend, and what the ledger has left: no row read, nothing spent."""
        unit = "each row" if self.unit.column is None else f"{self.unit.column}, at most {self.unit.max_rows} rows"
        return charges.dry_run_text(budget=self.budget, cost=self.cost, unit=unit, plan=self.prepared.plan,
                                    source=self._reading(()).describe(), recorded=self.recorded)  # fmt: skip

    def run(self, pipeline_args: Sequence[str] = (), *, progress: Progress | None = None) -> dict:
        """Charge the release, then run it (on the runner ``pipeline_args`` name, Beam's options: the DirectRunner
        by default) and write it; the release's document (its result and public fields; synthetic data: the
        manifest). The runner is checked and the graph built before the charge, so that what breaks them spends
        nothing; a job that fails after the charge raises ``JobFailedError`` and its budget stays spent.
        ``progress`` (``synth.Progress``) is told how much of the files each data pass has read (where the runner
        reads in this process, as the DirectRunner does; elsewhere only when the pass is over): the files'
        sizes, public as their names are. With a ``budget.release_id`` that is done already, raises
        ``ledger.AlreadyReleased`` (nothing read, nothing spent)."""
        if self.done is not None:
            raise self.done
        args = tuple(pipeline_args)
        unknown = runners.check_beam_options(args)
        if unknown:
            raise ValueError(f"{unknown[0]!r} is not one of Beam's pipeline options")
        runners.check_runner(args)
        named = self.budget.release_id
        attempt = None if named is None else uuid.uuid4().hex  # this attempt's token, known to the job's last step
        guard = None if named is None else LeaseGuard(self.budget.ledger, self.budget.dataset_id, named, attempt)
        # A named release may be drawn again by a retry: what its draws would tell (a generator's rounds) stays
        # untold, so that a failed attempt shows nothing of its draw.
        reading = dataclasses.replace(self._reading(args, progress), draws_told=named is None, guard=guard)
        return self.prepared.run(reading, charged=functools.partial(self._charged, attempt), output=self.output)

    def _reading(self, pipeline_args: tuple[str, ...], progress: Progress | None = None) -> passes.Reading:
        return passes.Reading(self.source, self.files, self.unit, self.dead_letter, pipeline_args, self.seed,
                              progress)  # fmt: skip

    @contextlib.contextmanager
    def _charged(self, attempt: str | None = None) -> Iterator[None]:
        with charges.charge(self.budget, self.cost, delta=self.prepared.delta, attempt=attempt, **self._named()):
            yield

    def _named(self) -> dict:
        """What the ledger records beside the charge, and compares when a release id is asked for again."""
        return {"pipeline": self.query.pipeline, "parameters": self.parameters(), "output": self.output}

    def _recorded(self) -> dict | None:
        """The ledger's record of the budget's release id, looked up before any file is (None: no id, no record
        yet, or no budget: which the charge says, with how to set one). Another release under the id is refused
        here."""
        if self.budget.release_id is None:
            return None
        try:
            return Ledger(self.budget.ledger).state(self.budget.dataset_id, self.cost,
                                                    release_id=self.budget.release_id, **self._named())  # fmt: skip
        except UnknownDatasetError:
            return None

    def parameters(self) -> dict:
        """The declaration's public parameters, as the ledger records them beside the charge."""
        declared = {"input": getattr(self.source, "pattern", "rows"), "format": getattr(self.source, "format", None),
                    "delimiter": getattr(self.source, "delimiter", None), "output": self.output,
                    "dead_letter": self.dead_letter, "seed": self.seed, "query": type(self.query).__name__,
                    "privacy_unit": self.unit.column, "max_rows_per_unit": self.unit.max_rows,
                    "max_keys_per_unit": self.unit.max_keys, "epsilon": self.budget.epsilon,
                    "delta": self.budget.delta, "dataset_id": self.budget.dataset_id}  # fmt: skip
        for field in dataclass_fields(self.query):
            value = getattr(self.query, field.name)
            if field.name in declared:
                continue
            if isinstance(value, (str, int, float, bool, type(None))):
                declared[field.name] = value
            else:  # candidates, quantiles, a domain: a digest, so that a release id names them too
                declared[field.name + "_sha256"] = _digest(value)
        return declared


def _digest(value: object) -> str:
    """A value's SHA-256, of a canonical JSON form that keeps types apart (1 and "1", a tuple and a list, a range
    and the list it spells) and numbers exact (arrays and numpy numbers as Python's, whose repr round-trips)."""

    def canonical(item):
        if isinstance(item, (bool, str, type(None))):
            return item
        if isinstance(item, (int, float, np.number)):
            return {type(item).__name__: item.item() if isinstance(item, np.number) else item}
        if isinstance(item, range):
            return {"range": [item.start, item.stop, item.step]}
        if isinstance(item, np.ndarray):
            return {"ndarray": [str(item.dtype), list(item.shape), item.ravel().tolist()]}
        if isinstance(item, Mapping):
            return {"mapping": [[canonical(k), canonical(v)] for k, v in item.items()]}
        if isinstance(item, (list, tuple)):
            return {type(item).__name__: [canonical(v) for v in item]}
        if hasattr(item, "__dict__"):
            return {type(item).__qualname__: canonical(vars(item))}
        raise ValueError(f"a release's parameter of type {type(item).__name__} cannot be recorded in the ledger")

    return hashlib.sha256(json.dumps(canonical(value), sort_keys=True).encode()).hexdigest()


def destination(path: str, name: str) -> str:
    """A place a run writes: a local path (``file://`` taken as the path it names) or gs://BUCKET/..."""
    if not isinstance(path, str) or not path:
        raise ValueError(f"{name} must be a path")
    path = path.removeprefix("file://")
    if "://" in path and not path.startswith("gs://"):
        raise ValueError(f"{name} must be a local path or gs://BUCKET/...")
    if path.startswith("gs://"):
        return path
    return os.path.normpath(path) + (os.sep if path.endswith(os.sep) else "")  # what is checked is what is written


def check_destinations(output: str, dead_letter: str | None, ledger: str | None, beside: str | None) -> None:
    """Before anything is read or spent: the output, the manifest ``beside`` it (if it has one) and the dead letter
    are files a run can write, not the ledger, and the dead letter (raw rows) lies outside the release's folder;
    no other release's table is described by the manifest."""
    if output.lower().endswith(".manifest.json"):
        raise ValueError("output ends in .manifest.json, the name a table's manifest takes: choose another name")
    if beside is not None and not output.startswith("gs://"):
        folder, name = os.path.split(os.path.abspath(output))
        tables = {f".{f}" for f in (*release_files.RESULT_FORMATS, *release_files.TABLE_FORMATS) if f != "json"}
        listed = os.listdir(folder) if os.path.isdir(folder) else []
        others = [os.path.join(folder, n) for n in listed if n != name and os.path.splitext(n)[1].lower() in tables
                  and release_files.manifest_path(n) == release_files.manifest_path(name)]  # fmt: skip
        if others:
            raise ValueError(f"{others[0]} is beside the output, and {beside} would describe the new release "
                             "instead of it: choose another name")  # fmt: skip
    for name, path in (("output", output), ("the output's manifest", beside), ("dead_letter", dead_letter)):
        if path is None:
            continue
        if ledger is not None and writers.location(path) == writers.location(ledger):
            raise ValueError(f"{name} is the budget's ledger: a run must not write over it")
        if path.startswith("gs://"):
            continue
        if len(os.path.basename(path).encode()) > MAX_NAME_BYTES:
            raise ValueError(f"{name}'s file name is over {MAX_NAME_BYTES} bytes: the run writes names of its own "
                             "beside it (staged, manifest), which a file system's 255 would not hold")  # fmt: skip
        if os.path.isdir(path) or path.endswith(os.sep):
            raise ValueError(f"{name} names a folder: give a file's path")
        folder = os.path.dirname(os.path.abspath(path))
        while not os.path.exists(folder):  # the run makes the rest of the way
            folder = os.path.dirname(folder)
        try:  # a folder made in it and removed: what the run will do there, known to work, nothing left
            tempfile.TemporaryDirectory(dir=folder).cleanup()
        except OSError as error:
            raise ValueError(f"{name}: {folder} cannot be written ({error.strerror})") from None
    if dead_letter is not None and writers.inside(dead_letter, writers.published_folder(output)):
        raise ValueError("the dead letter must lie outside the output's folder (where releases are published): "
                         "it holds raw rows")  # fmt: skip
