"""What the graph above a PCollection guarantees, read when a transform is built.

A step that must not see unvalidated rows (bounding: a unit spelled two ways would be two units), or a final
step whose noise must cover the bounding that fed it, reads the graph above its input: the marks that
ValidateBatches, BoundContributions and the counting steps leave on their outputs, on every path from the
graph's roots. It reads the graph's shape only: a step of the user's between two marked steps is trusted to
keep the rows as the first left them. Where no mark is found (counts made by hand, a Create of tables), a
step cannot tell, and says so in its docstring.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import apache_beam as beam

FAMILIES = "_beam_expmech_families"  # ReadRecordBatches' batches: {column: its type family in every file}
VALIDATED = "_beam_expmech_validated"  # ValidateBatches' good rows: {column: (ColumnSpec kind, type family)}
BOUNDED = "_beam_expmech_bounded"  # BoundContributions' output: Bounds
COUNTED = "_beam_expmech_counted"  # PredicateCounts' and KeyCounts' output: Bounds of the rows they counted


@dataclass(frozen=True)
class Bounds:
    """How far one privacy unit reaches into what was counted: at most ``max_rows`` rows (K), over at most
    ``max_keys`` values of ``key_column`` (L), per value of ``unit`` (None: each row is its own unit, K = 1).
    On counts: ``sensitivity``, the most one unit moves any one count (K times the family's contribution), and
    ``family``, what was counted (the predicate family, as the final step must read the counts)."""

    unit: str | None
    max_rows: int = 1
    key_column: str | None = None
    max_keys: int | None = None
    sensitivity: float | None = None
    family: object = field(default=None, compare=False)


def mark(pcoll: beam.PCollection, name: str, value) -> beam.PCollection:
    """``pcoll``, marked with ``value`` under ``name`` for the steps built after it."""
    setattr(pcoll, name, value)
    return pcoll


def paths(pcoll: beam.PCollection, name: str) -> list:
    """The nearest mark ``name`` on each path from the graph's roots to ``pcoll``, once a path (one bounded
    PCollection reached by two paths, a Flatten of it with itself, counts twice: a unit's rows are on both), and
    None for a path that has none. Side inputs are paths too: CombineGlobally's data reaches its output as one,
    beside a main input that starts at a root of its own."""
    seen: dict[int, list] = {}

    def walk(node) -> list:
        if id(node) not in seen:
            producer = getattr(node, "producer", None)
            inputs = [] if producer is None else [*producer.inputs, *(s.pvalue for s in producer.side_inputs)]
            inputs = [p for p in inputs if isinstance(p, beam.PCollection)]
            if hasattr(node, name):
                seen[id(node)] = [getattr(node, name)]
            elif not inputs:
                seen[id(node)] = [None]
            else:
                seen[id(node)] = [mark for parent in inputs for mark in walk(parent)]
        return seen[id(node)]

    return walk(pcoll)


def upstream(pcoll: beam.PCollection, name: str) -> list:
    """``paths``' marks, each distinct value once."""
    found: list = []
    for value in paths(pcoll, name):
        if value not in found:
            found.append(value)
    return found


def family_of(counted) -> tuple:
    """What a family counts, comparable: its kind, columns, candidates, contribution and public parameters
    (a compacted family's are its original's: the same counts)."""
    counted = getattr(counted, "original", counted)
    public = tuple(sorted((k, v) for k, v in vars(counted).items() if isinstance(v, (int, float, str, tuple))))
    return type(counted).__name__, public


def validated_columns(batches: beam.PCollection) -> dict[str, tuple[str, str | None]]:
    """The columns, as (ColumnSpec kind, type family or None where unknown), that ValidateBatches checked alike on
    every path to ``batches``: empty where some path starts elsewhere (a file read, a Create) without it."""
    marks = upstream(batches, VALIDATED)
    if None in marks:
        return {}
    return {column: kind for column, kind in marks[0].items() if all(m.get(column) == kind for m in marks[1:])}


def check_sensitivity(counts: beam.PCollection, sensitivity: float, step: str, family=None) -> None:
    """A ValueError, when the graph is built, if the counts above (PredicateCounts' mark) move by more than the
    ``sensitivity`` a final step's noise is for, or count another ``family`` than the one it reads them as;
    nothing where no mark tells (counts made otherwise)."""
    bounds = counted_by(counts, step)
    if bounds is None:
        return
    if (bounds.sensitivity or 0) > sensitivity:
        unit = "each row its own unit" if bounds.unit is None else f"{bounds.max_rows} rows a unit of {bounds.unit!r}"
        raise ValueError(
            f"{step}: the counts above move by up to {bounds.sensitivity:g} ({unit}), more than the "
            f"{sensitivity:g} its noise is for: give it the sensitivity (max_rows) of the bounding"
        )
    if family is not None and bounds.family is not None and family_of(bounds.family) != family_of(family):
        raise ValueError(f"{step}: the counts above are of {family_of(bounds.family)[0]} over other candidates than "
                         f"the {family_of(family)[0]} it reads them as: count the family it is given")  # fmt: skip


def counted_by(counts: beam.PCollection, step: str) -> Bounds | None:
    """The counting step's mark above ``counts`` (None where no path has one: counts made otherwise, which a
    step cannot check; paths without a mark are public inputs, such as the zero counts of every shard or
    CombineGlobally's default). A ValueError where counts of several counting steps, or of one by several
    paths, meet: summed, one unit would move them more than any one mark says."""
    marks = [m for m in paths(counts, COUNTED) if m is not None]
    if len(marks) > 1:
        raise ValueError(f"{step}: the counts of {len(marks)} counting steps (or paths) meet here: one unit moves "
                         "their sum further than either's bounds; count the merged rows once")  # fmt: skip
    return marks[0] if marks else None


def the_one(pcoll: beam.PCollection, name: str, what: str) -> Bounds | None:
    """The mark ``name`` above ``pcoll``, found on exactly one path, or None where no path has one; a ValueError,
    when the graph is built, where paths differ: marked on several (bounded rows of two paths merged: a unit's
    rows may be on each, K on each), or on some and not others (rows not bounded at all)."""
    found = paths(pcoll, name)
    marked = [m for m in found if m is not None]
    if len(marked) > 1:
        raise ValueError(f"{what}: rows bounded on {len(marked)} paths meet here: a unit's rows may be on each; "
                         "merge the rows first, then bound them once")  # fmt: skip
    if marked and None in found:
        raise ValueError(f"{what}: the rows here are bounded on one path and not on another: bound them all")
    return marked[0] if marked else None
