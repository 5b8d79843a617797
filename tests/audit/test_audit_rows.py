"""Audit of RowsToBatches and bounding: each privacy unit counts exactly min(K, its valid rows).

As for files (test_audit_input.py), every unit has a candidate of its own (item u for unit u), so the
counts are the rows each unit kept. One more, and the unit moves a score beyond the sensitivity K; a
rejected row that counts moves a score for a unit that should move none. The inputs are those on which a
unit's identity could split or merge: int, str and float units, -0.0 and 0.0, NaNs of other bits, values
of another type than the declared identity's (5 and "5", True and 1, "a" and b"a") in the same batches,
and a unit with rows from a Parquet file and from rows, bounded together.
"""

from __future__ import annotations

import json
import struct

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_expmech.io.validation import ColumnSpec
from beam_expmech.predicates import CategoryCounts
from beam_expmech.transforms import (
    BoundContributions,
    GatherCounts,
    PredicateCounts,
    ReadRecordBatches,
    RowsToBatches,
    ValidateBatches,
)

K = 2


def counted(rows: list, identity: type, tmp_path, files: list[pa.Table] = ()) -> np.ndarray:
    """The summed counts of item u (unit u's item) after bounding rows (and the files' batches, if any)."""
    specs = [ColumnSpec("item", "int"), ColumnSpec("user", "any")]
    out = tmp_path / "counts.json"
    with beam.Pipeline() as pipeline:
        checked = (
            pipeline | beam.Create(rows) | RowsToBatches(schema=specs, batch_size=4, identity_types={"user": identity})
        )
        batches = [checked.good]
        for i, table in enumerate(files):
            pq.write_table(table, tmp_path / f"{i}.parquet")
            read_ = pipeline | f"Read{i}" >> ReadRecordBatches([str(tmp_path / f"{i}.parquet")], None, ["item", "user"])
            batches.append((read_ | f"Validate{i}" >> ValidateBatches(specs)).good)
        _ = (
            batches
            | beam.Flatten()
            | BoundContributions("user", K, shards=3)
            | PredicateCounts(CategoryCounts("item", range(8)))
            | GatherCounts()
            | beam.Map(lambda c: out.write_text(json.dumps(c.tolist())))
        )
    return np.array(json.loads(out.read_text()))


def unit_rows(unit, item, n: int) -> list[dict]:
    return [{"user": unit, "item": item}] * n


NANS = [struct.unpack("<d", struct.pack("<Q", bits))[0] for bits in (0x7FF8000000000000, 0xFFF8000000000001)]
# (identity type, rows, valid rows per item): item u belongs to one unit; rows whose item is no integer
# are rejected and, counted by mistake, would land on item 0 (validation's placeholder), which no unit has.
UNIT_CASES = {
    "int": (int, unit_rows(1, 1, 3) + unit_rows(2, 2, 1) + unit_rows(5, 5, 6) + unit_rows(5, "x", 2)
            + unit_rows("5", 6, 2) + unit_rows(True, 7, 1), {1: 3, 2: 1, 5: 6}),
    "str": (str, unit_rows("a", 1, 3) + unit_rows("b", 2, 1) + unit_rows("c", "x", 3) + unit_rows(b"a", 3, 2)
            + unit_rows(None, 4, 2), {1: 3, 2: 1}),
    "float": (float, unit_rows(-0.0, 3, 2) + unit_rows(0.0, 3, 2) + unit_rows(NANS[0], 4, 2) + unit_rows(NANS[1], 4, 2)
              + unit_rows(1.5, 1, 1) + unit_rows(2, 2, 1), {3: 4, 4: 4, 1: 1}),
}  # fmt: skip


@pytest.mark.parametrize("case", list(UNIT_CASES))
def test_each_unit_counts_min_k_of_its_valid_rows(audit, tmp_path, case):
    """One count more and a unit moves a score beyond the sensitivity K; a rejected row that counts moves
    a score for a unit that should move none. -0.0 and 0.0 are one unit, and so are NaNs of other bits;
    a value of another type than the declared identity's is no unit (5 and "5", True and 1, "a" and b"a")."""
    identity, rows, valid = UNIT_CASES[case]
    expected = np.zeros(8, int)
    for item, n in valid.items():
        expected[item] = min(K, n)
    counts = counted(rows, identity, tmp_path)
    audit.check(f"RowsToBatches+bound: {case} units", "|rows counted - min(K, valid rows)| per unit",
                cases=counts.size, worst=np.abs(counts - expected).max(), bound=0)  # fmt: skip


@pytest.mark.parametrize(
    "identity,from_file,from_rows",
    [(int, 5, 5), (float, -0.0, 0.0), (str, "u", "u")],
    ids=["int", "float", "str"],
)
def test_a_unit_from_rows_is_the_same_unit_read_from_a_file(audit, tmp_path, identity, from_file, from_rows):
    """The unit has K rows in a Parquet file and K in rows, flattened into one bounding: K count, not 2K."""
    file = pa.table({"item": [3] * K, "user": [from_file] * K})
    counts = counted(unit_rows(from_rows, 3, K), identity, tmp_path, files=[file])
    expected = np.array([0, 0, 0, K, 0, 0, 0, 0])
    audit.check(f"RowsToBatches+files+bound: {identity.__name__} unit", "|rows counted - K| for a unit on both paths",
                cases=counts.size, worst=np.abs(counts - expected).max(), bound=0)  # fmt: skip
