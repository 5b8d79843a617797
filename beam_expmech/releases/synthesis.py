"""Synthetic data as a declared query: one Beam pass counts the workload's marginals, a generator makes the rows
(after a first pass per numeric column whose bin edges are private quantiles), all charged once, before any row.

The generator touches the counts only through mechanisms, then samples rows: ``rows`` of them, or its noisy
size capped at ``max_synthetic_rows`` (a public maximum). The memory all that holds, the table's included, is
checked before any budget is spent; the table is written in chunks by the step that draws it, to a staged name of
the run's own beside the output, and moved into place by the job's last step, then its manifest beside it.
"""

from __future__ import annotations

import contextlib
import math
import posixpath
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import ClassVar

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems

from beam_expmech import parameters
from beam_expmech.accounting import compose
from beam_expmech.grids import NumericGrid
from beam_expmech.io import release_files, writers
from beam_expmech.io.validation import ColumnSpec
from beam_expmech.predicates import HistogramCounts
from beam_expmech.progress import Relay
from beam_expmech.releases import domains
from beam_expmech.releases.declaration import Budget, Files, PrivacyUnit, Rows
from beam_expmech.releases.passes import CountingJob, Reading, built, counting_pipeline, read_back, run_pipeline
from beam_expmech.releases.queries import release_fields
from beam_expmech.synth import MAX_MEMORY
from beam_expmech.transforms import GatherCounts, PrivateQuantiles, PrivateSynthesis
from beam_expmech.transforms.quantiles import JOINT_BINS
from beam_expmech.transforms.synthesis import APPROXIMATE, METHODS


@dataclass(frozen=True)
class Synthesis:
    """Synthetic rows that answer the workload's counting queries nearly as the data do.

    ``domain``: each column's public domain, as a DOMAIN.json holds it: a number of codes (values 0 .. n-1), a list
    of labels, or a numeric grid {"lower": L, "upper": U, "bins": B} (or {"bins": "private", "count": B, "share":
    s}: edges at private quantiles, with s of epsilon). ``method``: "auto" (the default: AIM, or independent 1-way
    marginals where a private count of the rows says the data are too small for AIM; (epsilon, delta)-DP), "aim"
    ((epsilon, delta)-DP via zCDP), "mwem" or "blr" (pure epsilon-DP). ``columns``: a subset of the domain's
    (default all); ``degree``: the workload's k-way marginals (auto, aim, mwem); ``rows``: the synthetic rows
    (required for blr), or else the noisy size capped at ``max_synthetic_rows``; ``rounds``: mwem's rounds, aim's
    first rounds' share; ``target`` (auto): the column the rows will be used to predict: where the data are
    small, auto measures its 2-way marginal with each other column (naive Bayes) in place of independent 1-ways,
    and the manifest states it. Sensitivity, derived: a unit's K rows add at most K to the cells of each marginal.
    ``domain_name`` names the domain in messages (its file). ``PrivateRelease.run(progress=...)`` is told how far
    AIM's or MWEM's rounds are.
    """

    domain: Mapping
    method: str = "auto"
    columns: Sequence[str] | None = None
    degree: int | None = None
    rows: int | None = None
    max_synthetic_rows: int | None = None
    rounds: int | None = None
    target: str | None = None
    domain_name: str = "the domain"
    pipeline: ClassVar[str] = "synthesize"

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, got {self.method!r}")
        if self.method == "blr" and self.rows is None:
            raise ValueError("rows is required with method blr (the synthetic dataset's size)")
        for name in ("rows", "rounds", "max_synthetic_rows", "degree"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, parameters.count(getattr(self, name), name))
        if self.method == "blr" and (self.degree is not None or self.rounds is not None):
            raise ValueError("blr measures the full-domain histogram once: degree and rounds are for aim and mwem")
        if isinstance(self.columns, str):
            raise ValueError(f"columns must be a list of column names, got {self.columns!r}")
        if self.rows is not None and self.max_synthetic_rows is not None:
            raise ValueError("max_synthetic_rows caps the noisy size, drawn only without rows: give one of them")
        if self.target is not None and self.method != "auto":
            raise ValueError(f"target is for method auto (its small-data path): {self.method} would not read it")
        if self.target is not None and not isinstance(self.target, str):
            raise ValueError(f"target must be a column's name, got {self.target!r}")

    def described(self) -> domains.Domain:
        """The declared columns' domains, each checked (``domains.parse_domain``)."""
        described = domains.parse_domain(self.domain, self.domain_name)
        columns = list(self.columns) if self.columns else list(described)
        repeated = [c for i, c in enumerate(columns) if c in columns[:i]]
        if repeated:  # the table would hold it once, while the manifest counted it twice
            raise ValueError(f"columns names {repeated[0]!r} more than once")
        unknown = [c for c in columns if c not in described]
        if unknown:
            raise ValueError(f"column {unknown[0]!r} is not in {self.domain_name}")
        if self.target is not None and (self.target not in columns or len(columns) < 2):
            raise ValueError(f"the target {self.target!r} must be one of the columns synthesized, beside another")
        if self.method != "blr" and self.degree is not None:
            parameters.count(self.degree, "degree", at_most=len(columns), of="columns")
        if self.target is not None and self.degree is not None and self.degree < 2:
            raise ValueError("a target needs a workload of degree 2 or more: its 2-way marginals are counted")
        return {c: described[c] for c in columns}

    def prepare(self, unit: PrivacyUnit, budget: Budget, seed: int | None, source: Files | Rows) -> PreparedSynthesis:
        """The generator and the edges' quantiles, built and rehearsed (memory included), a numeric column's grid
        typed by the input's schema (no row read), and the run's one charge for them all."""
        if self.method in APPROXIMATE and not budget.delta:
            raise ValueError(f"method {self.method} is (epsilon, delta)-DP: the budget needs a delta > 0")
        if self.method not in APPROXIMATE and budget.delta:
            raise ValueError(f"method {self.method} is pure epsilon-DP: the budget's delta would not be spent; "
                             "leave it 0")  # fmt: skip
        if unit.max_keys is not None:
            raise ValueError("max_keys bounds keys found in the data: with Synthesis it would do nothing")
        described = self.described()
        if isinstance(source, Files):  # integers stay integers; rows' types are not known before they are read
            described = domains.with_input_types(
                described, source.pattern, source.format, self.domain_name, source.delimiter
            )
        return PreparedSynthesis(self, unit, budget, seed, described)


class PreparedSynthesis:
    """A synthesis made ready to run from public parameters: its private edges' steps, its generator, the cost of
    them all, the columns it reads, its plan; ``run`` charges once and makes both kinds of pass."""

    def __init__(self, query: Synthesis, unit: PrivacyUnit, budget: Budget, seed: int | None,
                 described: domains.Domain):  # fmt: skip
        self.query, self.unit, self.budget, self.seed, self.described = query, unit, budget, seed, described
        self.numeric, self.private = domains.grids(described), domains.private_grids(described)
        self.domain = domains.domain_sizes(described)
        self.edges = self._edge_steps()  # rehearsed when built, like every step
        self.step = self.synthesis(self.numeric)  # its checks before any budget; again with the released edges
        self.delta, self.cost = self.step.delta, self.step.cost
        if self.edges:
            label = f"synthetic data by {query.method}, bin edges of {', '.join(self.edges)} by quantiles"
            self.cost = compose([self.cost, *(e.cost for e in self.edges.values())], label)
        self.labels = {c: v for c, v in described.items() if isinstance(v, tuple)}
        self.composition = self._composition()
        self.fields = self._fields(self.step)

    def _edge_steps(self) -> dict[str, PrivateQuantiles]:
        """Each private grid's quantiles step: its count - 1 quantiles drawn together (JointExp) with its share of
        epsilon, on a public histogram of JOINT_BINS bins over [lower, upper]. The shares must leave the
        generator some of epsilon."""
        shares = math.fsum(p.share for p in self.private.values())
        if shares >= 1:
            raise ValueError(f"{self.query.domain_name}: the private grids' shares add up to {shares:g}; they must "
                             "leave the generator some of epsilon")  # fmt: skip
        return {c: PrivateQuantiles(epsilon=p.share * self.budget.epsilon, quantiles=p.quantiles,
                                    family=HistogramCounts(c, p.lower, p.upper, JOINT_BINS), method="joint",
                                    max_rows=self.unit.rows, seed=self.seed)
                for c, p in self.private.items()}  # fmt: skip

    def synthesis(self, grids: dict[str, NumericGrid], progress: Relay | None = None) -> PrivateSynthesis:
        """The generator's final step on ``grids``: AIM beside the edges' releases by the better route, auto, MWEM
        and BLR with what the edges leave of epsilon; ``progress`` told its rounds and row fitting."""
        query, epsilon, elsewhere = self.query, self.budget.epsilon, []
        if self.edges and query.method == "aim":
            elsewhere = [e.cost for e in self.edges.values()]
        elif self.edges:
            epsilon *= 1 - math.fsum(p.share for p in self.private.values())
        return PrivateSynthesis(method=query.method, domain=self.domain, epsilon=epsilon, delta=self.budget.delta,
                                degree=query.degree, rows=query.rows, max_synthetic_rows=query.max_synthetic_rows,
                                rounds=query.rounds, max_rows=self.unit.rows, grids=grids, elsewhere=elsewhere,
                                target=query.target, seed=self.seed, progress=progress)  # fmt: skip

    @property
    def specs(self) -> list[ColumnSpec]:
        """Each column as the generator's pass reads it (through its grid, once its edges are released)."""
        return [domains.domain_spec(c, self.numeric.get(c, v)) for c, v in self.described.items()] + self.unit.specs()

    @property
    def plan(self) -> dict:
        query, step = self.query, self.step
        plan = {"method": query.method, "guarantee": _guarantee(step), "epsilon": self.budget.epsilon,
                "delta": self.delta,
                "columns": list(self.described),
                "workload": f"{len(step.family.marginals)} marginals, {step.family.num_candidates:,} cells",
                "synthetic rows": f"{query.rows:,}" if query.rows else
                f"the noisy size, at most {step.max_synthetic_rows:,}",
                "memory": f"at most {step.memory / 2**20:,.0f} MiB of {MAX_MEMORY / 2**20:,.0f} MiB"}  # fmt: skip
        if query.target is not None:
            plan["target"] = f"{query.target} (where the data are small: its 2-way marginals, naive Bayes)"
        if self.edges:
            plan["private bin edges"] = ", ".join(f"{c}: {self.private[c].count} bins, epsilon {e.epsilon:g}"
                                                  for c, e in self.edges.items())  # fmt: skip
        if self.composition:
            plan["composition"] = self.composition["rule"]
        return plan

    def _composition(self) -> dict:
        """AIM beside private edges: the route its rho took (``accounting.zcdp_beside``), the edges' epsilon and
        rho, and AIM's rho (public parameters), for the manifest and the dry run; {} otherwise."""
        step, edges = self.step, self.edges
        if step.share is None or not edges:
            return {}
        epsilon, rho = math.fsum(e.cost.epsilon for e in edges.values()), math.fsum(e.cost.rho for e in edges.values())
        if step.share.route == "basic":
            rule = (f"basic composition: the edges epsilon={epsilon:g}-DP, AIM rho={step.rho:g}-zCDP, hence "
                    f"(epsilon={step.cost.epsilon:g}, delta={step.delta:g})-DP; the epsilons add")  # fmt: skip
        else:
            rule = f"zCDP: the edges rho={rho:g} (epsilon={epsilon:g}), AIM rho={step.rho:g}; the rhos add"
        return {"route": step.share.route, "rule": rule, "edges_epsilon": epsilon, "edges_rho": rho,
                "aim_rho": step.rho}  # fmt: skip

    def _fields(self, step: PrivateSynthesis) -> dict:
        stated = {c: g.manifest() | ({"edges_epsilon": self.edges[c].epsilon} if c in self.edges else {})
                  for c, g in self.numeric.items()}  # fmt: skip
        return release_fields(self.unit, self.budget, self.seed, mechanism=self.query.method, cost=self.cost,
                              delta=self.delta, accuracy=None, method=self.query.method,
                              guarantee=_guarantee(step), columns=list(self.described),
                              **({"target": self.query.target} if self.query.target is not None else {}),
                              **({"composition": self.composition} if self.composition else {}),
                              **({"numeric": stated} if self.numeric else {}))  # fmt: skip

    def _main_pass(self, reading: Reading, step: PrivateSynthesis, output: str, staged: str) -> CountingJob:
        """The data pass that counts the workload and releases the table (staged by the step that draws it)."""
        fields = self._fields(step)
        release = (
            GatherCounts()
            | step
            | "Manifest" >> beam.MapTuple(lambda table, details: (table, fields | details))
            | "Stage" >> beam.Map(stage_table, staged, self.labels)  # in the step that drew it: no copy through Beam
        )
        job = CountingJob(self.specs, step.family, release)
        return built(lambda: counting_pipeline(reading, job, lambda payload: publish(payload, output)))

    def run(self, reading: Reading, *, charged: Callable[[], AbstractContextManager], output: str) -> dict:
        """Charge once (edges' passes included), release the edges, then count and release the table; the
        manifest read back once written."""
        staged = staged_path(output)
        told = reading.progress is not None and reading.draws_told
        relay = Relay(reading.progress_token) if told else None  # pickled with the step
        step = self.step if relay is None else self.synthesis(self.numeric, relay)
        graph = self._main_pass(reading, step, output, staged)  # before the charge: what breaks it, free
        with charged():  # before any row is read
            for column, quantiles in self.edges.items():
                spec = domains.domain_spec(column, self.private[column])
                self.numeric[column] = self.private[column].grid(released_quantiles(reading, output, spec, quantiles))
            if self.edges:  # the same checks as before the charge, passed then, and the pass on the released grids
                graph = self._main_pass(reading, self.synthesis(self.numeric, relay), output, staged)
            try:
                run_pipeline(reading, graph)
            except BaseException:
                with contextlib.suppress(Exception):  # a staged table the failed job never published
                    FileSystems.delete([staged])
                raise
        return read_back(release_files.manifest_path(output))


def released_quantiles(reading: Reading, output: str, spec: ColumnSpec, quantiles: PrivateQuantiles) -> np.ndarray:
    """One data pass: a column's quantiles (read as ``spec``), released (charged with the run), written to a hidden
    file of this run's own beside ``output`` and read back (on a cluster a worker writes it), then that file
    removed: the manifest states the edges."""
    folder, name = posixpath.split(posixpath.splitext(output)[0])
    path = posixpath.join(folder, f".edges-{uuid.uuid4().hex[:16]}-{name}.json")
    job = CountingJob([spec, *reading.unit.specs()], quantiles.family, GatherCounts() | quantiles)
    run_pipeline(
        reading, built(lambda: counting_pipeline(reading, job, lambda values: writers.write_json(path, values)))
    )
    values = read_back(path)
    FileSystems.delete([path])
    return np.array(list(values.values()), dtype=np.float64)


def _guarantee(step: PrivateSynthesis) -> str:
    if step.chooser is not None:
        small = "independent 1-ways" if step.target is None else f"naive Bayes on {step.target}'s 2-ways"
        return (
            "(epsilon, delta)-DP, charged as such (in a ledger its epsilon adds up; method aim's rho composes "
            f"with other zCDP releases): a private count of the rows picks AIM (zCDP) or {small} (pure)"
        )
    if step.share is None:
        return "pure epsilon-DP"
    if step.share.route == "basic":
        return "rho-zCDP, hence (epsilon less the edges', delta)-DP; with the edges', (epsilon, delta)-DP"
    return "rho-zCDP, hence (epsilon, delta)-DP"


def _as_array(values) -> pa.Array:
    """Floats (a numeric float column) as float64, anything else (codes, integers) as int64."""
    values = np.asarray(values)
    return pa.array(values if values.dtype.kind == "f" else values.astype(np.int64, copy=False))


def staged_path(output: str) -> str:
    """Where the step that draws the synthetic table writes it (hidden, beside the output, a name of this run's
    own): the job's last step, once the dead letter is written, moves it to the output."""
    folder, name = posixpath.split(output)
    return posixpath.join(folder, f".staged-{uuid.uuid4().hex[:16]}-{name}")


def stage_table(payload, path: str, labels: dict[str, tuple[str, ...]]) -> tuple[str, dict]:
    """The synthetic table written to ``path`` (Parquet, CSV or Avro by its extension), atomically, a chunk of rows
    at a time (``writers.write_table_atomically``), in the step that drew it: so that the whole table is held
    once, never again as bytes, nor encoded and decoded by Beam on its way to the job's last step, which gets
    (``path``, the manifest) instead.

    Columns the domain labels are written as labels, numeric columns as their numbers (int64 or float64), the
    others as their int codes (int64).
    """
    columns, manifest = payload
    names = list(columns)
    rows = len(columns[names[0]])
    kinds = {c: pa.string() if c in labels else _as_array(columns[c][:0]).type for c in names}
    taken = {c: pa.array(labels[c]) for c in names if c in labels}
    # A row's bytes at most, as Arrow's arrays or as CSV text: a number's 24 characters, a label quoted with
    # its quotes doubled; so a chunk stays near writers.TABLE_CHUNK_BYTES however wide the rows.
    row_bytes = sum(32 + (2 * max(len(v.encode()) for v in labels[c]) if c in labels else 0) for c in names)
    step = writers.table_chunk_rows(row_bytes)

    def chunks():
        for start in range(0, max(rows, 1), step):  # one chunk even of no rows: the header
            arrays = {c: _as_array(columns[c][start : start + step]) for c in names}
            yield pa.table({c: taken[c].take(v) if c in taken else v for c, v in arrays.items()})

    writers.write_table_atomically(path, pa.schema(list(kinds.items())), chunks())
    return path, manifest


def publish(staged: tuple[str, dict], output: str) -> None:
    """The job's last step: the staged table moved to the output (``writers.rename_atomically``), then the
    manifest written beside it, atomically."""
    path, manifest = staged
    described = writers.json_bytes(manifest)  # first: a manifest that cannot be written stops it before the table
    release_files.retire_manifest(output)
    writers.rename_atomically(path, output)
    writers.write_atomically(release_files.manifest_path(output), described)
