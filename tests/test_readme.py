"""The README's library examples run as printed: a user copies them first."""

from __future__ import annotations

import json
import re
from pathlib import Path

import apache_beam as beam
import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from beam_data import write

from beam_expmech.accounting import BudgetExceededError

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
BLOCKS = re.findall(r"^```python\n(.*?)^```", README, flags=re.M | re.S)


def block(*words: str) -> str:
    """The one example that holds every one of ``words``."""
    (found,) = [b for b in BLOCKS if all(w in b for w in words)]
    return found


def test_every_example_is_run_here():
    assert len(BLOCKS) == 12  # a new example needs its test below


@pytest.fixture
def purchases(tmp_path, monkeypatch):
    """data/part-0.parquet as the declared examples read it: (user_id, item, amount, a, b, y)."""
    rng = np.random.default_rng(0)
    users = rng.integers(0, 2_000, 10_000)
    a, b = rng.integers(0, 2, (2, users.size))
    items = np.minimum(rng.zipf(1.3, users.size) - 1, 999)
    table = {"user_id": users, "item": items, "amount": rng.gamma(2, 50, users.size), "a": a, "b": b, "y": a | b}
    (tmp_path / "data").mkdir()
    write(pa.table(table), tmp_path / "data" / "part-0.parquet", "parquet")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run_block(*words: str, capsys) -> str:
    exec(block(*words), {})
    return capsys.readouterr().out


def test_the_declared_selection_dry_runs_then_releases_three_labels(purchases, capsys):
    out = run_block("release.dry_run()", capsys=capsys)
    assert out.startswith("dry run: no data read, nothing spent") and "sensitivity: 5.0" in out
    released = json.loads((purchases / "out" / "top3.json").read_text())
    assert len(released["selected"]) == 3 and released["selected"][0] == "0"  # the Zipf head, far ahead
    assert released["sensitivity"] == 5 and released["private_randomness"] is True


def test_the_declared_keys_example_reads_tuples_through_extractors(purchases, capsys):
    out = run_block("extractors=", capsys=capsys)
    table = pacsv.read_csv(purchases / "out" / "queries.csv")
    assert table.column_names == ["rank", "selected"] and 1 <= table.num_rows <= 3
    assert set(table.column("selected").to_pylist()) <= {f"q{i}" for i in range(7)} and "q" in out
    assert json.loads((purchases / "out" / "queries.manifest.json").read_text())["delta"] == 1e-6


def test_the_declared_quantiles_write_parquet_with_a_manifest(purchases, capsys):
    run_block("query=Quantiles(", capsys=capsys)
    table = pq.read_table(purchases / "out" / "amounts.parquet")
    assert table.column("quantile").to_pylist() == [0.1, 0.5, 0.9]
    values = table.column("value").to_pylist()
    assert values == sorted(values) and 20 < values[1] < 200  # the gamma(2, 50) median is about 84
    assert json.loads((purchases / "out" / "amounts.manifest.json").read_text())["quantiles"]["0.5"] == values[1]


def test_the_declared_halfspace_releases_two_weights(purchases, capsys):
    run_block("query=Halfspace(", capsys=capsys)
    released = json.loads((purchases / "out" / "halfspace.json").read_text())
    assert released["features"] == ["a", "b"] and released["weights"] == [1.0, 1.0]  # y = a or b: fits every row


def test_the_declared_synthesis_writes_avro(purchases, capsys):
    run_block("Synthesis(", capsys=capsys)
    with open(purchases / "out" / "synthetic.avro", "rb") as handle:
        rows = list(fastavro.reader(handle))
    assert len(rows) == 1000 and set(rows[0]) == {"item", "a", "amount"}
    assert all(0 <= r["item"] < 1000 and r["a"] in (0, 1) and 0 <= r["amount"] <= 1000 for r in rows)


def test_the_file_example_selects_three_items_from_files(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    users = rng.integers(0, 2_000, 10_000)
    (tmp_path / "data").mkdir()
    write(pa.table({"user_id": users, "item": users % 1000}), tmp_path / "data" / "part-0.parquet", "parquet")
    monkeypatch.chdir(tmp_path)
    exec(block("ReadRecordBatches(", "PrivateSelect("), {})


def test_the_keys_example_finds_keys_in_files(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    users = rng.integers(0, 2_000, 10_000)
    (tmp_path / "data").mkdir()
    queries = [f"q{q}" for q in rng.zipf(1.5, users.size) % 50]
    write(pa.table({"user_id": users, "query": queries}), tmp_path / "data" / "part-0.parquet", "parquet")
    monkeypatch.chdir(tmp_path)
    exec(block("KeyCounts("), {})


def test_the_rows_example_sends_its_bad_row_to_the_dead_letter(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(block("RowsToBatches("), {})
    (dead_letter,) = tmp_path.glob("dead_letter*.csv")
    assert dead_letter.read_text().count("item: not an integer") == 1


def test_the_final_steps_example_composes_on_bounded_batches():
    rng = np.random.default_rng(0)
    bits = {c: rng.integers(0, 2, 500) for c in "aby"}
    pipeline = beam.Pipeline()
    namespace = {"bounded": pipeline | beam.Create([pa.record_batch({"amount": rng.uniform(0, 1000, 500), **bits})])}
    exec(block("PrivateQuantiles("), namespace)
    assert namespace["budget"].spent() == pytest.approx(1.0)
    pipeline.run().wait_until_finish()


def test_the_mechanism_and_budget_examples_run_and_the_overdraft_is_refused():
    exec(block("permute_and_flip("), {})
    namespace = {}
    with pytest.raises(BudgetExceededError):
        exec(block("BudgetExceededError"), namespace)
    assert namespace["budget"].spent() == pytest.approx(1.0)


def test_the_side_by_side_job_writes_the_top_three(purchases):
    (job,) = [b for b in BLOCKS if b.startswith("from beam_expmech import") and ").run()" in b]
    exec(job, {})
    assert len(json.loads((purchases / "out" / "top3.json").read_text())["selected"]) == 3
