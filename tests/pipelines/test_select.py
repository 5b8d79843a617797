"""pipelines.select end to end on the DirectRunner (in-process and multi-process) and on gs://."""

from __future__ import annotations

import json
import os
import pickle

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from beam_data import purchases, write
from commands import assert_usage_error
from release_passes import run_pass

from beam_expmech.manifest import FIXED_FIELDS
from pipelines import ledger as ledger_cli
from pipelines import select

RELEASE_KEYS = {"selected", *FIXED_FIELDS, "sensitivity", "monotonic", "num_candidates", "top_k"}


def run_select(*args: str) -> dict:
    assert select.main(list(args)) == 0
    output = args[args.index("--output") + 1]
    return json.loads(open(output).read()) if not output.startswith("gs://") else None


def true_top(table, k):
    return [str(i) for i in np.argsort(-np.bincount(table.column("item").to_numpy()), kind="stable")[:k]]


@pytest.mark.parametrize("fmt", ["parquet", "csv", "avro"])
def test_selects_the_true_top_items_at_large_epsilon(tmp_path, fmt):
    table = purchases(20_000)
    write(table, tmp_path / f"data.{fmt}", fmt)
    out = tmp_path / "release.json"
    release = run_select("--input", str(tmp_path / f"*.{fmt}"), "--column", "item", "--candidate-range", "0:50",
                         "--epsilon", "2000", "--top-k", "3", "--output", str(out))  # fmt: skip
    assert release["selected"] == true_top(table, 3)
    assert set(release) == RELEASE_KEYS  # nothing computed from the data but the selection
    assert release["sensitivity"] == 1 and release["monotonic"] and release["private_randomness"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["release.json", f"data.{fmt}"])  # no raw row beside it


def test_bounded_contributions_set_the_sensitivity(tmp_path):
    table = purchases(20_000, users=200)
    write(table, tmp_path / "data.parquet", "parquet")
    candidates = tmp_path / "candidates.txt"
    candidates.write_text("\n".join(str(i) for i in range(50)))
    release = run_select("--input", str(tmp_path / "data.parquet"), "--column", "item", "--candidates", str(candidates),
                         "--privacy-unit", "user_id", "--max-rows-per-unit", "5", "--epsilon", "1",
                         "--output", str(tmp_path / "r.json"))  # fmt: skip
    assert release["sensitivity"] == 5 and release["privacy_unit"] == "user_id"
    assert release["accuracy"]["loss_per_pick"] == pytest.approx(5 / 1 * (np.log(50) + np.log(20)))
    assert len(release["selected"]) == 1


def test_multi_process_runner_gives_the_same_release_under_a_test_seed(tmp_path):
    write(purchases(30_000, users=300), tmp_path / "data.parquet", "parquet")
    common = ["--input", str(tmp_path / "data.parquet"), "--column", "item", "--candidate-range", "0:50",
              "--privacy-unit", "user_id", "--max-rows-per-unit", "2", "--epsilon", "0.5", "--top-k", "3",
              "--seed", "7"]  # fmt: skip
    one = run_select(*common, "--output", str(tmp_path / "one.json"))
    two = run_select(*common, "--output", str(tmp_path / "two.json"),
                     "--direct_running_mode=multi_processing", "--direct_num_workers=2")  # fmt: skip
    assert one == two and one["private_randomness"] is False


def test_bad_rows_go_to_the_dead_letter_and_the_release_still_happens(tmp_path):
    (tmp_path / "data.csv").write_text(
        '\ufeffuser_id,item,amount\n1,3,1.0\n2,x,2.0\n3,,3.0\n,3,1.0\n4,"3",9\n5,4,"multi\nline"\n'
    )
    out = tmp_path / "published" / "r.json"
    release = run_select("--input", str(tmp_path / "data.csv"), "--column", "item", "--candidate-range", "0:10",
                         "--privacy-unit", "user_id", "--max-rows-per-unit", "1", "--epsilon", "1",
                         "--output", str(out), "--dead-letter", str(tmp_path / "ops" / "dead.csv"))  # fmt: skip
    assert len(release["selected"]) == 1
    dead = (tmp_path / "ops" / "dead.csv").read_text().splitlines()
    assert dead[0] == '"item","user_id","reason"'
    # A line is at most one record: of the value over two lines, the first line is read alone (a record of
    # three fields) and the second (one field) goes to the dead letter.
    malformed = f',,"malformed CSV row: expected 3 fields, got 1 (row 8 of {tmp_path / "data.csv"})"'
    assert sorted(dead[1:]) == sorted(
        ['"x","2","item: not an integer"', ',"3","item: null"', '"3",,"user_id: null"', malformed]
    )


def test_the_dead_letter_goes_where_it_is_sent_and_never_beside_the_release(tmp_path):
    (tmp_path / "data.csv").write_text("item\n3\nx\n")
    published, operator = tmp_path / "published", tmp_path / "operator"
    run_select("--input", str(tmp_path / "data.csv"), "--column", "item", "--candidate-range", "0:10",
               "--epsilon", "1", "--output", str(published / "r.json"),
               "--dead-letter", str(operator / "select.csv"))  # fmt: skip
    assert [p.name for p in published.iterdir()] == ["r.json"]
    assert (operator / "select.csv").read_text().splitlines() == ['"item","reason"', '"x","item: not an integer"']
    (published / "sub").mkdir()
    (tmp_path / "link").symlink_to(published)
    back = f"sub/{os.pardir}/dead.csv"  # into the release's folder by a way round
    for inside in ("r.json", "dead.csv", "sub/dead.csv", back):  # the release's folder and below
        flags = {"--input": str(tmp_path / "data.csv"), "--column": "item", "--candidate-range": "0:10",
                 "--epsilon": "1", "--output": str(published / "r.json"),
                 "--dead-letter": str(published / inside)}  # fmt: skip
        assert_usage_error("pipelines.select", flags, "the dead letter must lie outside the output's folder")
    flags["--dead-letter"] = str(tmp_path / "link" / "dead.csv")  # the same folder by another name
    assert_usage_error("pipelines.select", flags, "the dead letter must lie outside the output's folder")
    gs = {**flags, "--output": "gs://bucket/public/r.json", "--dead-letter": "gs://bucket/public/x/dead.csv"}
    assert_usage_error("pipelines.select", gs, "the dead letter must lie outside the output's folder")


@pytest.mark.parametrize("content", ["user_id,item,amount\n", "user_id,item,amount\n1,bad,1\n"])
def test_empty_or_all_bad_input_still_runs_the_mechanism(tmp_path, content):
    (tmp_path / "data.csv").write_text(content)
    release = run_select("--input", str(tmp_path / "data.csv"), "--column", "item", "--candidate-range", "0:10",
                         "--epsilon", "1", "--top-k", "2", "--output", str(tmp_path / "r.json"))  # fmt: skip
    assert len(release["selected"]) == 2  # uniform over the public candidates: an error would reveal the data


@pytest.mark.parametrize(
    "change,message",
    [
        ({"--epsilon": "0"}, "epsilon"),
        ({"--top-k": "0"}, "k must be an integer >= 1"),
        ({"--top-k": "11"}, "exceeds the number of candidates"),
        ({"--column": "nope"}, "missing column 'nope'"),
        ({"--candidate-range": "5:5"}, "empty"),
        ({"--candidate-range": "9223372036854775808:9223372036854775810"}, "beyond 64-bit integers"),  # review 7
        ({"--candidate-range": "9223372036854775803:9223372036854775813"}, "beyond 64-bit integers"),
        ({"--max-rows-per-unit": "0"}, "max_rows must be an integer >= 1"),
        ({"--input": "/nonexistent/*.parquet"}, "no file matches"),
        ({"--mechanism": "permute-and-flip", "--top-k": "2"}, "permute-and-flip selects one"),
    ],
)
def test_bad_arguments_stop_with_one_line_and_exit_2(tmp_path, change, message):
    write(purchases(100), tmp_path / "data.parquet", "parquet")
    args = {"--input": str(tmp_path / "data.parquet"), "--column": "item", "--candidate-range": "0:10",
            "--epsilon": "1", "--privacy-unit": "user_id", "--max-rows-per-unit": "2",
            "--output": str(tmp_path / "r.json"), **change}  # fmt: skip
    assert_usage_error("pipelines.select", args, message)
    assert not (tmp_path / "r.json").exists()


def test_candidate_list_problems(tmp_path):
    write(purchases(100), tmp_path / "data.parquet", "parquet")
    for content, message in [("", "empty"), ("a\nb\na\n", "duplicated: a")]:
        (tmp_path / "c.txt").write_text(content)
        with pytest.raises(ValueError, match=message):
            select.main(["--input", str(tmp_path / "data.parquet"), "--column", "item", "--candidates",
                         str(tmp_path / "c.txt"), "--epsilon", "1", "--output", str(tmp_path / "r.json")])  # fmt: skip


def test_gs_input_and_output(tmp_path, gcs_emulator):
    table = purchases(5_000)
    write(table, tmp_path / "data.parquet", "parquet")
    bucket = gcs_emulator.bucket("test-bucket")
    bucket.blob("in/data.parquet").upload_from_filename(str(tmp_path / "data.parquet"))
    bucket.blob("in/candidates.txt").upload_from_string("\n".join(str(i) for i in range(50)))
    run_select("--input", "gs://test-bucket/in/*.parquet", "--column", "item", "--candidates",
               "gs://test-bucket/in/candidates.txt", "--epsilon", "3000", "--top-k", "2",
               "--output", "gs://test-bucket/out/release.json")  # fmt: skip
    release = json.loads(bucket.blob("out/release.json").download_as_text())
    assert release["selected"] == true_top(table, 2)
    assert [b.name for b in bucket.list_blobs(prefix="out/")] == ["out/release.json"]  # no raw row beside it


@pytest.mark.parametrize("candidates", ["range", "labels"])
def test_a_units_rows_are_spent_on_rows_that_count(tmp_path, candidates):
    """Rows of no candidate are left out before bounding (a public test of each row, as PipelineDP drops
    rows outside public partitions): each user's K = 2 rows are then its 2 rows of a candidate, not 2 of
    its 22 rows, 20 of which count for nothing."""
    users = np.repeat(np.arange(60), 22)
    items = np.where(np.arange(users.size) % 22 < 2, users % 50, 50 + users % 7)  # 2 rows in 0..49, 20 beyond
    pq.write_table(pa.table({"user_id": users, "item": items if candidates == "range" else items.astype(str)}),
                   tmp_path / "data.parquet")  # fmt: skip
    (tmp_path / "candidates.txt").write_text("\n".join(str(i) for i in range(50)))
    chosen = ["--candidate-range", "0:50"]
    if candidates == "labels":
        chosen = ["--candidates", str(tmp_path / "candidates.txt")]
    args, _ = select.parse_args(["--input", str(tmp_path / "data.parquet"), "--column", "item", *chosen,
                                 "--privacy-unit", "user_id", "--max-rows-per-unit", "2", "--epsilon", "1",
                                 "--output", str(tmp_path / "r.json")])  # fmt: skip
    captured = tmp_path / "counts.pickle"
    # The declared release's own pass, its final step swapped for a capture of the counts it is given.
    run_pass(select.declared(args), beam.combiners.ToList(), lambda shards: captured.write_bytes(pickle.dumps(shards)))
    ((_, counts),) = pickle.loads(captured.read_bytes())
    assert counts.tolist() == (2 * np.bincount(np.arange(60) % 50, minlength=50)).tolist()


@pytest.mark.parametrize("name", ["__candidate", "__priority", "__unit_hash"])
@pytest.mark.parametrize("role", ["--privacy-unit", "--column"])
def test_a_column_named_as_the_librarys_own_is_refused_before_any_budget(tmp_path, name, role):
    """Bounding adds columns of these names: a unit or value column of one would fail the job after its
    charge (review 7, F1)."""
    table = purchases(100)
    pq.write_table(table.append_column(name, table.column("user_id" if role == "--privacy-unit" else "item")),
                   tmp_path / "data.parquet")  # fmt: skip
    ledger = str(tmp_path / "ledger.json")
    assert ledger_cli.main(["init", "--budget-ledger", ledger, "--dataset-id", "shop", "--epsilon", "3"]) == 0
    args = {"--input": str(tmp_path / "data.parquet"), "--column": "item", "--candidate-range": "0:10",
            "--epsilon": "1", "--privacy-unit": "user_id", "--max-rows-per-unit": "2", role: name,
            "--budget-ledger": ledger, "--dataset-id": "shop", "--output": str(tmp_path / "r.json")}  # fmt: skip
    assert_usage_error("pipelines.select", args, "names beginning with '__' are the library's own")
    assert json.loads((tmp_path / "ledger.json").read_text())["datasets"]["shop"]["releases"] == []
