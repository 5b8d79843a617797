"""Audit of what a privacy unit is, on the library's compositions for keys found in the data (the README's):
one unit's rows, however its identifier is spelled, count as one unit everywhere after bounding.

Bounding identifies a unit by its canonical form (``canonical_identity``: -0.0 is 0.0, every NaN is one NaN,
int32 5 is int64 5, text is its bytes). A step after it that told units apart by another rule (pyarrow's
``count_distinct`` of the raw column tells NaN payloads and -0.0 apart) would count one unit several times:
KeyCounts' distinct units per key are what partition selection thresholds, with sensitivity 1. Issue 34: one
unit spelling its float id as 30 NaN payloads was counted as 30 units and its key released 95% of the time.

On D and D' = D plus one unit whose rows spell its id every way its type allows (files: NaN payloads, -0.0 and
0.0, float32 and float64, int32 and int64, binary and string columns; rows: the declared identity type, and
values of other types, which are rejected), each key's units move by at most 1 and its rows by at most K, at
most L keys move, and their rows by K in all. Then the release itself: the key only that unit holds, drawn on
seeded neighbours, is released no more often than DP allows.
"""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from key_totals import bounded_key_totals

from beam_expmech.io.validation import ColumnSpec
from beam_expmech.transforms import ReadRecordBatches, RowsToBatches, ValidateBatches
from beam_expmech.transforms.keys import KEY, ROWS, UNITS, PrivateTopKeys


def schema(unit_kind: str) -> list[ColumnSpec]:
    """The columns as the README declares them: the unit of kind "any" (an identity), or as a number it is."""
    return [ColumnSpec("query", "string"), ColumnSpec("user", unit_kind)]


def from_files(paths: list[str], unit_kind: str = "any"):
    def source(pipeline, name):
        read = pipeline | f"Read {name}" >> ReadRecordBatches(paths, None, ["query", "user"])
        return (read | f"Validate {name}" >> ValidateBatches(schema(unit_kind))).good

    return source


def from_rows(rows: list[dict], identity: type):
    def source(pipeline, name):
        created = pipeline | f"Create {name}" >> beam.Create(rows)
        return (
            created
            | f"Batch {name}" >> RowsToBatches(schema=schema("any"), batch_size=7, identity_types={"user": identity})
        ).good

    return source


def nan_payloads(n: int) -> np.ndarray:
    return (np.uint64(0x7FF8000000000001) + np.arange(n, dtype=np.uint64)).view(np.float64)


def write(tmp_path, name: str, users: pa.Array, queries: list[str]) -> str:
    path = str(tmp_path / f"{name}.parquet")
    pq.write_table(pa.table({"query": pa.array(queries, pa.string()), "user": users}), path)
    return path


def base_files(tmp_path, kind: pa.DataType, units: int = 40) -> list[str]:
    """D: ``units`` units of 3 rows each over a few common keys, ids 1 .. units in ``kind``."""
    rng = np.random.default_rng(1)
    users = np.repeat(np.arange(1, units + 1), 3)
    ids = pa.array([str(u).encode() for u in users], kind) if pa.types.is_binary(kind) or kind == pa.string() else (
        pa.array(users).cast(kind))  # fmt: skip
    return [write(tmp_path, "base", ids, [f"common{q}" for q in rng.integers(0, 3, users.size)])]


EXTRA_ROWS = 12
HALF = EXTRA_ROWS // 2
SPELLINGS = {  # the extra unit's id, every way its type allows, in two files (one type family, as readers check),
    # and how the unit column is declared: kind "any", or a number ("float" keeps -0.0 as it is, rejects NaN)
    "float NaN payloads": ("any", pa.float64(), pa.array(nan_payloads(HALF)), pa.array(nan_payloads(2 * HALF)[HALF:])),
    "float -0.0 and 0.0": ("any", pa.float64(), pa.array([-0.0] * HALF), pa.array([0.0] * HALF)),
    "float -0.0 and 0.0, declared float": ("float", pa.float64(), pa.array([-0.0] * HALF), pa.array([0.0] * HALF)),
    "float32 and float64": ("any", pa.float64(), pa.array([0.5] * HALF, pa.float32()), pa.array([0.5] * HALF)),
    "int32 and int64": ("any", pa.int64(), pa.array([0] * HALF, pa.int32()), pa.array([0] * HALF)),
    "int32 and int64, declared int": ("int", pa.int64(), pa.array([0] * HALF, pa.int32()), pa.array([0] * HALF)),
    "binary and string": ("any", pa.string(), pa.array([b"x"] * HALF, pa.binary()), pa.array(["x"] * HALF)),
}  # fmt: skip


def check_one_unit_moved(audit, subject: str, before: dict, after: dict, max_rows: int, max_keys: int) -> None:
    moves = [np.subtract(after[q], before.get(q, (0, 0))) for q in after]
    moved = [m for m in moves if m.any()]
    audit.check(subject, "keys moved by one unit <= L", cases=len(moves), worst=len(moved), bound=max_keys)
    audit.check(subject, "|units move| of a key <= 1", cases=len(moves), worst=max((m[1] for m in moved), default=0),
                bound=1)  # fmt: skip
    audit.check(subject, "rows moved over all keys <= K", cases=len(moves), worst=sum(m[0] for m in moved),
                bound=max_rows)  # fmt: skip


@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.parametrize(("max_rows", "max_keys"), [(EXTRA_ROWS, 1), (4, 3)])
def test_a_unit_spelled_many_ways_in_files_is_one_unit(audit, tmp_path, spelling, max_rows, max_keys):
    unit_kind, kind, first, second = SPELLINGS[spelling]
    base = base_files(tmp_path, kind)
    keys = [f"secret{i % max_keys}" for i in range(HALF)]
    extra = [write(tmp_path, "extra1", first, keys), write(tmp_path, "extra2", second, keys)]
    datasets = {"D": from_files(base, unit_kind), "D'": from_files(base + extra, unit_kind)}
    totals = bounded_key_totals(datasets, max_rows, max_keys)
    check_one_unit_moved(audit, f"library keys from files: {spelling}", totals["D"], totals["D'"], max_rows, max_keys)


ROW_SPELLINGS = {  # the declared identity type, and one unit's id spelled every way (other types are rejected)
    "float NaN payloads": (float, [*nan_payloads(EXTRA_ROWS)]),
    "float zero: -0.0, 0.0, 0, False": (float, [-0.0, 0.0, 0, False] * 3),
    "float 7.0: 7.0, 7, '7'": (float, [7.0, 7, "7"] * 4),
    "int 3: 3, 3.0, True, '3'": (int, [3, 3.0, True, "3"] * 3),
    "bytes: b'x', 'x'": (bytes, [b"x", "x"] * 6),
    "str: 'x', b'x'": (str, ["x", b"x"] * 6),
}


@pytest.mark.parametrize("spelling", ROW_SPELLINGS)
def test_a_unit_spelled_many_ways_in_rows_is_one_unit(audit, spelling):
    identity, ids = ROW_SPELLINGS[spelling]
    base = [{"user": str(u).encode() if identity is bytes else identity(u), "query": f"common{u % 3}"}
            for u in range(1, 40) for _ in range(3)]  # fmt: skip
    extra = [{"user": i, "query": "secret"} for i in ids]
    totals = bounded_key_totals({"D": from_rows(base, identity), "D'": from_rows(base + extra, identity)}, len(ids), 1)
    check_one_unit_moved(audit, f"library keys from rows: {spelling}", totals["D"], totals["D'"], len(ids), 1)


def issue_34_files(tmp_path) -> list[str]:
    """Issue 34's case: D = 200 float units on "common"; D' adds one unit of 30 rows on "secret", its id spelled
    as 30 NaN payloads."""
    base = write(tmp_path, "base", pa.array(np.arange(200, dtype=np.float64)), ["common"] * 200)
    return [base, write(tmp_path, "extra", pa.array(nan_payloads(30)), ["secret"] * 30)]


def runs_releasing_secret(totals: dict, draws: int) -> int:
    """Of ``draws`` seeded draws of PrivateTopKeys (k 1, K 30, L 1, epsilon 1, delta 1e-6) on ``totals``, how
    many release "secret"."""
    shard = pa.table({KEY: list(totals), ROWS: [r for r, _ in totals.values()], UNITS: [u for _, u in totals.values()]})
    return sum(
        "secret" in PrivateTopKeys(epsilon=1.0, delta=1e-6, k=1, max_rows=30, max_keys=1, seed=s).release([(0, shard)])
        for s in range(draws)
    )


def test_the_key_of_one_unit_spelled_as_nan_payloads_is_released_no_more_than_dp_allows(audit, tmp_path):
    """On D', "secret" may be released at most e^epsilon * P_D + delta of the time, and P_D = 0 (not in D)."""
    totals = bounded_key_totals({"D'": from_files(issue_34_files(tmp_path))}, max_rows=30, max_keys=1)["D'"]
    draws = 400  # zero releases expected (delta * draws = 4e-4); on e227a53's count, about 380
    audit.check("library keys: one unit of 30 NaN payloads", "runs releasing its key (of 400; DP: ~0)", cases=draws,
                worst=runs_releasing_secret(totals, draws), bound=0)  # fmt: skip


def test_the_issues_composition_without_validation_is_refused_when_built(audit, tmp_path):
    """The README's first example as it was (ReadRecordBatches straight into BoundContributions), into KeyCounts
    and PrivateTopKeys: refused when the graph is built. Had it been built, the check below would run on it."""
    files = issue_34_files(tmp_path)

    def unvalidated(pipeline, name):
        return pipeline | f"Read {name}" >> ReadRecordBatches(files, None, ["query", "user"])

    try:
        totals = bounded_key_totals({"D'": unvalidated}, max_rows=30, max_keys=1)["D'"]
    except ValueError as refused:
        assert "was not validated" in str(refused) and "ValidateBatches" in str(refused)
        return
    audit.check("library keys, unvalidated: one unit of 30 NaN payloads", "runs releasing its key (of 400)",
                cases=400, worst=runs_releasing_secret(totals, 400), bound=0)  # fmt: skip


def test_a_unit_read_as_text_or_a_label_is_refused_when_built(tmp_path):
    """Kind "string" reads a float unit -0.0 as "-0" and 0.0 as "0": two forms of one unit (kind "any" gives one)."""
    files = [write(tmp_path, "floats", pa.array([-0.0, 0.0]), ["q", "q"])]
    with pytest.raises(ValueError, match="declare it as kind 'any'"):
        bounded_key_totals({"D": from_files(files, "string")}, max_rows=2, max_keys=1)


def test_one_unit_typed_two_ways_on_two_paths_is_refused_when_built(tmp_path):
    """Two validated reads flattened, the unit int 5 in one and text "5" in the other: two units to bounding."""
    ints = write(tmp_path, "ints", pa.array([5, 5]), ["q", "q"])
    texts = write(tmp_path, "texts", pa.array(["5", "5"]), ["q", "q"])

    def both(pipeline, name):
        return (from_files([ints])(pipeline, f"{name} ints"), from_files([texts])(pipeline, f"{name} texts")) | (
            f"Both {name}" >> beam.Flatten()
        )

    with pytest.raises(ValueError, match="'user' was not validated alike on every path"):
        bounded_key_totals({"D": both}, max_rows=2, max_keys=1)
