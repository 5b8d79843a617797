"""The adversarial input corpus: files that break the rules in one way each, written by the tests.

Every file holds the same clean rows (users, an item code, a float, bits) plus, where the case
is about rows, some bad ones, and a planted ``SECRET`` wherever a broken file can hold one: no
message, log line or exception text may ever show it. A case says what a pipeline must do with it: refuse it with a
one-line error before any budget is spent (``usage``), or release exactly what the clean rows
give, with the bad rows in the dead letter (``release``, and how many bad rows), or, where
nothing can tell before the rows are read, fail cleanly: one line, the charge kept and marked
failed, no output (``failed``).
"""

from __future__ import annotations

import csv
import io as stdio
from dataclasses import dataclass
from pathlib import Path

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from beam_data import pages_zeroed

COLUMNS = ("user", "item", "x", "f0", "f1", "y")
ITEMS = 6
SECRET = "secret-ssn-123-45-6789"


@dataclass(frozen=True)
class Case:
    name: str
    file: str  # the --input, inside the corpus folder (a file or a glob)
    expect: str  # "usage", "release" or "failed"
    bad_rows: int | dict = 0  # rows the pipeline must send to the dead letter (or per pipeline)
    only: tuple[str, ...] = ()  # the pipelines that read the broken columns (default: all)
    same_as: str | None = "clean.csv"  # the release must equal the one from this file (None: no check)

    def rejected(self, pipeline: str) -> int:
        return self.bad_rows.get(pipeline, 0) if isinstance(self.bad_rows, dict) else self.bad_rows

    def applies_to(self, pipeline: str) -> bool:
        return not self.only or pipeline in self.only


def clean_rows(rows: int = 400, seed: int = 0) -> dict[str, list]:
    rng = np.random.default_rng(seed)
    item = np.minimum(rng.geometric(0.35, rows) - 1, ITEMS - 1)
    return {
        "user": rng.integers(0, rows // 4, rows).tolist(),
        "item": item.tolist(),
        "x": np.round(rng.uniform(0, 10, rows), 3).tolist(),
        "f0": rng.integers(0, 2, rows).tolist(),
        "f1": rng.integers(0, 2, rows).tolist(),
        "y": (item % 2).tolist(),
    }


def csv_text(rows: dict[str, list], extra_lines: list[str] = (), columns=COLUMNS) -> str:
    out = stdio.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(zip(*(rows[c] for c in columns), strict=True))
    return out.getvalue() + "".join(line + "\n" for line in extra_lines)


CASES = [
    Case("truncated_parquet", "truncated_parquet.parquet", "usage"),
    # The footer intact, the pages zeroed: nothing tells before the rows are read.
    Case("corrupt_parquet_pages", "corrupt_parquet_pages.parquet", "failed"),
    Case("not_parquet_at_all", "not_parquet_at_all.parquet", "usage"),
    Case("missing_column", "missing_column.csv", "usage", only=("select", "synthesize")),
    Case("extra_column", "extra_column.csv", "release"),
    # A line is at most one record: a value that runs over lines is two malformed lines per row (an
    # unclosed quote must never take the next lines, other people's rows, with it).
    Case("quoted_newlines", "quoted_newlines.csv", "release", bad_rows=800, same_as=None),
    Case("byte_order_mark", "byte_order_mark.csv", "release"),
    Case("wrong_types", "wrong_types.csv", "release", bad_rows=2),
    Case("nan_inf", "nan_inf.csv", "release", bad_rows=3, only=("quantiles",)),
    Case("negative_zero", "negative_zero.csv", "release", only=("quantiles",), same_as="zero.csv"),
    Case(
        "int64_max_and_negative_codes",
        "int64_max_and_negative_codes.csv",
        "release",
        bad_rows={"synthesize": 3, "select": 1},
        only=("select", "synthesize"),
    ),
    Case("null_privacy_units", "null_privacy_units.csv", "release", bad_rows=2),
    Case("mixed_encodings", "mixed_encodings.csv", "release", bad_rows=1),
    Case("malformed_rows", "malformed_rows.csv", "release", bad_rows=2),
    # pyarrow cannot set aside a malformed row that is not UTF-8: the file is unreadable.
    Case("malformed_row_not_utf8", "malformed_row_not_utf8.csv", "release", bad_rows=1),
    Case("unit_typed_differently", "unit_typed_differently-*.parquet", "usage"),
    # Avro values of a union read as their text: 0.0 and -0.0, or 5 and "5", would be one unit or two.
    Case("unit_avro_union", "unit_avro_union.avro", "usage"),
    # Two columns named "user": which one a reader takes is up to it.
    Case("unit_column_twice", "unit_column_twice.parquet", "usage"),
    Case("zero_rows", "zero_rows.csv", "release", same_as=None),
    Case("empty_file", "empty_file.csv", "usage"),
    Case("glob_matches_nothing", "nothing-*.parquet", "usage"),
]


def write_corpus(folder: Path, rows: dict[str, list]) -> None:
    """Write every case's file into ``folder``, beside ``clean.csv`` (and ``zero.csv``)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "clean.csv").write_text(csv_text(rows))
    noted = pa.table({**{c: rows[c] for c in COLUMNS}, "note": [SECRET] * len(rows["user"])})
    pq.write_table(noted, folder / "clean.parquet", row_group_size=100)  # the secret in its pages and statistics
    parquet = (folder / "clean.parquet").read_bytes()
    zero = {**rows, "x": [0.0, *rows["x"][1:]]}
    (folder / "zero.csv").write_text(csv_text(zero))
    quoted = {**rows, "note": [f'a "quoted"\nline, with comma {SECRET}'] * len(rows["user"])}
    # Each bad row is bad in every column a pipeline reads, so every pipeline rejects it.
    extremes = [f"{SECRET},9223372036854775807,1.0,0,1,1", f"{SECRET},-1,1.0,0,1,1",
                f"{SECRET},99999999999999999999,1.0,0,1,1"]  # fmt: skip
    contents = {
        "truncated_parquet": parquet[: len(parquet) // 2],
        "corrupt_parquet_pages": pages_zeroed(parquet),
        "not_parquet_at_all": f"PAR1 {SECRET} is no parquet file PAR1".encode(),
        "missing_column": csv_text(rows, [f"{SECRET},1.0,0,1,1"], columns=[c for c in COLUMNS if c != "item"]),
        "extra_column": csv_text({**rows, "note": [SECRET] * len(rows["user"])}, columns=(*COLUMNS, "note")),
        "quoted_newlines": csv_text(quoted, columns=("note", *COLUMNS)),
        "byte_order_mark": "\ufeff" + csv_text(rows),
        "wrong_types": csv_text(rows, [f"1,{SECRET},{SECRET},{SECRET},{SECRET},{SECRET}", "2,3.5,1e999x,2,0,1"]),
        "nan_inf": csv_text(rows, [f"{SECRET},1,nan,0,1,1", "5,2,inf,0,1,0", "6,3,-inf,1,1,1"]),
        "negative_zero": csv_text({**zero, "x": [-0.0, *zero["x"][1:]]}),
        # Out of the domain (synthesize), or beyond int64 (select reads item as an int too).
        "int64_max_and_negative_codes": csv_text(rows, extremes),
        "null_privacy_units": csv_text(rows, [",1,1.0,0,1,1", ",2,2.0,1,1,0"]),
        # Latin-1 bytes in a UTF-8 file, in every column a pipeline reads as text, codes or numbers.
        "mixed_encodings": csv_text(rows).encode() + f"{SECRET},café,1é,é,0,1\n".encode("latin-1"),
        # One field too many, and one field alone.
        "malformed_rows": csv_text(rows, [f"{SECRET},1,1.0,0,1,1,{SECRET}", SECRET]),
        "malformed_row_not_utf8": csv_text(rows).encode() + f"{SECRET},café,1.0,0,1,1,é\n".encode("latin-1"),
        "zero_rows": ",".join(COLUMNS) + "\n",
        "empty_file": b"",
    }
    written_below = {"unit_avro_union", "unit_column_twice"}
    assert set(contents) == {c.name for c in CASES if "*" not in c.file} - written_below
    for case in CASES:
        if case.name in contents:
            data = contents[case.name]
            (folder / case.file).write_bytes(data if isinstance(data, bytes) else data.encode())
    # The unit read as integers from one file and as text from the other: one unit could be two.
    pq.write_table(pa.table({c: rows[c] for c in COLUMNS}), folder / "unit_typed_differently-1.parquet")
    as_text = pa.table({**{c: rows[c] for c in COLUMNS}, "user": [SECRET] * len(rows["user"])})
    pq.write_table(as_text, folder / "unit_typed_differently-2.parquet")
    records = [dict(zip(COLUMNS, values, strict=True)) for values in zip(*(rows[c] for c in COLUMNS), strict=True)]
    fields = [{"name": c, "type": "double" if c == "x" else "long"} for c in COLUMNS]
    fields[0]["type"] = ["null", "long", "string"]  # the unit
    with open(folder / "unit_avro_union.avro", "wb") as handle:
        fastavro.writer(
            handle, {"type": "record", "name": "Row", "fields": fields}, [*records, {**records[0], "user": SECRET}]
        )
    columns = [pa.array(rows[c]) for c in COLUMNS] + [pa.array([SECRET] * len(rows["user"]))]
    pq.write_table(pa.Table.from_arrays(columns, names=[*COLUMNS, "user"]), folder / "unit_column_twice.parquet")


def big_unit_rows(rows: dict[str, list], extra: int) -> dict[str, list]:
    """The clean rows plus one user with ``extra`` rows (bounding must cut them to K)."""
    rng = np.random.default_rng(1)
    return {
        "user": rows["user"] + [10**9] * extra,
        "item": rows["item"] + rng.integers(0, ITEMS, extra).tolist(),
        "x": rows["x"] + np.round(rng.uniform(0, 10, extra), 3).tolist(),
        "f0": rows["f0"] + [0] * extra,
        "f1": rows["f1"] + [1] * extra,
        "y": rows["y"] + [1] * extra,
    }
