"""Every command's flags: a mistyped one is refused before anything is read or spent, Beam's own pass through."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from beam_data import purchases, write
from commands import assert_usage_error, run_command
from public_tables import DATA

from beam_expmech.ledger import Ledger
from pipelines import learn, quantiles, select, synthesize

NLTCS = DATA / "nltcs"


def commands(tmp_path) -> dict[str, dict]:
    """Each pipeline's flags for a run that would spend from a ledger (Flags in dicts: flag -> value)."""
    write(purchases(200), tmp_path / "data.parquet", "parquet")
    data, ledger = str(tmp_path / "data.parquet"), str(tmp_path / "ledger.json")
    charged = {"--epsilon": "1", "--budget-ledger": ledger, "--dataset-id": "d"}
    return {
        "pipelines.select": {"--input": data, "--column": "item", "--candidate-range": "0:50", "--top-k": "3",
                             "--output": str(tmp_path / "out" / "r.json"), **charged},
        "pipelines.quantiles": {"--input": data, "--column": "amount", "--lower": "0", "--upper": "100",
                                "--quantiles": "0.5", "--output": str(tmp_path / "out" / "q.json"), **charged},
        "pipelines.learn": {"--input": str(NLTCS / "nltcs.csv"), "--features": "bathing,cooking", "--label": "eating",
                            "--output": str(tmp_path / "out" / "h.json"), **charged},
        "pipelines.synthesize": {"--input": str(NLTCS / "nltcs.csv"), "--domain": str(NLTCS / "domain.json"),
                                 "--columns": "bathing,cooking", "--output": str(tmp_path / "out" / "s.csv"),
                                 **charged},
    }  # fmt: skip


@pytest.mark.parametrize("mistake", [{"--epsilom": "0.1"}, {"--top": "3"}, {"--max-rows": "5"}, {"--seed_": "1"}])
def test_a_flag_that_is_neither_ours_nor_beams_spends_nothing(tmp_path, mistake):
    """Issue 34: `--epsilon 1 --epsilom 0.1 --topk 3` released a top-1 and charged epsilon 1 (Beam only warned
    "Discarding unparseable args"). A whole name only: argparse's abbreviations (--top for --top-k) are off."""
    Ledger(str(tmp_path / "ledger.json")).init("d", epsilon=10.0)
    for module, flags in commands(tmp_path).items():
        assert_usage_error(module, {**flags, **mistake}, f"unrecognized argument '{next(iter(mistake))}'")
    assert Ledger(str(tmp_path / "ledger.json")).dataset("d")["releases"] == []
    assert not (tmp_path / "out").exists()


def test_a_stray_value_spends_nothing(tmp_path):
    Ledger(str(tmp_path / "ledger.json")).init("d", epsilon=10.0)
    flags = commands(tmp_path)["pipelines.select"]
    assert_usage_error("pipelines.select", {**flags, "--top-k": "3", "4": "5"}, "unrecognized argument '4'")
    assert Ledger(str(tmp_path / "ledger.json")).dataset("d")["releases"] == []


def test_beams_options_and_our_underscored_names_pass(tmp_path):
    Ledger(str(tmp_path / "ledger.json")).init("d", epsilon=10.0)
    flags = {k: v for k, v in commands(tmp_path)["pipelines.select"].items() if k != "--top-k"}
    beam_options = ["--runner", "DirectRunner", "--direct_num_workers=1", "--labels=team=dp", "--top_k", "2"]
    assert select.main([x for kv in flags.items() for x in kv] + beam_options) == 0
    assert len(json.loads((tmp_path / "out" / "r.json").read_text())["selected"]) == 2
    for module in (select, quantiles, learn, synthesize):
        assert "whole names" in module.build_parser().format_help()  # said in --help


def test_what_the_schema_dooms_is_refused_before_the_charge(tmp_path):
    """Issue 34: quantiles of a column Parquet types as text released "q0.5 = 0.87" and charged; likewise learn
    over text columns, and select with candidates the column's type can never equal."""
    Ledger(str(tmp_path / "ledger.json")).init("d", epsilon=10.0)
    table = pa.table({"cut": ["Ideal", "Premium"] * 50, "bit": ["0", "1"] * 50, "n": list(range(100)),
                      "user": list(range(100))})  # fmt: skip
    pq.write_table(table, tmp_path / "t.parquet")
    (tmp_path / "labels.txt").write_text("3\n04\n")  # "04" is no integer's text: no row of n is ever "04"
    (tmp_path / "good.txt").write_text("3\n-4\n")
    ledger = str(tmp_path / "ledger.json")
    charged = {"--input": str(tmp_path / "t.parquet"), "--epsilon": "1", "--budget-ledger": ledger,
               "--dataset-id": "d", "--output": str(tmp_path / "out" / "r.json")}  # fmt: skip
    doomed = [
        ("pipelines.quantiles", {"--column": "cut", "--lower": "0", "--upper": "1", "--quantiles": "0.5"},
         "column 'cut' holds text, but is read as numbers"),
        ("pipelines.learn", {"--features": "bit", "--label": "n"}, "column 'bit' holds text, but is read as integers"),
        ("pipelines.select", {"--column": "cut", "--candidate-range": "0:5"}, "column 'cut' holds text"),
        ("pipelines.select", {"--column": "n", "--candidates": str(tmp_path / "labels.txt")},
         "never read as '04'"),
    ]  # fmt: skip
    for module, flags, message in doomed:
        assert_usage_error(module, {**charged, **flags}, message)
    assert Ledger(str(tmp_path / "ledger.json")).dataset("d")["releases"] == []
    assert select.main([*(x for kv in charged.items() for x in kv), "--column", "n", "--candidates",
                        str(tmp_path / "good.txt")]) == 0  # fmt: skip
    pacsv.write_csv(table, tmp_path / "t.csv")  # CSV: text by nature; each value parsed, none here a number
    assert quantiles.main([*(x for kv in {**charged, "--input": str(tmp_path / "t.csv")}.items() for x in kv),
                           "--column", "cut", "--lower", "0", "--upper", "1", "--quantiles", "0.5"]) == 0  # fmt: skip


def test_places_a_run_cannot_write_or_should_not_are_refused_before_the_charge(tmp_path):
    """The adversarial review's ways round the dead letter's rule, and outputs that failed after the charge."""
    Ledger(str(tmp_path / "ledger.json")).init("d", epsilon=10.0)
    flags = commands(tmp_path)["pipelines.select"]
    published = tmp_path / "published"
    published.mkdir()
    (tmp_path / "else").mkdir()
    (tmp_path / "folder.json").mkdir()  # a folder, whatever its name says
    (published / "latest.json").symlink_to(tmp_path / "else" / "latest.json")  # a link in a published folder
    refused = [
        ({"--output": str(published / "r.json"), "--dead-letter": f"file://{published}/dead.csv"}, "must lie outside"),
        ({"--output": str(published / "latest.json"), "--dead-letter": str(published / "d.csv")}, "must lie outside"),
        ({"--output": "gs://b//out/r.json", "--dead-letter": "gs://b//out/d.csv"}, "must lie outside"),
        ({"--output": f"gs://b/x/{os.pardir}/out/r.json", "--dead-letter": f"gs://b/x/{os.pardir}/out/d.csv"},
         "must lie outside"),
        ({"--output": str(tmp_path / "r.json"), "--dead-letter": "s3://b/d.csv"}, "must be a local path or gs://"),
        ({"--output": str(tmp_path / "r.json"), "--dead-letter": "GS://b/d.csv"}, "must be a local path or gs://"),
        ({"--output": str(tmp_path / "r.json"), "--dead-letter": str(tmp_path / "else")}, "names a folder"),
        ({"--output": str(tmp_path / "folder.json")}, "output names a folder"),
        ({"--output": str(tmp_path / "else")}, "output must end in .json, .csv or .parquet"),
        ({"--output": "/proc/nope/r.json"}, "cannot be written"),
        ({"--privacy-unit": "", "--max-rows-per-unit": "5"}, "the privacy unit's column is empty"),
    ]  # fmt: skip
    for change, message in refused:
        assert_usage_error("pipelines.select", {**flags, **change}, message)
    assert Ledger(str(tmp_path / "ledger.json")).dataset("d")["releases"] == []
    assert select.main([*(x for kv in {**flags, "--output": f"file://{tmp_path}/out/r.json"}.items() for x in kv)]) == 0
    assert (tmp_path / "out" / "r.json").exists()  # file:// is the local path it names


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (["--epsilon", "2"], "--epsilon is given more than once"),  # argparse took the last: 2 was spent
        (["--top-k=2", "--top_k=3"], "--top-k is given more than once"),
        (["--direct_runner_bundle_repeat=3"], "draws the release again with fresh noise"),
        (["--direct_running_mode=bogus"], "a Beam option: argument --direct_running_mode: invalid choice"),
    ],
)
def test_a_flag_twice_a_beam_option_that_redraws_or_a_bad_beam_value_spends_nothing(tmp_path, change, message):
    Ledger(str(tmp_path / "ledger.json")).init("d", epsilon=10.0)
    flags = commands(tmp_path)["pipelines.select"]
    argv = [*(x for kv in flags.items() for x in kv), *change]
    code, stderr = run_command("pipelines.select", argv)
    assert code == 2 and len(stderr.strip().splitlines()) == 1 and message in stderr, stderr
    assert Ledger(str(tmp_path / "ledger.json")).dataset("d")["releases"] == []


@pytest.mark.parametrize("option", ["--type_check_strictness=ALL_REQUIRED", "--pickle_library=dill"])
def test_a_beam_option_that_breaks_the_graph_spends_nothing(tmp_path, option):
    """The graph is built before the charge (review finding: these failed after it, with a traceback)."""
    Ledger(str(tmp_path / "ledger.json")).init("d", epsilon=10.0)
    for module, flags in commands(tmp_path).items():  # a process each: a pickler set is Beam's for the process
        argv = [sys.executable, "-m", module, *(x for kv in flags.items() for x in kv), option]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and "graph cannot be built" in done.stderr.strip().splitlines()[-1], done.stderr
        assert "Traceback" not in done.stderr
    assert Ledger(str(tmp_path / "ledger.json")).dataset("d")["releases"] == []


def test_what_other_schemas_doom_is_refused_before_the_charge(tmp_path):
    """The review's cases: a column of nulls only, candidates a decimal's or a timestamp's text never equals, a
    domain's labels over integers, a unit whose values are lists (the text of [0.0] and [-0.0] differs)."""
    Ledger(str(tmp_path / "ledger.json")).init("d", epsilon=10.0)
    table = pa.table({
        "nothing": pa.nulls(4), "price": pa.array([150, 250] * 2, pa.decimal128(5, 2)).cast(pa.decimal128(5, 2)),
        "when": pa.array([0, 86_400_000_000] * 2, pa.timestamp("us")), "n": [0, 1, 2, 1],
        "ids": pa.array([[0.0], [-0.0], [1.0], [2.0]]), "user": [1, 2, 3, 4],
    })  # fmt: skip
    pq.write_table(table, tmp_path / "t.parquet")
    for name, labels in {"decimal": "1.5\n", "time": "1970-01-02\n", "good": "1.50\n"}.items():
        (tmp_path / f"{name}.txt").write_text(labels)
    (tmp_path / "domain.json").write_text(json.dumps({"n": ["a", "b", "c"]}))
    ledger, out = str(tmp_path / "ledger.json"), tmp_path / "out"
    charged = {"--input": str(tmp_path / "t.parquet"), "--epsilon": "1", "--budget-ledger": ledger,
               "--dataset-id": "d", "--output": str(out / "r.json")}  # fmt: skip
    doomed = [
        ("pipelines.quantiles", {"--column": "nothing", "--lower": "0", "--upper": "1", "--quantiles": "0.5"},
         "column 'nothing' holds nulls only in every file"),
        ("pipelines.select", {"--column": "price", "--candidates": str(tmp_path / "decimal.txt")},
         "never read as '1.5'"),
        ("pipelines.select", {"--column": "when", "--candidates": str(tmp_path / "time.txt")},
         "never read as '1970-01-02'"),
        ("pipelines.synthesize", {"--domain": str(tmp_path / "domain.json"), "--output": str(out / "s.csv")},
         "never read as 'a'"),
        ("pipelines.select", {"--column": "n", "--candidate-range": "0:3", "--privacy-unit": "ids",
                              "--max-rows-per-unit": "1"}, "identifies privacy units, so it must hold numbers or text"),
    ]  # fmt: skip
    for module, flags, message in doomed:
        assert_usage_error(module, {**charged, **flags}, message)
    assert Ledger(str(tmp_path / "ledger.json")).dataset("d")["releases"] == []
    assert not out.exists()  # a refused run leaves nothing behind, not even the release's folder
    good = {**charged, "--column": "price", "--candidates": str(tmp_path / "good.txt")}
    assert select.main([x for kv in good.items() for x in kv]) == 0  # a decimal(5, 2)'s text: "1.50"


def test_a_run_never_writes_over_its_ledger_its_input_or_where_its_manifest_goes(tmp_path):
    """The second review's cases: --output or --dead-letter at the ledger (its history gone: a fresh budget) or
    at an input file (the data replaced by raw rows); a manifest's place that is a folder; a table's format."""
    Ledger(str(tmp_path / "ledger.json")).init("d", epsilon=10.0)
    flags = commands(tmp_path)
    select_flags, synthesize_flags = flags["pipelines.select"], flags["pipelines.synthesize"]
    ledger, data = select_flags["--budget-ledger"], select_flags["--input"]
    (tmp_path / "out" / "s.manifest.json").mkdir(parents=True)
    refused = [
        ("pipelines.select", {**select_flags, "--output": ledger}, "output is the budget's ledger"),
        ("pipelines.select", {**select_flags, "--dead-letter": ledger}, "dead_letter is the budget's ledger"),
        ("pipelines.select", {**select_flags, "--dead-letter": data}, "dead_letter is one of the input files"),
        ("pipelines.select", {**select_flags, "--output": data}, "output is one of the input files"),
        ("pipelines.select", {**select_flags, "--output": str(tmp_path / "out" / "s.csv")},
         "the output's manifest names a folder"),  # a table's public fields go to s.manifest.json
        ("pipelines.synthesize", {**synthesize_flags, "--output": str(tmp_path / "out" / "s.parquet")},
         "the output's manifest names a folder"),
        # .avro is a table's format now (tests/pipelines/test_synthesize.py); a result's is not one
        ("pipelines.synthesize", {**synthesize_flags, "--output": str(tmp_path / "s.json")},
         "output must end in .parquet, .csv or .avro"),
    ]  # fmt: skip
    for module, change, message in refused:
        assert_usage_error(module, change, message)
    assert Ledger(ledger).dataset("d")["releases"] == []
