"""Audit of reading, validation and bounding as the declared selection runs them (the release pipelines.select
declares from its command line: its own data pass, from the files to the summed counts its mechanism is given).

Every privacy unit has a candidate of its own (item u for unit u), so the counts are the rows each
unit kept: they must be exactly min(K, the unit's rows that pass validation). One more, and the
unit moves a score beyond the sensitivity K from the neighbouring input without it; a rejected row
that counts moves a score for a unit that should move none. The inputs are those on which a unit's
identity could split: Avro units in two files, beside an item column typed "long or string" that
holds only longs in one and text in the other; float units written as -0.0 and 0.0, or as NaNs of
other bits; a CSV line whose quote never closes, which must not take the lines of other units with
it. A unit column of several Avro types, read as text, is refused before any budget.
"""

from __future__ import annotations

from pathlib import Path

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from release_passes import run_pass

from beam_expmech.io.errors import InputError
from beam_expmech.transforms import GatherCounts
from pipelines import select

K = 2
ITEMS = 8
FLAGS = ["--column", "item", "--candidate-range", f"0:{ITEMS}", "--privacy-unit", "user", "--max-rows-per-unit",
         str(K), "--epsilon", "1", "--seed", "3"]  # fmt: skip
# Rows whose item is no integer go to the dead letter; counted by mistake, they would land on item 0
# (validation's placeholder), which no unit has.
REJECTED = "not an item"


def declared(source: str, output: str):
    """The release pipelines.select declares from its command line over the files ``source`` names (declaring it
    checks them, as the command line does before any budget)."""
    args, _ = select.parse_args(["--input", source, *FLAGS, "--output", output])
    select.check_flags(args)
    return select.declared(args)


def select_counts(source: str, out) -> np.ndarray:
    """The summed counts the declared selection's own data pass computes from the files ``source`` names (its
    final step swapped for a capture)."""
    captured = f"{out}.npy"
    run_pass(declared(source, f"{out}.json"), GatherCounts(), lambda counts: np.save(captured, counts))
    return np.load(captured)


def write_avro(path, rows: list[dict], unit_type=("null", "long")) -> None:
    union = ["null", "long", "string"]  # fastavro hands over ints and strs, as the rows hold them
    schema = {"type": "record", "name": "Row", "fields": [{"name": "user", "type": list(unit_type)},
                                                          {"name": "item", "type": union}]}  # fmt: skip
    with open(path, "wb") as handle:
        fastavro.writer(handle, schema, rows)


def rows(unit, item, n: int) -> list[dict]:
    return [{"user": unit, "item": item}] * n


def avro_inputs(folder) -> tuple[str, dict[int, int]]:
    """Two Avro files of one schema: unit 5 has rows in both, beside items of longs only and of text too."""
    write_avro(folder / "a.avro", rows(1, 1, 3) + rows(2, 2, 1) + rows(5, 5, 3))
    write_avro(folder / "b.avro", rows(5, 5, 3) + rows(6, "6", 1) + rows(7, REJECTED, 3))
    return str(folder / "*.avro"), {1: 3, 2: 1, 5: 6, 6: 1}  # item -> the rows of its unit that pass


def float_inputs(folder) -> tuple[str, dict[int, int]]:
    """Float units in Parquet: 0.0 written as -0.0 and 0.0, NaN with two different bit patterns."""
    nans = np.array([0x7FF8000000000000, 0xFFF8000000000001], np.uint64).view(np.float64).tolist()
    units = [-0.0, 0.0] * 2 + nans * 2 + [1.5]
    items = [3] * 4 + [4] * 4 + [1]
    pq.write_table(pa.table({"user": pa.array(units, pa.float64()), "item": items}), folder / "floats.parquet")
    return str(folder / "floats.parquet"), {3: 4, 4: 4, 1: 1}


def csv_inputs(folder) -> tuple[str, dict[int, int]]:
    """CSV with one person's line whose quote never closes, before the lines of other units."""
    lines = ["item,user", "1,1", "2,2", '"3,3', "1,1", "2,2", "4,4", "4,4", "4,4", 'x","y']
    (folder / "quoted.csv").write_text("\n".join([*lines, "5,5"]) + "\n")
    return str(folder / "quoted.csv"), {1: 2, 2: 2, 4: 3, 5: 1}


def outside_inputs(folder) -> tuple[str, dict[int, int]]:
    """Units with 0 to 5 rows of their item and up to 30 rows of items beyond the candidates (above and
    below), shuffled: a unit's K rows are its rows of a candidate, whatever else it has."""
    rng = np.random.default_rng(4)
    inside = {1: 0, 2: 1, 3: 2, 4: 3, 5: 5}
    users, items = [], []
    for unit, n in inside.items():
        outside = rng.choice([-7, ITEMS, ITEMS + 3, 10**6], size=int(rng.integers(1, 31))).tolist()
        users += [unit] * (n + len(outside))
        items += [unit] * n + outside
    order = rng.permutation(len(users))
    table = pa.table({"user": np.array(users)[order], "item": np.array(items)[order]})
    pq.write_table(table, folder / "outside.parquet", row_group_size=17)
    return str(folder / "outside.parquet"), {u: n for u, n in inside.items() if n}


@pytest.mark.parametrize(
    "name,inputs",
    [
        pytest.param("Avro units", avro_inputs, id="avro_units"),
        pytest.param("float units", float_inputs, id="float_units"),
        pytest.param("CSV with unclosed quotes", csv_inputs, id="csv_unclosed_quotes"),
        pytest.param("rows beyond the candidates", outside_inputs, id="outside_candidates"),
    ],
)
def test_each_unit_counts_min_k_of_its_valid_rows(audit, name, inputs, tmp_path):
    source, valid = inputs(tmp_path)
    counts = select_counts(source, tmp_path / "out")
    expected = np.zeros(ITEMS, dtype=int)
    for item, n in valid.items():
        expected[item] = min(K, n)
    audit.check(f"pipelines.select read+bound: {name}", "|rows counted - min(K, valid rows)| per unit",
                cases=ITEMS, worst=np.abs(counts - expected).max(), bound=0)  # fmt: skip


def check_input(source: str) -> None:
    declared(source, str(Path(source).parent / "x.json"))


def test_files_that_type_the_unit_column_differently_are_refused_before_any_budget(tmp_path):
    pq.write_table(pa.table({"user": [5, 5], "item": [5, 5]}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"user": ["5", "5"], "item": [5, 5]}), tmp_path / "b.parquet")
    with pytest.raises(InputError, match="column 'user' holds text, but integers"):
        check_input(str(tmp_path / "*.parquet"))


def test_a_unit_column_of_several_avro_types_is_refused_before_any_budget(tmp_path):
    """Read as text, the union's 5 and "5" would be one unit: two people, whose rows bound each other."""
    write_avro(tmp_path / "u.avro", rows(5, 5, 1) + rows("5", 5, 1), unit_type=("null", "long", "string"))
    with pytest.raises(InputError, match="column 'user' identifies privacy units, so its Avro type must be one"):
        check_input(str(tmp_path / "u.avro"))
