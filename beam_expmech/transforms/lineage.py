"""What the graph above a PCollection guarantees, read when a transform is built.

A step that must not see unvalidated rows (bounding: a unit spelled two ways would be two units), or a final
step whose noise must cover the bounding that fed it, reads the graph above its input: the marks that
ValidateBatches, BoundContributions and the counting steps leave on their outputs, on every path from the
graph's roots. It reads the graph's shape only: a step of the user's between two marked steps is trusted to
keep the rows as the first left them. Where no mark is found (counts made by hand, a Create of tables), a
step cannot tell, and says so in its docstring.
"""

from __future__ import annotations

from dataclasses import dataclass

import apache_beam as beam

FAMILIES = "_beam_expmech_families"  # ReadRecordBatches' batches: {column: its type family in every file}
VALIDATED = "_beam_expmech_validated"  # ValidateBatches' good rows: {column: (ColumnSpec kind, type family)}
BOUNDED = "_beam_expmech_bounded"  # BoundContributions' output: Bounds
COUNTED = "_beam_expmech_counted"  # PredicateCounts' and KeyCounts' output: Bounds of the rows they counted


@dataclass(frozen=True)
class Bounds:
    """How far one privacy unit reaches into what was counted: at most ``max_rows`` rows (K), over at most
    ``max_keys`` values of ``key_column`` (L), per value of ``unit`` (None: each row is its own unit, K = 1).
    ``sensitivity``, on counts: the most one unit moves any one count (K times the family's contribution)."""

    unit: str | None
    max_rows: int = 1
    key_column: str | None = None
    max_keys: int | None = None
    sensitivity: float | None = None


def mark(pcoll: beam.PCollection, name: str, value) -> beam.PCollection:
    """``pcoll``, marked with ``value`` under ``name`` for the steps built after it."""
    setattr(pcoll, name, value)
    return pcoll


def upstream(pcoll: beam.PCollection, name: str) -> list:
    """The nearest mark ``name`` on every path from the graph's roots to ``pcoll`` (each distinct value once),
    with None for a path that has none. Side inputs are paths too: CombineGlobally's data reaches its output as
    one, beside a main input that starts at a root of its own."""
    seen: dict[int, list] = {}

    def walk(node) -> list:
        if id(node) not in seen:
            seen[id(node)] = [None]  # a graph has no cycle: this only stops a second visit of a shared ancestor
            producer = getattr(node, "producer", None)
            inputs = [] if producer is None else [*producer.inputs, *(s.pvalue for s in producer.side_inputs)]
            inputs = [p for p in inputs if isinstance(p, beam.PCollection)]
            if hasattr(node, name):
                seen[id(node)] = [getattr(node, name)]
            elif inputs:
                found = []
                for parent in inputs:
                    found += [value for value in walk(parent) if value not in found]
                seen[id(node)] = found
        return seen[id(node)]

    return walk(pcoll)


def validated_columns(batches: beam.PCollection) -> dict[str, tuple[str, str | None]]:
    """The columns, as (ColumnSpec kind, type family or None where unknown), that ValidateBatches checked alike on
    every path to ``batches``: empty where some path starts elsewhere (a file read, a Create) without it."""
    marks = upstream(batches, VALIDATED)
    if None in marks:
        return {}
    return {column: kind for column, kind in marks[0].items() if all(m.get(column) == kind for m in marks[1:])}


def check_sensitivity(counts: beam.PCollection, sensitivity: float, step: str) -> None:
    """A ValueError, when the graph is built, if the counts above (PredicateCounts' mark) move by more than the
    ``sensitivity`` a final step's noise is for; nothing where no mark tells (counts made otherwise)."""
    bounds = widest(counts, step)
    if bounds is not None and (bounds.sensitivity or 0) > sensitivity:
        unit = "each row its own unit" if bounds.unit is None else f"{bounds.max_rows} rows a unit of {bounds.unit!r}"
        raise ValueError(
            f"{step}: the counts above move by up to {bounds.sensitivity:g} ({unit}), more than the "
            f"{sensitivity:g} its noise is for: give it the sensitivity (max_rows) of the bounding"
        )


def widest(counts: beam.PCollection, step: str) -> Bounds | None:
    """Of the counting steps' marks above ``counts``, the one that lets a unit move a count most (None where no
    path has one: counts made otherwise, which a step cannot check). Paths without a mark are public inputs (the
    zero counts of every shard, CombineGlobally's default) or counts made by hand."""
    marks = [m for m in upstream(counts, COUNTED) if m is not None]
    if not marks:
        return None
    most = max(marks, key=lambda m: (m.sensitivity or 0, m.max_rows, m.max_keys or 0))
    if any(m.max_rows > most.max_rows or (m.max_keys or 0) > (most.max_keys or 0) for m in marks):
        raise ValueError(f"{step}: the counts above were bounded differently on different paths ({marks})")
    return most


def the_one(pcoll: beam.PCollection, name: str, what: str) -> Bounds | None:
    """The mark ``name`` above ``pcoll`` where every path has the same, None where no path has one; a ValueError,
    when the graph is built, where paths differ (``what`` names the step that reads it)."""
    marks = upstream(pcoll, name)
    if len(marks) > 1:
        raise ValueError(f"{what}: the paths that lead here were bounded or counted differently ({marks})")
    return marks[0]
