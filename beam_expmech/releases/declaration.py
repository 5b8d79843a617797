"""What a release is declared with, besides its query: whom it protects and how much each may contribute
(``PrivacyUnit``), what it may spend (``Budget``), and where its data come from (``Files``, ``Rows``).

Plain data, validated when made: every number a mechanism's sensitivity or cost depends on is declared here
once, and derived from here (never typed again by hand), as PipelineDP's ``AggregateParams`` and Tumult's
``Session`` have a user declare bounds and budget once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import apache_beam as beam

from beam_expmech import parameters
from beam_expmech.io import readers
from beam_expmech.io.validation import ColumnSpec


@dataclass(frozen=True)
class PrivacyUnit:
    """Whom the guarantee protects: the rows that share a value of ``column`` are one person, who keeps at most
    ``max_rows`` (K) of them, drawn at random, over at most ``max_keys`` (L) keys where keys are found in the
    data. Without a column each row is its own unit (K = 1).

    K is the factor of every count's sensitivity; L bounds how many keys found in the data one unit moves.
    """

    column: str | None = None
    max_rows: int | None = None
    max_keys: int | None = None

    def __post_init__(self):
        if self.column == "":
            raise ValueError("the privacy unit's column is empty: name the column that identifies a unit")
        if (self.column is None) != (self.max_rows is None):
            raise ValueError("a privacy unit's column and max_rows go together (without them each row is a unit)")
        if self.max_rows is not None:
            object.__setattr__(self, "max_rows", parameters.count(self.max_rows, "max_rows"))
        if self.max_keys is not None:
            if self.column is None:
                raise ValueError("max_keys goes with a unit column (without it each row is a unit of one key)")
            object.__setattr__(self, "max_keys", parameters.count(self.max_keys, "max_keys"))

    @property
    def rows(self) -> int:
        """K: the most rows a unit contributes (1 without a unit column)."""
        return 1 if self.max_rows is None else self.max_rows

    @property
    def keys(self) -> int:
        """L: the most keys found in the data a unit contributes to (at most K: K rows touch at most K keys)."""
        return min(self.rows, self.max_keys or self.rows)

    def specs(self) -> list[ColumnSpec]:
        """The unit's column, if any, as the release reads it: an identity of any type, never null."""
        return [ColumnSpec(self.column, "any")] if self.column else []


EACH_ROW = PrivacyUnit()  # no unit column: each row is its own unit


@dataclass(frozen=True)
class Budget:
    """What a release may spend: ``epsilon`` and ``delta`` (0: pure DP) for this run, and, with a ``ledger``
    (a local or gs:// file), the share of ``dataset_id``'s total budget that every run of the dataset draws
    from. The release's cost is charged to both before any row is read (docs/DESIGN.md section 6).

    ``release_id`` (with a ledger): the operator's name for this release, so that it is charged once and written
    once however often it is run (a scheduler's retry, a re-triggered day): a run whose id is done already raises
    ``ledger.AlreadyReleased`` and reads nothing; one whose earlier attempts failed before writing runs again under
    their charge."""

    epsilon: float
    delta: float = 0.0
    ledger: str | None = None
    dataset_id: str | None = None
    release_id: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "epsilon", parameters.positive_finite(self.epsilon, "epsilon"))
        if self.delta:  # as floats, so that the release states 1.0 whether it was declared 1 or 1.0
            object.__setattr__(self, "delta", parameters.probability(self.delta, "delta"))
        elif self.delta != 0 or isinstance(self.delta, bool):
            raise ValueError(f"delta must be 0 or a number strictly between 0 and 1, got {self.delta!r}")
        else:
            object.__setattr__(self, "delta", 0.0)
        if (self.ledger is None) != (self.dataset_id is None):
            raise ValueError("a budget's ledger and dataset_id go together")
        if self.dataset_id == "":
            raise ValueError("the budget's dataset_id is empty")
        if self.release_id is not None:
            if self.ledger is None:
                raise ValueError("a release id goes with a ledger (the ledger remembers what it names)")
            if not isinstance(self.release_id, str) or not self.release_id.isprintable() or not self.release_id:
                raise ValueError("a release id is a line of printable text")
            if len(self.release_id) > 200:
                raise ValueError("a release id is at most 200 characters")


@dataclass(frozen=True)
class Files:
    """Data in files: a path, a glob or gs://bucket/path of Parquet, CSV or Avro files (``format``: by the
    extension unless given; ``delimiter``: a CSV file's field separator, one ASCII character other than a quote
    or a line end). Their schemas are checked against the release's columns before any budget."""

    pattern: str
    format: str | None = None
    delimiter: str = ","

    def __post_init__(self):
        readers.check_delimiter(self.delimiter)


@dataclass(frozen=True)
class Rows:
    """Data already in a pipeline: ``read(pipeline)`` returns a PCollection of rows (dicts, beam.Row,
    NamedTuples; tuples and (key, value) pairs through ``extractors``, one plain function a column), read as
    ``RowsToBatches`` reads them (``identity_types``: the unit column's Python type).

    ``read`` is called once for each graph a run builds (one a data pass: a synthesis with private bin edges
    makes one a column, then the generator's, and builds that one twice): it must make a fresh PCollection of the
    same rows each time (read them again), never draw from a one-shot iterator. Rows carry no schema, so a
    synthesis reads a numeric column on a grid as floats (files say whether it holds integers)."""

    read: Callable[[beam.Pipeline], beam.PCollection]
    identity_types: Mapping[str, type] = field(default_factory=dict)
    extractors: Mapping[str, Callable] | None = None
