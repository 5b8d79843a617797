"""End-to-end sensitivity audit on Beam: the real transforms, from record batches to the scores each
mechanism is given, on random data and on the same data with one more privacy unit of any number of
rows (removing it is the same pair read backwards).

Declared by the pipelines: every score moves by at most its sensitivity (K times the predicate's
contribution, or what the score function returns), and where monotone is claimed (select, learn,
the marginals) every score moves the same way. The bounding's seeded priorities depend only on
each batch's content, so the other units keep the same rows in both runs: a coupling under which
any move beyond the sensitivity would be a real bug.
"""

from __future__ import annotations

import itertools
import uuid

import apache_beam as beam
import numpy as np
import pyarrow as pa
from audit_log import LONG
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from key_totals import bounded_key_totals

from beam_expmech import halfspaces
from beam_expmech.io.validation import ColumnSpec
from beam_expmech.mechanisms.quantile import quantile_scores
from beam_expmech.predicates import CategoryCounts, HistogramCounts, MarginalCounts, MarginalWorkload
from beam_expmech.releases import PrivacyUnit, Rows, passes
from beam_expmech.transforms import GatherCounts, ValidateBatches

ITEMS = 6
OUTSIDE = 3  # item values beyond the candidates: select drops their rows before bounding (compact_rows)
DOMAIN = {"item": ITEMS + OUTSIDE, "f0": 2, "f1": 2, "y": 2}  # 72 joint cells: synthesize carries the cell
FAMILIES = {  # name -> (family, shard size: small ones exercise the sharded, sparse path)
    "select: CategoryCounts": (CategoryCounts("item", range(ITEMS)), 4),
    "quantiles: HistogramCounts": (HistogramCounts("x", 0.0, 10.0, 8), 3),
    "learn: pattern MarginalCounts": (MarginalCounts(["f0", "f1", "y"], [2, 2, 2]), 1 << 20),
    "synthesize: MarginalWorkload": (MarginalWorkload(list(itertools.combinations(DOMAIN, 2)), DOMAIN), 10),
}
HALFSPACES = halfspaces.weight_grid([-1, 0, 1], 2, max_candidates=100)
RESULTS: dict = {}


def rows_of(unit: int, rows: int, rng: np.random.Generator) -> dict:
    return {
        "user": np.full(rows, unit),
        "item": rng.integers(0, ITEMS + OUTSIDE, rows),
        "x": rng.uniform(0, 10, rows),
        **{c: rng.integers(0, 2, rows) for c in ("f0", "f1", "y")},
    }


def as_batches(parts: list[dict], pieces: int, rng: np.random.Generator) -> list[pa.RecordBatch]:
    table = {c: np.concatenate([p[c] for p in parts]) for c in parts[0]}
    order = rng.permutation(len(table["user"]))
    return [pa.record_batch({c: v[chunk] for c, v in table.items()}) for chunk in np.array_split(order, pieces)
            if chunk.size]  # fmt: skip


def validated(batches, name: str, query: bool = False):
    """The batches as the pipelines read them: validated, each column in its kind's type (bounding refuses,
    when built, a graph that skips validation)."""
    specs = [ColumnSpec("user", "any"), ColumnSpec("item", "int"), ColumnSpec("x", "float")]
    specs += [ColumnSpec(c, "int") for c in ("f0", "f1", "y")] + ([ColumnSpec("query", "string")] if query else [])
    return (batches | f"Validate {name}" >> ValidateBatches(specs)).good


def _keep(counts, key: str, name: tuple[str, str]) -> None:
    RESULTS.setdefault(key, {})[name] = counts


def counts_on_beam(datasets: dict[str, list[pa.RecordBatch]], max_rows: int) -> dict:
    """{(dataset, family): the summed counts}, by the releases' own bounding and counting (``passes.CountingJob``:
    each family's compact rows, bounded, then counted, as a release's pass reads them) on the in-process
    DirectRunner."""
    key = uuid.uuid4().hex
    # No files: bounding cuts the units into its default shards.
    reading = passes.Reading(Rows(read=lambda pipeline: None), (), PrivacyUnit("user", max_rows), seed=5)
    with beam.Pipeline() as pipeline:
        for name, batches in datasets.items():
            created = validated(pipeline | f"Create {name}" >> beam.Create(batches), name)
            for family_name, (family, shard_size) in FAMILIES.items():
                counting = passes.CountingJob((), family, None, shard_size=shard_size)
                label = f"{name} {family_name}"
                _ = (
                    created
                    | f"Bound {label}" >> counting.bounding(reading)
                    | f"Count {label}" >> counting.counting(reading)
                    | f"Gather {label}" >> GatherCounts()
                    | f"Keep {label}" >> beam.Map(_keep, key, (name, family_name))
                )
    return RESULTS.pop(key)


def scores(family_name: str, counts: np.ndarray, max_rows: int) -> tuple[np.ndarray, float, bool]:
    """What each pipeline hands its mechanism: (scores, declared sensitivity, monotone claimed)."""
    if family_name.startswith("quantiles"):
        values, sensitivity = quantile_scores(counts, 0.3, max_rows=max_rows)
        return values.astype(float), sensitivity, False
    if family_name.startswith("learn"):
        return halfspaces.fit_counts(counts, HALFSPACES), max_rows, True  # pipelines.learn: sensitivity K, monotone
    family = FAMILIES[family_name][0]
    return counts, max_rows * family.contribution, family.monotonic


@settings(max_examples=200 if LONG else 3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    units=st.lists(st.integers(1, 8), min_size=1, max_size=25),
    extra_rows=st.integers(1, 40),
    max_rows=st.integers(1, 4),
    pieces=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_one_more_unit_moves_no_score_beyond_its_sensitivity(audit, units, extra_rows, max_rows, pieces, seed):
    rng = np.random.default_rng(seed)
    base = as_batches([rows_of(u, rows, rng) for u, rows in enumerate(units)], pieces, rng)
    extra = as_batches([rows_of(len(units), extra_rows, rng)], pieces, rng)  # the unit's own batches
    counts = counts_on_beam({"without": base, "with": base + extra}, max_rows)
    for family_name in FAMILIES:
        before, sensitivity, monotone = scores(family_name, counts["without", family_name], max_rows)
        after, _, _ = scores(family_name, counts["with", family_name], max_rows)
        moved = np.asarray(after, dtype=float) - np.asarray(before, dtype=float)
        subject = f"Beam: {family_name}"
        audit.check(subject, "|score move| on a neighbour <= sensitivity", cases=moved.size,
                    worst=np.abs(moved).max(), bound=sensitivity)  # fmt: skip
        if monotone:
            audit.check(subject, "monotone claimed: scores moving down", cases=moved.size,
                        worst=int((moved < 0).sum()), bound=0)  # fmt: skip
        if family_name.startswith("synthesize"):  # a row is in one cell of each marginal: AIM's L1 and L2
            marginals = len(FAMILIES[family_name][0].marginals)
            audit.check(subject, "L1 move over the workload <= K * marginals", cases=1,
                        worst=np.abs(moved).sum(), bound=max_rows * marginals)  # fmt: skip
            audit.check(subject, "L2 move over the workload <= K * sqrt(marginals)", cases=1,
                        worst=np.sqrt((moved**2).sum()), bound=max_rows * np.sqrt(marginals))  # fmt: skip


def key_totals_on_beam(datasets: dict[str, list[pa.RecordBatch]], max_rows: int, max_keys: int) -> dict:
    """{dataset: {key: (rows, units)}} by the real transforms select runs without a candidate list."""
    sources = {name: lambda pipeline, n, b=batches: validated(pipeline | f"Create {n}" >> beam.Create(b), n, query=True)
               for name, batches in datasets.items()}  # fmt: skip
    return bounded_key_totals(sources, max_rows, max_keys)


@settings(max_examples=200 if LONG else 3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    units=st.lists(st.integers(1, 8), min_size=1, max_size=25),
    extra_rows=st.integers(1, 40),
    max_rows=st.integers(1, 4),
    max_keys=st.integers(1, 3),
    pieces=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
@example(units=[3, 5, 2], extra_rows=30, max_rows=2, max_keys=3, pieces=2, seed=7)  # the unit's K rows over 3 keys
def test_one_more_unit_moves_at_most_l_keys_by_at_most_k_rows_and_one_unit(
    audit, units, extra_rows, max_rows, max_keys, pieces, seed
):
    rng = np.random.default_rng(seed)

    def with_queries(part: dict) -> dict:
        return {**part, "query": np.array([f"q{i}" for i in part["item"]])}

    base = as_batches([with_queries(rows_of(u, rows, rng)) for u, rows in enumerate(units)], pieces, rng)
    extra = as_batches([with_queries(rows_of(len(units), extra_rows, rng))], pieces, rng)
    totals = key_totals_on_beam({"without": base, "with": base + extra}, max_rows, max_keys)
    before, after = totals["without"], totals["with"]
    moves = [np.subtract(after[q], before.get(q, (0, 0))) for q in after]
    moved = [m for m in moves if m.any()]
    subject = "Beam: select keys: KeyCounts"
    audit.check(subject, "keys moved by one unit <= L", cases=len(moves), worst=len(moved), bound=max_keys)
    audit.check(subject, "|rows move| <= K, |units move| <= 1", cases=len(moves),
                worst=max([max(m[0] / max_rows, m[1]) for m in moved], default=0), bound=1)  # fmt: skip
    audit.check(subject, "rows moved over all keys <= K (L1: keys-then-laplace's noise)", cases=len(moves),
                worst=sum(m[0] for m in moved), bound=max_rows)  # fmt: skip
    assert set(before) <= set(after) and all((m >= 0).all() for m in moves)  # monotone: adding only adds
