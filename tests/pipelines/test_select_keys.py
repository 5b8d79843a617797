"""pipelines.select without a candidate list: the top k keys found in the data, (epsilon, delta)-DP."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from beam_data import write
from commands import assert_usage_error

from beam_expmech.ledger import Ledger, OverspendError, budget_of
from beam_expmech.manifest import FIXED_FIELDS
from pipelines import ledger as ledger_cli
from pipelines import select

RELEASE_KEYS = {"selected", *FIXED_FIELDS, "sensitivity", "max_keys_per_unit", "top_k", "candidates"}


def queries(rows: int = 20_000, users: int = 2_000, seed: int = 0) -> pa.Table:
    """Search queries of a Zipf law over 500 strings; each user's queries drawn alike."""
    rng = np.random.default_rng(seed)
    zipf = 1 / np.arange(1, 501) ** 1.3
    picks = rng.choice(500, rows, p=zipf / zipf.sum())
    return pa.table({"user_id": rng.integers(0, users, rows), "query": [f"query {i}" for i in picks]})


def run(tmp_path, *flags: str) -> dict:
    out = tmp_path / "top.json"
    assert select.main(["--input", str(tmp_path / "data.parquet"), "--column", "query", *flags,
                        "--output", str(out)]) == 0  # fmt: skip
    return json.loads(out.read_text())


def true_top(table: pa.Table, k: int) -> list[str]:
    return [q for q, _ in Counter(table.column("query").to_pylist()).most_common(k)]


@pytest.mark.parametrize("mechanism", ["limited-domain", "keys-then-exponential", "keys-then-laplace"])
def test_finds_the_true_top_keys_with_no_candidate_list(tmp_path, capsys, mechanism):
    table = queries()
    write(table, tmp_path / "data.parquet", "parquet")
    release = run(tmp_path, "--epsilon", "2", "--delta", "1e-6", "--top-k", "3", "--mechanism", mechanism)
    assert release["selected"] == true_top(table, 3)  # hundreds of rows apart: found at epsilon 2
    assert set(release) == RELEASE_KEYS and release["candidates"] == "keys found in the data"
    assert (release["delta"], release["rho"], release["mechanism"]) == (1e-6, None, mechanism)
    assert 'selected "query 0", "query 1", "query 2": top-3 keys of query' in capsys.readouterr().out


def test_each_unit_keeps_k_rows_over_l_keys_and_the_release_states_both(tmp_path):
    table = queries(rows=40_000, users=10_000)  # about 4 rows a user: the bounds keep most rows
    write(table, tmp_path / "data.parquet", "parquet")
    release = run(tmp_path, "--epsilon", "2", "--delta", "1e-6", "--top-k", "3", "--privacy-unit", "user_id",
                  "--max-rows-per-unit", "5", "--max-keys-per-unit", "3", "--mechanism", "limited-domain")  # fmt: skip
    assert release["selected"] == true_top(table, 3)
    assert (release["sensitivity"], release["max_keys_per_unit"], release["max_rows_per_unit"]) == (5, 3, 5)
    assert release["accuracy"]["bottom_above_next_count"] == pytest.approx(5 + 5 * 3 / 2 * np.log(3 * 3 / 1e-6))


def test_the_multi_process_runner_gives_the_same_release_under_a_test_seed(tmp_path):
    write(queries(rows=20_000, users=500), tmp_path / "data.parquet", "parquet")
    flags = ["--epsilon", "0.3", "--delta", "1e-3", "--top-k", "5", "--privacy-unit", "user_id",
             "--max-rows-per-unit", "3", "--max-keys-per-unit", "2", "--seed", "3"]  # fmt: skip
    one = run(tmp_path, *flags)
    two = run(tmp_path, *flags, "--direct_running_mode=multi_processing", "--direct_num_workers=2")
    assert one == two and one["private_randomness"] is False


def test_fewer_than_k_when_few_keys_stand_out_and_the_release_says_so(tmp_path, capsys):
    write(queries(rows=300, users=300), tmp_path / "data.parquet", "parquet")
    release = run(tmp_path, "--epsilon", "0.5", "--delta", "1e-9", "--top-k", "10", "--mechanism", "limited-domain")
    assert len(release["selected"]) < 10 and release["top_k"] == 10
    bottom = release["accuracy"]["bottom_above_next_count"]
    assert bottom == pytest.approx(1 + 10 / 0.5 * np.log(10 / 1e-9))  # public: K + (K k / eps) ln(min(L, k) k / delta)
    assert f"({len(release['selected'])} of 10: the others did not clear the threshold)" in capsys.readouterr().out


def test_integer_keys_are_released_as_their_text(tmp_path):
    write(pa.table({"query": np.repeat([7, 3, 5], [900, 600, 300])}), tmp_path / "data.parquet", "parquet")
    assert run(tmp_path, "--epsilon", "2", "--delta", "1e-6", "--top-k", "2")["selected"] == ["7", "3"]


def test_a_ledger_of_2_and_1e_6_takes_key_releases_by_the_rule(tmp_path, capsys):
    write(queries(rows=2_000), tmp_path / "data.parquet", "parquet")
    ledger = Ledger(str(tmp_path / "ledger.json"))
    ledger.init("search", epsilon=2.0, delta=1e-6)
    charged = ["--budget-ledger", ledger.path, "--dataset-id", "search"]
    for _ in range(2):
        run(tmp_path, "--epsilon", "0.5", "--delta", "4e-7", "--top-k", "3", *charged)
    with pytest.raises(OverspendError, match="delta"):  # 1.2e-6 of delta: refused before any row is read
        run(tmp_path, "--epsilon", "0.01", "--delta", "4e-7", *charged)
    run(tmp_path, "--epsilon", "1", "--candidates", str(_candidates(tmp_path)), *charged)  # 0.5 + 0.5 + 1 = 2
    assert budget_of(ledger.dataset("search")).spent() == 2.0
    assert [r["status"] for r in ledger.dataset("search")["releases"]] == ["done"] * 3
    capsys.readouterr()
    assert ledger_cli.main(["show", "--budget-ledger", ledger.path, "--dataset-id", "search"]) == 0
    shown = capsys.readouterr().out
    assert shown.count(" 4e-07 ") == 2 and "remaining 0 (and 2e-07 of delta)" in shown


def _candidates(tmp_path):
    path = tmp_path / "candidates.txt"
    path.write_text("\n".join(f"query {i}" for i in range(20)))
    return path


@pytest.mark.parametrize(
    "change,message",
    [
        ({}, "keys found in the data need --delta"),
        ({"--delta": "0"}, "--delta must be a number strictly between 0 and 1"),
        ({"--delta": "1"}, "--delta must be a number strictly between 0 and 1"),
        ({"--delta": "1e-6", "--mechanism": "permute-and-flip"}, "mechanism 'permute-and-flip' needs candidates"),
        ({"--delta": "1e-6", "--max-keys-per-unit": "2"}, "max_keys goes with a unit column"),
        (
            {"--delta": "1e-6", "--privacy-unit": "user_id", "--max-rows-per-unit": "2", "--max-keys-per-unit": "0"},
            "max_keys must be an integer >= 1",
        ),
        ({"--delta": "1e-20", "--mechanism": "keys-then-exponential"}, "delta / max_keys must be at least 2^-64"),
        ({"--delta": "1e-6", "--candidate-range": "0:5"}, "are for keys found in the data"),
        ({"--candidate-range": "0:5", "--mechanism": "limited-domain"}, "is for keys found in the data"),
    ],
)
def test_bad_flags_stop_in_one_line_before_any_data_is_read(tmp_path, change, message):
    flags = {"--input": str(tmp_path / "nothing-here-*.parquet"), "--column": "query", "--epsilon": "1",
             "--output": str(tmp_path / "top.json"), **change}  # fmt: skip
    assert_usage_error("pipelines.select", flags, message)  # the input does not exist: it was never read
