"""The queries a release declares, as data: a selection (over public candidates or keys found in the data), quantiles,
a halfspace. Each derives from the declared privacy unit and budget, before any row is read, everything it needs:
the columns it reads, the predicate family it counts, its final step with the sensitivity the unit's bounds give it,
its cost, and the public fields its release states (``Prepared``). The score transformation (the family, which
carries the sensitivity) stays apart from the selector (the final step, which carries the privacy map), as OpenDP
keeps them; here the user types neither.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import ClassVar

import apache_beam as beam
import pyarrow as pa

from beam_expmech import halfspaces, parameters
from beam_expmech.accounting import Release
from beam_expmech.io import release_files
from beam_expmech.io.validation import ColumnSpec
from beam_expmech.manifest import BETA, manifest
from beam_expmech.mechanisms import accuracy_bound
from beam_expmech.mechanisms.quantile import rank_error_bound
from beam_expmech.predicates import CategoryCounts, HistogramCounts, MarginalCounts
from beam_expmech.releases.declaration import Budget, PrivacyUnit
from beam_expmech.releases.passes import (
    CountingJob,
    KeyCountingJob,
    Reading,
    built,
    counting_pipeline,
    read_back,
    run_pipeline,
)
from beam_expmech.transforms import GatherCounts, PrivateHalfspace, PrivateQuantiles, PrivateSelect
from beam_expmech.transforms.counts import DEFAULT_SHARD_SIZE
from beam_expmech.transforms.keys import MECHANISMS as KEY_MECHANISMS
from beam_expmech.transforms.keys import PrivateTopKeys

# Every candidate's count exists somewhere (the candidate set is public, zeros included): 2^32 of them
# are 32 GiB of counts across the workers, in 4,096 shards of the default size.
MAX_CANDIDATES = 1 << 32
PUBLIC_MECHANISMS = ("exponential", "permute-and-flip")
QUANTILE_METHODS = ("independent", "joint")
DEFAULT_WEIGHTS = (-1, 0, 1)  # a halfspace's grid of weights, unless declared
RESULT_FIELDS = ("selected", "weights", "features")  # a selection's or halfspace's result, as its table holds it


def result_table(document: dict) -> pa.Table:
    """The result of a selection or halfspace as its table (release_files.result_table)."""
    return release_files.result_table({key: document[key] for key in RESULT_FIELDS if key in document})


@dataclass(frozen=True)
class Prepared:
    """A query made ready for one data pass, from public parameters only: what it costs (``cost``, with the
    ``delta`` it spends), the columns it reads (``specs``; ``labels``: public values a typed column must be able
    to hold), the public fields of its release (``fields``), what a dry run states (``plan``), and the pass
    itself (``job``: its final step turns the counts into the release's document)."""

    cost: Release
    delta: float
    specs: list[ColumnSpec]
    fields: dict
    plan: dict
    job: CountingJob | KeyCountingJob
    labels: dict[str, list] | None = None
    table_of: Callable[[dict], pa.Table] = result_table  # the result as a table (CSV, Parquet)

    def run(self, reading: Reading, *, charged: Callable[[], AbstractContextManager], output: str) -> dict:
        """Build the pass, charge (``charged``: the charge's block, entered before any row is read), run it to the
        release's write at ``output``, and read the release back, after the block: the ledger marks the run
        done exactly when the release is written."""
        write = functools.partial(write_release, output, self.table_of)
        graph = built(lambda: counting_pipeline(reading, self.job, write))
        with charged():
            run_pipeline(reading, graph)
        return read_release(output)


def write_release(output: str, table_of: Callable[[dict], pa.Table], document: dict) -> None:
    """A selection's, quantiles' or halfspace's ``document`` (its result, then its public fields) written to
    ``output`` in the format its name says: JSON whole, or the result as a CSV or Parquet table (``table_of``)
    with the whole document beside it as the manifest."""
    table = table_of(document) if release_files.writes_manifest(output) else None
    release_files.write_result(output, document=document, table=table, manifest=document)


def pure(name: str, unit: PrivacyUnit, budget: Budget) -> None:
    """A pure epsilon-DP query over public candidates (``name``): a budget's delta or a unit's max_keys would do
    nothing, so each is refused rather than ignored."""
    if budget.delta:
        raise ValueError(f"{name} is pure epsilon-DP: the budget's delta would not be spent; leave it 0")
    if unit.max_keys is not None:
        raise ValueError(f"max_keys bounds keys found in the data: with {name} it would do nothing")


def read_release(output: str) -> dict:
    """The document ``write_release`` wrote, read back (the manifest beside a table holds all of it)."""
    if not release_files.writes_manifest(output):
        return read_back(output)
    return read_back(release_files.manifest_path(output))


def release_fields(
    unit: PrivacyUnit,
    budget: Budget,
    seed: int | None,
    *,
    mechanism: str,
    cost: Release,
    accuracy: dict | None,
    beta: float | None = BETA,
    delta: float = 0.0,
    **details,
) -> dict:
    """The public fields every release carries (beam_expmech.manifest), from its declaration (its release id, if
    the budget names one: what a later attempt knows it by), then ``details``."""
    return manifest(
        mechanism=mechanism,
        epsilon=budget.epsilon,
        delta=delta,
        cost=cost,
        privacy_unit=unit.column,
        max_rows_per_unit=unit.max_rows,
        accuracy=accuracy,
        beta=beta,
        private_randomness=seed is None,
        **({"release_id": budget.release_id} if budget.release_id is not None else {}),
        **details,
    )


@dataclass(frozen=True)
class Select:
    """The ``k`` values of ``column`` held by the most rows, best first, as labels.

    ``candidates``: public labels (text), a ``range`` of integers, or None for keys found in the data (then the
    budget needs a delta: a key only one unit holds is released with probability below it, and fewer than k
    keys may be released). ``mechanism``: with candidates "exponential" (the default) or "permute-and-flip"
    (k = 1); keys found in the data: "keys-then-laplace" (the default), "keys-then-exponential" or
    "limited-domain". Sensitivity, derived: a unit's K rows move a candidate's count by at most K (monotone);
    with keys, K rows over at most L keys.
    """

    column: str
    candidates: Sequence[str] | range | None = None
    k: int = 1
    mechanism: str | None = None
    shard_size: int | None = None
    pipeline: ClassVar[str] = "select"

    def __post_init__(self):
        keys = self.candidates is None
        object.__setattr__(self, "k", parameters.count(self.k, "k"))
        if keys and self.shard_size is not None:
            raise ValueError("shard_size spreads public candidates' counts: keys found in the data have their own")
        shard_size = DEFAULT_SHARD_SIZE if self.shard_size is None else self.shard_size
        object.__setattr__(self, "shard_size", parameters.count(shard_size, "shard_size"))
        if self.mechanism is None:  # the default depends on where the candidates come from
            object.__setattr__(self, "mechanism", KEY_MECHANISMS[0] if keys else PUBLIC_MECHANISMS[0])
        if not keys and self.mechanism not in PUBLIC_MECHANISMS:
            raise ValueError(f"mechanism {self.mechanism!r} is for keys found in the data (candidates=None); with "
                             f"candidates: {', '.join(PUBLIC_MECHANISMS)}")  # fmt: skip
        if keys and self.mechanism not in KEY_MECHANISMS:
            raise ValueError(f"mechanism {self.mechanism!r} needs candidates; keys found in the data take "
                             f"{', '.join(KEY_MECHANISMS)}")  # fmt: skip
        if isinstance(self.candidates, range):
            if self.candidates.step != 1 or len(self.candidates) == 0:
                raise ValueError(f"candidates {self.candidates} must be a non-empty range of step 1")
            if self.candidates.start < -(2**63) or self.candidates.stop > 2**63:  # the column is read as int64
                raise ValueError(f"candidates {self.candidates} reach beyond 64-bit integers")
            if len(self.candidates) > MAX_CANDIDATES:
                raise ValueError(f"candidates {self.candidates} hold over {MAX_CANDIDATES:,} candidates")
        elif not keys:
            if isinstance(self.candidates, str) or not all(isinstance(c, str) for c in self.candidates):
                raise ValueError("candidates must be a list of labels (text), a range of integers, or None")
            if not self.candidates:
                raise ValueError("the candidate list is empty")
            object.__setattr__(self, "candidates", tuple(self.candidates))

    def family(self) -> CategoryCounts:
        """The public candidates' counts (None: keys found in the data have no family)."""
        return CategoryCounts(self.column, self.candidates)

    def final_step(self, unit: PrivacyUnit, budget: Budget, seed: int | None = None) -> PrivateSelect | PrivateTopKeys:
        """The step that draws the selection, its sensitivity derived from ``unit`` (also run by the audit)."""
        if self.candidates is None:
            if not budget.delta:
                raise ValueError("keys found in the data (candidates=None) need a budget with delta > 0")
            return PrivateTopKeys(epsilon=budget.epsilon, delta=budget.delta, k=self.k, max_rows=unit.rows,
                                  max_keys=unit.keys, mechanism=self.mechanism,
                                  label=f"top-{self.k} keys of {self.column}", seed=seed)  # fmt: skip
        pure("a selection over public candidates", unit, budget)
        family = self.family()
        return PrivateSelect(epsilon=budget.epsilon, sensitivity=unit.rows * family.contribution,
                             num_candidates=family.num_candidates, k=self.k, mechanism=self.mechanism,
                             monotonic=family.monotonic, shard_size=self.shard_size,
                             label=f"top-{self.k} of {self.column}", seed=seed)  # fmt: skip

    def prepare(self, unit: PrivacyUnit, budget: Budget, seed: int | None = None, source=None) -> Prepared:
        """Everything the release needs from public parameters (``source``: unused, the data's types are not)."""
        step = self.final_step(unit, budget, seed)
        if isinstance(step, PrivateTopKeys):
            return self._keys(step, unit, budget, seed)
        family = self.family()
        spec = ColumnSpec(self.column, "int" if isinstance(self.candidates, range) else "string")
        loss = accuracy_bound(epsilon=budget.epsilon / self.k, sensitivity=step.sensitivity, beta=BETA,
                              num_candidates=family.num_candidates, monotonic=family.monotonic)  # fmt: skip
        fields = release_fields(unit, budget, seed, mechanism=self.mechanism, cost=step.cost,
                                accuracy={"loss_per_pick": loss}, sensitivity=step.sensitivity,
                                monotonic=family.monotonic, num_candidates=family.num_candidates,
                                top_k=self.k)  # fmt: skip
        release = step | "Labels" >> beam.Map(lambda chosen: {"selected": family.labels(chosen), **fields})
        labels = None if family.values is None else {self.column: family.values.to_pylist()}
        specs = [spec, *unit.specs()]
        job = CountingJob(specs, family, release, shard_size=self.shard_size)
        return Prepared(step.cost, 0.0, specs, fields, fields, job, labels)

    def _keys(self, step: PrivateTopKeys, unit: PrivacyUnit, budget: Budget, seed: int | None) -> Prepared:
        fields = release_fields(unit, budget, seed, mechanism=step.mechanism, cost=step.cost, delta=step.delta,
                                accuracy=step.accuracy(), beta=None, sensitivity=step.max_rows,
                                max_keys_per_unit=step.max_keys, top_k=step.k,
                                candidates="keys found in the data")  # fmt: skip
        release = step | "Labels" >> beam.Map(lambda chosen: {"selected": chosen, **fields})
        specs = [ColumnSpec(self.column, "string"), *unit.specs()]
        return Prepared(
            step.cost, step.delta, specs, fields, fields, KeyCountingJob(specs, self.column, step.max_keys, release)
        )


@dataclass(frozen=True)
class Quantiles:
    """The ``quantiles`` (each strictly between 0 and 1) of the numeric ``column``, as values, sorted.

    The column is counted on a public grid of ``bins`` equal bins over [``lower``, ``upper``] (values outside
    clamped into the end bins); ``method`` "independent" draws each quantile by the exponential mechanism with
    epsilon / m and the bin width as base measure, "joint" all m together (JointExp, Gillenwater et al. 2021).
    Sensitivity, derived: a unit's K rows move each rank score by at most K (2K for JointExp's).
    """

    column: str
    lower: float
    upper: float
    quantiles: Sequence[float]
    bins: int = 1 << 16
    method: str = "independent"
    pipeline: ClassVar[str] = "quantiles"

    def __post_init__(self):
        lower, upper = parameters.finite_range(self.lower, self.upper, "lower", "upper")
        object.__setattr__(self, "lower", lower)
        object.__setattr__(self, "upper", upper)
        object.__setattr__(self, "bins", parameters.count(self.bins, "bins"))
        if self.method not in QUANTILE_METHODS:
            raise ValueError(f"method must be one of {', '.join(QUANTILE_METHODS)}, got {self.method!r}")
        if isinstance(self.quantiles, str):
            raise ValueError(f"quantiles must be a list of numbers, got {self.quantiles!r}")
        quantiles = tuple(parameters.probability(q, f"quantile {q}") for q in self.quantiles)
        names = [f"{q:g}" for q in quantiles]  # how the release names each
        if len(set(names)) != len(names):
            raise ValueError(f"quantiles {', '.join(names)}: two would be released under one name")
        object.__setattr__(self, "quantiles", quantiles)

    def table(self, document: dict) -> pa.Table:
        """The released quantiles as a table: each quantile as declared (not as its name), and its value."""
        return pa.table({"quantile": pa.array(sorted(self.quantiles), pa.float64()),
                         "value": pa.array(list(document["quantiles"].values()), pa.float64())})  # fmt: skip

    def final_step(self, unit: PrivacyUnit, budget: Budget, seed: int | None = None) -> PrivateQuantiles:
        """Summed histogram -> quantiles, with K from ``unit`` (also run by the privacy audit)."""
        family = HistogramCounts(self.column, self.lower, self.upper, self.bins)
        return PrivateQuantiles(epsilon=budget.epsilon, quantiles=list(self.quantiles), family=family,
                                method=self.method, max_rows=unit.rows, seed=seed)  # fmt: skip

    def prepare(self, unit: PrivacyUnit, budget: Budget, seed: int | None = None, source=None) -> Prepared:
        """Everything the release needs from public parameters (``source``: unused, the data's types are not)."""
        pure("Quantiles", unit, budget)
        step = self.final_step(unit, budget, seed)  # checks epsilon and the quantiles, rehearsed on the grid
        each = step.epsilon / len(step.quantiles)
        if self.method == "joint":
            mechanism = "JointExp: one exponential mechanism over all the sorted quantiles (Gillenwater et al. 2021)"
            accuracy, beta = {"bin_width": step.widest_bin}, None  # no probabilistic bound stated: no beta
        else:
            mechanism = "exponential mechanism per quantile over a histogram, base measure = bin width"
            errors = {f"{q:g}": rank_error_bound(epsilon=each, bins=self.bins, q=q, max_rows=step.max_rows, beta=BETA)
                      for q in step.quantiles}  # fmt: skip
            accuracy, beta = {"bin_width": step.widest_bin, "rank_error": errors}, BETA
        fields = release_fields(unit, budget, seed, mechanism=mechanism + "; uniform point inside the chosen bin",
                                cost=step.cost, accuracy=accuracy, beta=beta, method=self.method,
                                epsilon_per_quantile=each if self.method == "independent" else None,
                                lower=self.lower, upper=self.upper, bins=self.bins)  # fmt: skip
        release = GatherCounts() | step | "Manifest" >> beam.Map(lambda values: {"quantiles": values, **fields})
        specs = [ColumnSpec(self.column, "float"), *unit.specs()]
        return Prepared(step.cost, 0.0, specs, fields, fields, CountingJob(specs, step.family, release),
                        table_of=self.table)  # fmt: skip


@dataclass(frozen=True)
class Halfspace:
    """The weights pi, one per feature, with pi . x >= y true of the most records (x the bit ``features``, y the
    bit ``label``), by the exponential mechanism among public candidates: every vector of the ``weights`` values
    (default -1, 0, 1; at most ``max_candidates`` vectors), or the given ``candidates`` (weight vectors). Weights are
    read exactly (text "0.1" is 1/10). Sensitivity, derived: a unit's K records move each fit count by at most K
    (monotone). The training accuracy is not released (it would be a non-private release).
    """

    features: Sequence[str]
    label: str
    weights: Sequence | None = None
    candidates: Sequence[Sequence] | None = None
    max_candidates: int = halfspaces.DEFAULT_MAX_CANDIDATES
    pipeline: ClassVar[str] = "learn"

    def __post_init__(self):
        if isinstance(self.features, str):
            raise ValueError(f"features must be a list of column names, got {self.features!r}")
        if isinstance(self.weights, str):
            raise ValueError(f"weights must be a list of numbers, got {self.weights!r}")
        if self.weights is not None and self.candidates is not None:
            raise ValueError("weights make a grid of candidates: give weights or candidates, not both")
        object.__setattr__(self, "max_candidates", parameters.count(self.max_candidates, "max_candidates"))
        features = tuple(self.features)
        if not features or len(set(features)) != len(features) or self.label in features:
            raise ValueError("features must name distinct columns, none of them the label")
        if len(features) > halfspaces.MAX_FEATURES:
            raise ValueError(f"at most {halfspaces.MAX_FEATURES} features, got {len(features)}")
        object.__setattr__(self, "features", features)

    def candidate_matrix(self) -> halfspaces.Candidates:
        """The public candidates, with their weights read exactly as written."""
        if self.candidates is None:
            weights = [halfspaces.exact_weight(w) for w in (DEFAULT_WEIGHTS if self.weights is None else self.weights)]
            return halfspaces.weight_grid(weights, len(self.features), max_candidates=self.max_candidates,
                                          name="weights")  # fmt: skip
        return halfspaces.check_candidates(self.candidates, len(self.features), max_candidates=self.max_candidates)

    def final_step(self, unit: PrivacyUnit, budget: Budget, seed: int | None = None) -> PrivateHalfspace:
        """On the gathered pattern counts, with K from ``unit`` (also run by the privacy audit)."""
        return PrivateHalfspace(epsilon=budget.epsilon, candidates=self.candidate_matrix(), max_rows=unit.rows,
                                seed=seed)  # fmt: skip

    def prepare(self, unit: PrivacyUnit, budget: Budget, seed: int | None = None, source=None) -> Prepared:
        """Everything the release needs from public parameters (``source``: unused, the data's types are not)."""
        pure("a halfspace", unit, budget)
        step = self.final_step(unit, budget, seed)
        columns = [*self.features, self.label]
        family = MarginalCounts(columns, [2] * len(columns))
        specs = [ColumnSpec(c, "int", domain=(0, 2)) for c in columns] + unit.specs()
        count = len(step.candidates)
        loss = accuracy_bound(epsilon=step.epsilon, sensitivity=step.sensitivity, beta=BETA, num_candidates=count,
                              monotonic=True)  # fmt: skip
        fields = release_fields(unit, budget, seed, mechanism="exponential", cost=step.cost,
                                accuracy={"records_fit_below_best": loss}, features=list(self.features),
                                label=self.label, rule="sum(weights[j] * features[j]) >= label",
                                sensitivity=step.sensitivity, monotonic=True, num_candidates=count)  # fmt: skip
        release = GatherCounts() | step | "Manifest" >> beam.Map(lambda weights: {"weights": weights, **fields})
        return Prepared(step.cost, 0.0, specs, fields, fields, CountingJob(specs, family, release))
