"""A synthesis's public domain (a DOMAIN.json file, or the same as a dict): each column's codes, labels or numeric
grid (synthesize, evaluate_synthetic)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import numpy as np

from beam_expmech.grids import NumericGrid
from beam_expmech.io import readers
from beam_expmech.io.errors import InputError
from beam_expmech.io.validation import ColumnSpec

GRID_KEYS = ("lower", "upper", "bins")
TYPES = {"integer": True, "float": False}  # a grid's optional "type": the column's numbers, whatever the input
PRIVATE_KEYS = ("count", "share")  # with "bins": "private"
MAX_PRIVATE_BINS = 64  # JointExp draws count - 1 quantiles together: seconds at 64, and the edges are rehearsed


@dataclass(frozen=True)
class PrivateGrid:
    """A numeric column whose ``count`` bins over [``lower``, ``upper``] have edges at private quantiles of the
    column, released with ``share`` of the run's epsilon (public parameters; the edges are a release).
    ``integer``: the column holds integers (declared, or from the input's schema; None: not yet known, as in
    ``NumericGrid``). Checked when built, with a rehearsal
    of the edges' post-processing (``NumericGrid.near``), so that a grid the edges cannot make fails before
    any data is read or budget spent."""

    lower: int | float
    upper: int | float
    count: int
    share: float
    integer: bool | None = None

    def __post_init__(self):
        if isinstance(self.count, bool) or not isinstance(self.count, int) or not 2 <= self.count <= MAX_PRIVATE_BINS:
            raise ValueError(f"count must be an integer from 2 to {MAX_PRIVATE_BINS}, got {self.count!r}")
        if isinstance(self.share, bool) or not isinstance(self.share, (int, float)) or not 0 < self.share < 1:
            raise ValueError(f"share must be a number strictly between 0 and 1, got {self.share!r}")
        self.grid(np.full(self.count - 1, float(self.lower)))

    @property
    def quantiles(self) -> list[float]:
        """The quantiles whose values are the inner edges: 1/count, 2/count, ..."""
        return [j / self.count for j in range(1, self.count)]

    def grid(self, points: np.ndarray) -> NumericGrid:
        """The grid whose inner edges lie near the released quantiles ``points`` (post-processing)."""
        return NumericGrid.near(self.lower, self.upper, self.count, integer=self.integer, points=points)


Domain = dict[str, "int | tuple[str, ...] | NumericGrid | PrivateGrid"]


def read_domain(path: str) -> Domain:
    """DOMAIN.json, read and checked as ``parse_domain`` checks a dict."""
    try:
        raw = json.loads(readers.read_text(path))
    except ValueError:
        raise ValueError(f"{path}: not a JSON file") from None
    return parse_domain(raw, path)


def parse_domain(raw: object, path: str = "the domain") -> Domain:
    """{"column": number of codes} (values 0 .. n-1), {"column": ["label", ...]} or
    {"column": {"lower": L, "upper": U, "bins": B}} (numbers, on B equal-width bins over [L, U]; with
    ``"type": "integer"`` or ``"float"``, the numbers the column holds in the input and in the output); ``path``
    names it in messages.

    A labelled column holds the labels in the data and in the output; inside, each label is its
    position in the list. A numeric column holds numbers in the data and in the output; inside, each
    number is the code of its bin (values outside [L, U] clamped into the end bins). Every entry is
    checked here, in one place (a grid by ``NumericGrid``), before any data is read; a numeric
    column's type (integer or float), where the domain does not declare it, comes from the input's schema
    (``with_input_types``).
    """
    if not isinstance(raw, dict) or not raw:
        raise ValueError(f"{path}: not a JSON object of columns")
    domain: Domain = {}
    for column, value in raw.items():
        if isinstance(value, (NumericGrid, PrivateGrid)):  # already checked
            domain[column] = value
        elif (
            isinstance(value, (list, tuple))
            and value
            and all(isinstance(v, str) for v in value)
            and len(set(value)) == len(value)
        ):
            domain[column] = tuple(value)
        elif isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            domain[column] = value
        elif isinstance(value, dict):
            domain[column] = _grid(path, column, value)
        else:
            raise ValueError(f"{path}: column {column!r} needs a size >= 1, a list of distinct labels or a "
                             f'{{"lower", "upper", "bins"}} grid, got {value!r}')  # fmt: skip
    return domain


def _grid(path: str, column: str, entry: dict) -> NumericGrid | PrivateGrid:
    keys = GRID_KEYS + PRIVATE_KEYS if entry.get("bins") == "private" else GRID_KEYS
    unknown = [k for k in entry if k not in (*keys, "type")]
    if unknown:
        raise ValueError(f"{path}: column {column!r}: unknown key {unknown[0]!r} (a grid has {', '.join(keys)} "
                         "and may have type)")  # fmt: skip
    missing = [k for k in keys if k not in entry]
    if missing:
        raise ValueError(f"{path}: column {column!r}: the grid needs {missing[0]!r}")
    declared = entry.get("type")
    if declared is not None and (not isinstance(declared, str) or declared not in TYPES):
        raise ValueError(f'{path}: column {column!r}: type must be "integer" or "float", got {declared!r}')
    integer = None if declared is None else TYPES[declared]
    try:
        if entry["bins"] == "private":
            return PrivateGrid(entry["lower"], entry["upper"], entry["count"], entry["share"], integer=integer)
        return NumericGrid(entry["lower"], entry["upper"], entry["bins"], integer=integer)
    except ValueError as error:
        raise ValueError(f"{path}: column {column!r}: {error}") from None


def with_input_types(domain: Domain, pattern: str, fmt: str | None, path: str, delimiter: str = ",") -> Domain:
    """``domain`` (read from ``path``) with each numeric column's grid typed, no row read. A grid that declares
    its type keeps it, and the schema of the input files (``pattern``, read as ``fmt``) must agree: integers
    for "integer", floating-point numbers for "float" (a CSV column, text by nature, is parsed as declared).
    Otherwise the schema decides: integers stay integers (an integer grid, checked to hold an integer in
    every bin), floating-point numbers floats, and a CSV column is read as numbers (floats). A grid on a
    column the schema types otherwise (text in Parquet or Avro, booleans), or otherwise than declared, is an
    InputError. The domain as it is when it has no numeric column (no file opened)."""
    numeric = [c for c, v in domain.items() if isinstance(v, (NumericGrid, PrivateGrid))]
    if not numeric:
        return domain
    files = readers.match_files(pattern)
    families = readers.check_columns(files, fmt, numeric, delimiter=delimiter)
    csv = all(readers.file_format(f, fmt) == "csv" for f in files)
    typed = dict(domain)
    for column in numeric:
        family, declared = families.get(column), domain[column].integer
        if family not in (None, "integers", "floating-point numbers") and not (family == "text" and csv):
            raise InputError(f"{pattern}: column {column!r} holds {family}, but {path} gives it a numeric grid")
        if (
            declared is not None
            and family in ("integers", "floating-point numbers")
            and declared != (family == "integers")
        ):
            raise InputError(f"{pattern}: column {column!r} holds {family}, but {path} declares its type "
                             f"{'integer' if declared else 'float'}")  # fmt: skip
        try:
            integer = family == "integers" if declared is None else declared
            typed[column] = dataclasses.replace(domain[column], integer=integer)
        except ValueError as error:
            raise ValueError(f"{path}: column {column!r}: {error}") from None
    return typed


def domain_sizes(domain: Domain) -> dict[str, int]:
    """Each column's number of codes: its size, its labels, or its grid's bins."""

    def size(value) -> int:
        if isinstance(value, int):
            return value
        if isinstance(value, NumericGrid):
            return value.bins
        return value.count if isinstance(value, PrivateGrid) else len(value)

    return {c: size(v) for c, v in domain.items()}


def private_grids(domain: Domain) -> dict[str, PrivateGrid]:
    """The numeric columns whose edges are to be released privately."""
    return {c: v for c, v in domain.items() if isinstance(v, PrivateGrid)}


def with_released_edges(domain: Domain, manifest: dict) -> Domain:
    """``domain`` with each private grid replaced by the grid a synthesize ``manifest`` released for it."""
    released = dict(domain)
    for column, private in private_grids(domain).items():
        edges = manifest.get("numeric", {}).get(column, {}).get("edges")
        if not isinstance(edges, list) or len(edges) != private.count + 1:
            raise ValueError(f"the manifest states no {private.count + 1} edges for column {column!r}")
        released[column] = NumericGrid(
            private.lower, private.upper, private.count, integer=private.integer, cuts=tuple(edges[1:-1])
        )
    return released


def grids(domain: Domain) -> dict[str, NumericGrid]:
    """The numeric columns' grids."""
    return {c: v for c, v in domain.items() if isinstance(v, NumericGrid)}


def domain_spec(column: str, value: int | tuple[str, ...] | NumericGrid | PrivateGrid) -> ColumnSpec:
    """How to read a column of the domain: int codes in [0, size), one of its labels (as its code), a
    number (as its bin's code: an integer with an integer grid, else a float), or for a private grid
    whose edges are not yet released, the number itself."""
    if isinstance(value, NumericGrid):
        return ColumnSpec(column, "int" if value.integer else "float", grid=value)
    if isinstance(value, PrivateGrid):  # its values, as numbers, for the quantiles that place its edges
        return ColumnSpec(column, "int" if value.integer else "float")
    if isinstance(value, int):
        return ColumnSpec(column, "int", domain=(0, value))
    return ColumnSpec(column, "label", labels=value)
