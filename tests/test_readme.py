"""The README's library examples run as printed: a user copies them first."""

from __future__ import annotations

import re
from pathlib import Path

import apache_beam as beam
import numpy as np
import pyarrow as pa
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
    assert len(BLOCKS) == 6  # a new example needs its test below


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
