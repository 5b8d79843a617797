"""pipelines.synthesize end to end: MWEM and BLR on NLTCS, the manifest, the dead letter, errors."""

from __future__ import annotations

import contextlib
import io
import json
import logging

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from commands import assert_usage_error
from public_tables import DATA

from beam_expmech.accounting import Release, compose, epsilon_to_zcdp, zcdp_to_epsilon
from beam_expmech.grids import NumericGrid
from beam_expmech.io import writers
from beam_expmech.ledger import Ledger, budget_of
from beam_expmech.predicates import HistogramCounts
from beam_expmech.releases import JobFailedError, synthesis
from beam_expmech.synth import aim, mwem
from beam_expmech.transforms import PrivateQuantiles
from beam_expmech.transforms.quantiles import JOINT_BINS
from pipelines import console, evaluate_synthetic, synthesize

NLTCS = DATA / "nltcs"


def columns(k: int) -> str:
    return ",".join(list(json.loads((NLTCS / "domain.json").read_text()))[:k])


def test_mwem_writes_a_parquet_table_and_a_manifest(tmp_path, capsys):
    out = tmp_path / "synthetic.parquet"
    args = ["--input", str(NLTCS / "nltcs.csv"), "--domain", str(NLTCS / "domain.json"), "--columns", columns(8),
            "--epsilon", "1", "--method", "mwem", "--rounds", "10", "--seed", "5", "--output", str(out)]  # fmt: skip
    assert synthesize.main(args) == 0
    table = pq.read_table(out)
    domain = json.loads((NLTCS / "domain.json").read_text())
    assert table.column_names == columns(8).split(",")
    for name in table.column_names:
        values = table.column(name).to_numpy()
        assert values.min() >= 0 and values.max() < domain[name]
    manifest = json.loads((tmp_path / "synthetic.manifest.json").read_text())
    assert manifest["method"] == "mwem" and manifest["epsilon"] == 1 and manifest["private_randomness"] is False
    assert len(manifest["measured"]) == manifest["rounds"] == manifest["rounds_asked"] == 10
    assert manifest["rows"] == table.num_rows
    assert 15_000 < table.num_rows < 30_000  # the noisy size of 21,574 rows
    capsys.readouterr()
    evaluate_synthetic.main([str(NLTCS / "nltcs.csv"), str(NLTCS / "domain.json"), str(out), "--columns", columns(8)])
    average = float(capsys.readouterr().out.split("average L1 error ")[1].split(",")[0])
    assert average < 0.15  # independent noisy 1-way marginals score about 0.5 here


def test_auto_is_the_default_runs_aim_on_nltcs_and_states_its_guarantee(tmp_path, capsys):
    out = tmp_path / "synthetic.csv"
    args = ["--input", str(NLTCS / "nltcs.csv"), "--domain", str(NLTCS / "domain.json"), "--columns", columns(8),
            "--epsilon", "1", "--delta", "1e-8", "--seed", "8", "--output", str(out)]  # fmt: skip
    assert synthesize.main(args) == 0
    assert "columns by aim, epsilon=1, delta=1e-08" in capsys.readouterr().out
    manifest = json.loads((tmp_path / "synthetic.manifest.json").read_text())
    assert (manifest["method"], manifest["generator"], manifest["epsilon"], manifest["delta"]) == (
        "auto",
        "aim",
        1,
        1e-8,
    )
    assert "(epsilon, delta)-DP" in manifest["guarantee"]
    assert [tuple(m) for m in manifest["measured"][:8]] == [(c,) for c in columns(8).split(",")]
    assert pacsv.read_csv(out).num_rows == manifest["rows"]
    evaluate_synthetic.main([str(NLTCS / "nltcs.csv"), str(NLTCS / "domain.json"), str(out), "--columns", columns(8)])
    average = float(capsys.readouterr().out.split("average L1 error ")[1].split(",")[0])
    assert average < 0.06  # sampled rows; the model itself is closer


def test_auto_gives_small_data_independent_one_ways_and_aim_its_zcdp_guarantee(tmp_path, capsys):
    """300 rows at epsilon 0.3: too few for AIM's rounds (z about 5), so auto measures the 1-ways alone, pure
    epsilon-DP inside its (epsilon, delta) charge; --method aim on the same rows is rho-zCDP."""
    pacsv.write_csv(pacsv.read_csv(NLTCS / "nltcs.csv").slice(0, 300), tmp_path / "small.csv")
    common = ["--input", str(tmp_path / "small.csv"), "--domain", str(NLTCS / "domain.json"), "--columns", columns(6),
              "--epsilon", "0.3", "--seed", "9"]  # fmt: skip
    assert synthesize.main([*common, "--output", str(tmp_path / "auto.csv")]) == 0
    assert "columns by independent, epsilon=0.3, delta=1e-09" in capsys.readouterr().out
    manifest = json.loads((tmp_path / "auto.manifest.json").read_text())
    assert (manifest["generator"], manifest["rho"]) == ("independent", None)
    assert [tuple(m) for m in manifest["measured"]] == [(c,) for c in columns(6).split(",")]
    assert synthesize.main([*common, "--method", "aim", "--output", str(tmp_path / "aim.csv")]) == 0
    manifest = json.loads((tmp_path / "aim.manifest.json").read_text())
    assert manifest["method"] == "aim" and "zCDP" in manifest["guarantee"] and "generator" not in manifest
    assert zcdp_to_epsilon(manifest["rho"], delta=1e-9) <= 0.3


def test_a_target_gives_small_data_its_naive_bayes_and_the_manifest_names_it(tmp_path, capsys):
    """The same 300 rows with --target: the target's 2-way marginal with each other column, each column drawn
    given the target; the rows keep the target's dependence, which independent 1-ways lose."""
    pacsv.write_csv(pacsv.read_csv(NLTCS / "nltcs.csv").slice(0, 300), tmp_path / "small.csv")
    names = columns(6).split(",")
    args = ["--input", str(tmp_path / "small.csv"), "--domain", str(NLTCS / "domain.json"), "--columns", columns(6),
            "--epsilon", "1", "--target", names[2], "--seed", "9", "--output", str(tmp_path / "nb.csv")]  # fmt: skip
    assert synthesize.main(["--dry-run", *args]) == 0
    assert f'target: "{names[2]} (where the data are small' in capsys.readouterr().out
    assert synthesize.main(args) == 0
    assert "columns by naive bayes, epsilon=1, delta=1e-09" in capsys.readouterr().out
    manifest = json.loads((tmp_path / "nb.manifest.json").read_text())
    assert (manifest["generator"], manifest["target"], manifest["rho"]) == ("naive bayes", names[2], None)
    assert [tuple(m) for m in manifest["measured"]] == [(names[2], c) for c in names if c != names[2]]
    real, synthetic = pacsv.read_csv(tmp_path / "small.csv"), pacsv.read_csv(tmp_path / "nb.csv")
    for name in (names[1], names[3]):  # ADLs go together: the target's correlation with each survives
        truth = np.corrcoef(real.column(name).to_numpy(), real.column(names[2]).to_numpy())[0, 1]
        drawn = np.corrcoef(synthetic.column(name).to_numpy(), synthetic.column(names[2]).to_numpy())[0, 1]
        assert truth > 0.3 and abs(drawn - truth) < 0.2, (name, truth, drawn)


def test_blr_on_three_columns(tmp_path):
    out = tmp_path / "tiny.csv"
    assert synthesize.main(["--input", str(NLTCS / "nltcs.csv"), "--domain", str(NLTCS / "domain.json"),
                            "--columns", columns(3), "--method", "blr", "--rows", "8", "--epsilon", "2",
                            "--seed", "6", "--output", str(out)]) == 0  # fmt: skip
    table = pacsv.read_csv(out)
    assert table.num_rows == 8 and table.column_names == columns(3).split(",")
    assert json.loads((tmp_path / "tiny.manifest.json").read_text())["method"] == "blr"


def test_values_outside_the_domain_go_to_the_dead_letter(tmp_path):
    (tmp_path / "d.csv").write_text("a,b\n0,1\n1,0\n2,1\n1,1\n0,-1\n" + "0,0\n" * 50)
    (tmp_path / "domain.json").write_text(json.dumps({"a": 2, "b": 2}))
    out = tmp_path / "out" / "s.csv"
    args = ["--input", str(tmp_path / "d.csv"), "--domain", str(tmp_path / "domain.json"), "--epsilon", "1",
            "--method", "mwem", "--workload-degree", "2", "--rounds", "2", "--seed", "7",
            "--output", str(out),
            "--dead-letter", str(tmp_path / "s.dead_letter.csv")]  # fmt: skip
    assert synthesize.main(args) == 0
    dead = (tmp_path / "s.dead_letter.csv").read_text().splitlines()
    assert sorted(dead[1:]) == sorted(
        ['"2","1","a: outside the domain [0, 2)"', '"0","-1","b: outside the domain [0, 2)"']
    )
    values = pacsv.read_csv(out).column("a").to_numpy()
    assert set(np.unique(values)) <= {0, 1}  # nothing clipped into the domain, nothing outside it


@pytest.mark.parametrize(
    "change,message",
    [
        ({"--columns": "nope"}, f"column 'nope' is not in {NLTCS / 'domain.json'}"),
        ({"--method": "blr", "--rows": "12"}, "candidate datasets, over the limit"),
        ({"--method": "blr"}, "rows is required with method blr"),
        ({"--epsilon": "0"}, "epsilon"),
        ({"--delta": "0"}, "method auto is (epsilon, delta)-DP: the budget needs a delta > 0"),
        ({"--delta": "1.5"}, "delta must be a number strictly between 0 and 1, got 1.5"),
        ({"--method": "gan"}, "invalid choice"),
        ({"--workload-degree": "20"}, "degree = 20 exceeds the number of columns (16)"),
        ({"--rows": "10", "--max-synthetic-rows": "5"}, "max_synthetic_rows caps the noisy size"),
        ({"--max-synthetic-rows": "0"}, "max_synthetic_rows must be an integer >= 1"),
        ({"--target": "nope"}, "the target 'nope' must be one of the columns synthesized"),
        ({"--target": "bathing", "--columns": "eating,dressing"}, "the target 'bathing' must be one of the columns"),
        ({"--target": "bathing", "--columns": "bathing"}, "must be one of the columns synthesized, beside another"),
        ({"--target": "bathing", "--method": "aim"}, "target is for method auto"),
        ({"--target": "bathing", "--workload-degree": "1"}, "a target needs a workload of degree 2 or more"),
        ({"--target": "bathing", "--method": "mwem"}, "target is for method auto"),
    ],
)
def test_bad_arguments_stop_before_any_data(tmp_path, change, message):
    args = {"--input": str(NLTCS / "nltcs.csv"), "--domain": str(NLTCS / "domain.json"), "--epsilon": "1",
            "--output": str(tmp_path / "s.csv"), **change}  # fmt: skip
    assert_usage_error("pipelines.synthesize", args, message)
    assert not (tmp_path / "s.csv").exists()


def test_a_column_named_twice_is_refused_before_anything_is_read_or_charged(tmp_path):
    """The table would hold it once while the line and the manifest counted it twice (issue 34)."""
    ledger = Ledger(str(tmp_path / "ledger.json"))
    ledger.init("d", epsilon=5.0, delta=1e-6)
    args = {"--input": str(NLTCS / "nltcs.csv"), "--domain": str(NLTCS / "domain.json"), "--epsilon": "1",
            "--columns": "eating,bathing,eating", "--output": str(tmp_path / "s.csv"),
            "--budget-ledger": ledger.path, "--dataset-id": "d"}  # fmt: skip
    assert_usage_error("pipelines.synthesize", args, "columns names 'eating' more than once")
    assert ledger.dataset("d")["releases"] == [] and not (tmp_path / "s.csv").exists()


@pytest.mark.parametrize(
    "domain,flags,message",
    [
        ({"a": 101, "b": 100, "c": 100}, {"--method": "mwem"}, "MWEM: a workload marginal has 1,010,000 cells"),
        ({"a": 2_000_001}, {}, "AIM: the 1-way marginals alone have 2,000,001 cells"),
        ({"a": 4}, {"--method": "blr", "--rows": "2"}, "BLR's query degree = 2 exceeds the number of columns (1)"),
        # BLR's candidates, one per cell: a 10^6 x 10^6 array
        ({"a": 1000, "b": 1000}, {"--method": "blr", "--rows": "1"}, "GiB, over the limit of 4 GiB"),
    ],
)
def test_a_run_its_generator_would_refuse_stops_before_the_charge(tmp_path, domain, flags, message):
    (tmp_path / "d.csv").write_text(",".join(domain) + "\n" + ",".join("0" for _ in domain) + "\n")
    (tmp_path / "domain.json").write_text(json.dumps(domain))
    ledger = Ledger(str(tmp_path / "ledger.json"))
    ledger.init("d", epsilon=5.0, delta=1e-6)
    args = {"--input": str(tmp_path / "d.csv"), "--domain": str(tmp_path / "domain.json"), "--epsilon": "1",
            "--output": str(tmp_path / "s.csv"), "--budget-ledger": ledger.path, "--dataset-id": "d",
            **flags}  # fmt: skip
    assert_usage_error("pipelines.synthesize", args, message)
    assert ledger.dataset("d")["releases"] == [] and not (tmp_path / "s.csv").exists()


def test_rows_the_run_cannot_hold_are_refused_before_the_charge_even_in_a_dry_run(tmp_path):
    """Issue 34: a dry run of 10^9 rows said "at most 16 MiB" (the generator alone), and the run needed 16 GB
    or more once charged. The synthetic table, its search and its write are counted, before any budget."""
    ledger = Ledger(str(tmp_path / "ledger.json"))
    ledger.init("d", epsilon=5.0, delta=1e-6)
    args = {"--input": str(NLTCS / "nltcs.csv"), "--domain": str(NLTCS / "domain.json"), "--columns": columns(4),
            "--epsilon": "1", "--rows": "1000000000", "--output": str(tmp_path / "s.csv")}  # fmt: skip
    refused = "auto: 1,000,000,000 synthetic rows of 4 columns would hold about"
    with pytest.raises(ValueError, match=refused):
        synthesize.main([x for kv in args.items() for x in kv] + ["--dry-run"])
    assert_usage_error("pipelines.synthesize", args | {"--budget-ledger": ledger.path, "--dataset-id": "d"}, refused)
    assert ledger.dataset("d")["releases"] == [] and not (tmp_path / "s.csv").exists()


def test_an_avro_output_is_the_table_a_parquet_output_holds(tmp_path):
    """The output's name says its format: .avro writes an Avro table (fastavro reads it), the same rows, columns and
    types as .parquet under the same test seed, and the manifest beside it."""
    (tmp_path / "d.csv").write_text("a,x\n" + "".join(f"{i % 2},{i / 7:.3f}\n" for i in range(300)))
    (tmp_path / "domain.json").write_text(json.dumps({"a": 2, "x": {"lower": 0, "upper": 50, "bins": 8}}))
    args = ["--input", str(tmp_path / "d.csv"), "--domain", str(tmp_path / "domain.json"), "--epsilon", "1",
            "--method", "mwem", "--rounds", "2", "--rows", "40", "--seed", "4"]  # fmt: skip
    for fmt in ("parquet", "avro"):
        assert synthesize.main([*args, "--output", str(tmp_path / fmt / f"s.{fmt}")]) == 0
    with open(tmp_path / "avro" / "s.avro", "rb") as handle:
        rows = list(fastavro.reader(handle))
    assert rows == pq.read_table(tmp_path / "parquet" / "s.parquet").to_pylist() and len(rows) == 40
    assert isinstance(rows[0]["a"], int) and isinstance(rows[0]["x"], float)
    manifests = [json.loads((tmp_path / fmt / "s.manifest.json").read_text()) for fmt in ("parquet", "avro")]
    assert manifests[0] == manifests[1]
    assert sorted(p.name for p in (tmp_path / "avro").iterdir()) == ["s.avro", "s.manifest.json"]


def test_the_noisy_size_is_capped_at_max_synthetic_rows_which_the_manifest_states(tmp_path):
    out = tmp_path / "s.csv"
    args = ["--input", str(NLTCS / "nltcs.csv"), "--domain", str(NLTCS / "domain.json"), "--columns", columns(4),
            "--epsilon", "1", "--method", "mwem", "--rounds", "2", "--max-synthetic-rows", "500", "--seed", "3",
            "--output", str(out)]  # fmt: skip
    assert synthesize.main(args) == 0  # the noisy size of 21,574 rows, capped
    manifest = json.loads((tmp_path / "s.manifest.json").read_text())
    assert manifest["rows"] == manifest["max_synthetic_rows"] == 500 == pacsv.read_csv(out).num_rows


def test_the_table_is_written_in_chunks_where_it_is_drawn_then_moved_to_the_output_last(tmp_path, monkeypatch):
    """Row groups of about writers.TABLE_CHUNK_BYTES (here 1,000 rows), never the whole table as one; the same
    table as written in one chunk, and nothing left beside it but the manifest."""
    args = ["--input", str(NLTCS / "nltcs.csv"), "--domain", str(NLTCS / "domain.json"), "--columns", columns(4),
            "--epsilon", "1", "--rows", "3000", "--seed", "3"]  # fmt: skip
    assert synthesize.main([*args, "--output", str(tmp_path / "whole" / "s.parquet")]) == 0
    monkeypatch.setattr(writers, "TABLE_CHUNK_BYTES", 4 * 32 * 1_000)  # 32 bytes a column of codes
    assert synthesize.main([*args, "--output", str(tmp_path / "chunks" / "s.parquet")]) == 0
    chunked = pq.ParquetFile(tmp_path / "chunks" / "s.parquet")
    assert chunked.num_row_groups == 3 and chunked.read().equals(pq.read_table(tmp_path / "whole" / "s.parquet"))
    assert sorted(p.name for p in (tmp_path / "chunks").iterdir()) == ["s.manifest.json", "s.parquet"]


def test_a_job_that_fails_after_drawing_the_table_releases_nothing_and_leaves_no_staged_table(tmp_path, monkeypatch):
    def lost(staged, output):
        assert [p.name.endswith("-s.csv") for p in tmp_path.glob(".staged-*")] == [True]  # drawn, not released
        raise OSError("the publishing worker was lost (injected)")

    monkeypatch.setattr(synthesis, "publish", lost)  # the job's last step
    ledger = Ledger(str(tmp_path / "ledger.json"))
    ledger.init("d", epsilon=5.0, delta=1e-6)
    args = ["--input", str(NLTCS / "nltcs.csv"), "--domain", str(NLTCS / "domain.json"), "--columns", columns(3),
            "--epsilon", "1", "--rows", "100", "--seed", "3", "--output", str(tmp_path / "s.csv"),
            "--budget-ledger", ledger.path, "--dataset-id", "d"]  # fmt: skip
    with pytest.raises(JobFailedError, match="OSError"):
        synthesize.main(args)
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(("s.", ".staged"))]
    assert [r["status"] for r in ledger.dataset("d")["releases"]] == ["failed"]  # the charge kept


def test_a_labelled_domain_reads_and_writes_labels(tmp_path):
    rows = ["colour,size"] + ["red,S"] * 300 + ["blue,M"] * 200 + ["green,L"] * 100 + ["purple,S", "red,XL"]
    (tmp_path / "d.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "domain.json").write_text(json.dumps({"colour": ["red", "green", "blue"], "size": ["S", "M", "L"]}))
    out = tmp_path / "out" / "s.csv"
    args = ["--input", str(tmp_path / "d.csv"), "--domain", str(tmp_path / "domain.json"), "--epsilon", "2",
            "--workload-degree", "2", "--seed", "9", "--output", str(out),
            "--dead-letter", str(tmp_path / "s.dead_letter.csv")]  # fmt: skip
    assert synthesize.main(args) == 0
    table = pacsv.read_csv(out)
    assert set(table.column("colour").to_pylist()) <= {"red", "green", "blue"}
    assert set(table.column("size").to_pylist()) <= {"S", "M", "L"}
    assert table.column("colour").to_pylist().count("red") > 0.3 * table.num_rows  # half the real rows are red
    dead = (tmp_path / "s.dead_letter.csv").read_text().splitlines()[1:]
    reason = "not one of the domain's 3 labels"
    assert sorted(dead) == sorted([f'"purple","S","colour: {reason}"', f'"red","XL","size: {reason}"'])


@pytest.mark.parametrize("domain", [{"a": 0}, {"a": ["x", "x"]}, {"a": 2.5}, [], {"a": []}])
def test_a_bad_domain_file_is_one_line(tmp_path, domain):
    (tmp_path / "d.csv").write_text("a\n0\n")
    (tmp_path / "domain.json").write_text(json.dumps(domain))
    args = {"--input": str(tmp_path / "d.csv"), "--domain": str(tmp_path / "domain.json"), "--epsilon": "1",
            "--output": str(tmp_path / "s.csv")}  # fmt: skip
    assert_usage_error("pipelines.synthesize", args, "domain.json")


def test_the_progress_bar_redraws_one_line_and_ends_it_at_the_last_call(capsys):
    console.draw_progress("AIM: rho spent", 0.25, 0.5)
    console.draw_progress("MWEM: rounds", 3, 10)
    # Each drawing clears what is left of the line (\x1b[K): a shorter line leaves nothing of a longer one.
    assert capsys.readouterr().err == ("\rAIM: rho spent [" + "#" * 15 + "." * 15 + "] 50%\x1b[K"
                                       "\rMWEM: rounds [" + "#" * 9 + "." * 21 + "] 3 of 10\x1b[K")  # fmt: skip
    console.draw_progress("MWEM: rounds", 10, 10)
    assert capsys.readouterr().err.endswith("] 10 of 10\x1b[K\n")


@pytest.mark.parametrize("method", ["aim", "mwem"])
def test_each_generator_tells_its_progress_and_ends_with_all_done(method):
    """The generators' own calls: how far, never past the total, and a last call with done == total (AIM's last
    round spends rho less a hair: a bar that waited for exactly 1 never ended its line, and the summary line
    went on after it: "100% of rhowrote 53,946 rows")."""
    rng = np.random.default_rng(3)  # test-only
    a = rng.integers(0, 3, 2000)
    b = (a + rng.integers(0, 2, 2000)) % 4
    counts = np.zeros((3, 4), np.int64)
    np.add.at(counts, (a, b), 1)
    workload = {("a", "b"): counts}
    calls = []
    progress = lambda what, done, total: calls.append((what, done, total))  # noqa: E731
    if method == "aim":
        aim.aim(workload, {"a": 3, "b": 4}, rho=0.5, rng=1, progress=progress)
    else:
        mwem.mwem(workload, {"a": 3, "b": 4}, epsilon=2.0, rounds=4, rng=1, progress=progress)
    assert calls and all(0 <= done <= total for _, done, total in calls)
    assert calls[-1][1] == calls[-1][2] and all(done < total for _, done, total in calls[:-1])


AGE = {"lower": 17, "upper": 91, "bins": 16}
INCOME = {"lower": 0, "upper": 100, "bins": 10}


def numeric_table(rows: int = 3_000) -> pa.Table:
    """age (int64, some outside [17, 91]), income (float64 with NaN, an infinity and nulls) and a code column."""
    rng = np.random.default_rng(21)  # test-only
    age = rng.integers(5, 100, rows)
    income = np.where(age > 50, rng.normal(70, 10, rows), rng.normal(30, 10, rows))
    income[[3, 40]] = np.nan
    income[41] = np.inf
    mask = np.zeros(rows, bool)
    mask[[7, 8]] = True
    return pa.table({"age": age, "income": pa.array(income, mask=mask), "c": (age > 40).astype(np.int64)})


def test_numeric_columns_come_out_as_numbers_inside_their_bins(tmp_path, caplog):
    data = numeric_table()
    pq.write_table(data, tmp_path / "d.parquet")
    (tmp_path / "domain.json").write_text(json.dumps({"age": AGE, "income": INCOME, "c": 2}))
    out = tmp_path / "out" / "s.parquet"
    args = ["--input", str(tmp_path / "d.parquet"), "--domain", str(tmp_path / "domain.json"), "--epsilon", "4",
            "--method", "mwem", "--rounds", "4", "--seed", "5", "--output", str(out),
            "--dead-letter", str(tmp_path / "s.dead_letter.csv")]  # fmt: skip
    caplog.set_level(logging.DEBUG, logger="beam_expmech.releases.passes")
    assert synthesize.main(args) == 0

    dead = pacsv.read_csv(
        tmp_path / "s.dead_letter.csv", convert_options=pacsv.ConvertOptions(strings_can_be_null=True)
    )
    reasons = sorted(dead.column("reason").to_pylist())
    assert reasons == ["income: NaN or infinite"] * 3 + ["income: null"] * 2  # never silently dropped

    age, income = data.column("age").to_numpy(), data.column("income").to_numpy(zero_copy_only=False)
    kept = np.isfinite(income) & ~np.isnan(income)  # the nulls are NaN in numpy
    clamped_age = int(np.sum(((age < 17) | (age > 91)) & kept))
    clamped_income = int(np.sum(((income < 0) | (income > 100)) & kept))
    assert clamped_age > 0
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG and "non-private" in r.getMessage()]
    assert f"{clamped_age} values of age clamped into its end bins" in debug[0]
    assert (f"{clamped_income} values of income clamped" in debug[0]) == (clamped_income > 0)
    info = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert not any("clamped" in line for line in info)  # whether any value was: at DEBUG only

    table = pq.read_table(out)
    assert table.schema.field("age").type == pa.int64() and table.schema.field("income").type == pa.float64()
    synthetic_age = table.column("age").to_numpy()
    grid = NumericGrid(17, 91, 16, integer=True)
    first, last = grid.integer_ranges
    codes = grid.codes(synthetic_age)[0]
    assert synthetic_age.min() >= 17 and synthetic_age.max() <= 91
    assert np.all((first[codes] <= synthetic_age) & (synthetic_age <= last[codes]))
    synthetic_income = table.column("income").to_numpy()
    assert synthetic_income.min() >= 0 and synthetic_income.max() <= 100
    assert np.mean(synthetic_income[synthetic_age > 60]) > np.mean(synthetic_income[synthetic_age < 30]) + 10

    manifest = json.loads((tmp_path / "out" / "s.manifest.json").read_text())
    assert manifest["numeric"] == {"age": AGE | {"type": "integer"}, "income": INCOME | {"type": "float"}}


def test_a_numeric_csv_column_is_read_as_numbers_and_written_as_floats(tmp_path):
    rows = ["x,y"] + [f"{v},{i % 2}" for i, v in enumerate((1, 2.5, 3, 9.75, -4, 20))] * 40 + ["abc,1", "nan,0"]
    (tmp_path / "d.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "domain.json").write_text(json.dumps({"x": {"lower": 0, "upper": 10, "bins": 5}, "y": 2}))
    out = tmp_path / "out" / "s.csv"
    args = ["--input", str(tmp_path / "d.csv"), "--domain", str(tmp_path / "domain.json"), "--epsilon", "2",
            "--method", "mwem", "--rounds", "2", "--seed", "4", "--output", str(out),
            "--dead-letter", str(tmp_path / "s.dead_letter.csv")]  # fmt: skip
    assert synthesize.main(args) == 0
    x = pacsv.read_csv(out).column("x")
    assert x.type == pa.float64() and pa.compute.min(x).as_py() >= 0 and pa.compute.max(x).as_py() <= 10
    dead = (tmp_path / "s.dead_letter.csv").read_text().splitlines()[1:]
    assert sorted(dead) == [
        '"abc","1","x: not a number"',
        '"nan","0","x: not a number"',
    ]  # NaN as CSV text is no number
    assert json.loads((tmp_path / "out" / "s.manifest.json").read_text())["numeric"]["x"]["type"] == "float"


def test_a_declared_integer_column_of_a_csv_comes_out_as_integers_inside_its_bins(tmp_path):
    """A CSV holds text: without a type its numbers come back as floats (35.641...); "type": "integer" reads
    them as integers and draws integers inside their bins. A tab-separated file, --delimiter as a shell
    passes a tab (two characters, a backslash and t)."""
    rng = np.random.default_rng(8)  # test-only
    ages = rng.integers(17, 92, 600)
    rows = ["age\tc"] + [f"{a}\t{int(a > 50)}" for a in ages] + ["35.5\t0"]
    (tmp_path / "d.tsv").write_text("\n".join(rows) + "\n")
    (tmp_path / "domain.json").write_text(json.dumps({"age": AGE | {"type": "integer"}, "c": 2}))
    out = tmp_path / "out" / "s.csv"
    args = ["--input", str(tmp_path / "d.tsv"), "--format", "csv", "--delimiter", "\\t", "--domain",
            str(tmp_path / "domain.json"), "--epsilon", "2", "--method", "mwem", "--rounds", "2", "--seed", "4",
            "--output", str(out), "--dead-letter", str(tmp_path / "s.dead_letter.csv")]  # fmt: skip
    assert synthesize.main(args) == 0
    age = pacsv.read_csv(out).column("age")
    assert age.type == pa.int64() and len(age) > 0
    grid = NumericGrid(17, 91, 16, integer=True)
    first, last = grid.integer_ranges
    codes = grid.codes(age.to_numpy())[0]
    assert np.all((first[codes] <= age.to_numpy()) & (age.to_numpy() <= last[codes]))
    dead = (tmp_path / "s.dead_letter.csv").read_text().splitlines()[1:]
    assert dead == ['"35.5","0","age: not an integer"']
    assert json.loads((tmp_path / "out" / "s.manifest.json").read_text())["numeric"]["age"]["type"] == "integer"


@pytest.mark.parametrize(
    "column,declared,message",
    [
        ("age", "float", "column 'age' holds integers, but"),  # integers declared float
        ("income", "integer", "column 'income' holds floating-point numbers, but"),
    ],
)
def test_a_column_typed_otherwise_than_declared_is_refused_before_the_charge(tmp_path, column, declared, message):
    pq.write_table(numeric_table(100), tmp_path / "d.parquet")
    grid = {"age": AGE, "income": INCOME}[column] | {"type": declared}
    (tmp_path / "domain.json").write_text(json.dumps({column: grid, "c": 2}))
    ledger = Ledger(str(tmp_path / "ledger.json"))
    ledger.init("d", epsilon=5.0, delta=1e-6)
    args = {"--input": str(tmp_path / "d.parquet"), "--domain": str(tmp_path / "domain.json"), "--epsilon": "1",
            "--output": str(tmp_path / "s.csv"), "--budget-ledger": ledger.path, "--dataset-id": "d"}  # fmt: skip
    assert_usage_error(
        "pipelines.synthesize", args, f"{message} {tmp_path / 'domain.json'} declares its type {declared}"
    )
    assert ledger.dataset("d")["releases"] == [] and not (tmp_path / "s.csv").exists()


@pytest.mark.parametrize(
    "entry,message",
    [
        ({"lower": 5, "upper": 5, "bins": 2}, "column 'age': lower must be below upper"),
        ({"lower": 91, "upper": 17, "bins": 2}, "lower must be below upper"),
        ({"lower": -1e308, "upper": 1e308, "bins": 2}, "too wide for floating point"),
        ({"lower": float("nan"), "upper": 91, "bins": 2}, "lower must be finite"),
        ({"lower": 17, "upper": float("inf"), "bins": 2}, "upper must be finite"),
        ({"lower": 17, "upper": 91, "bins": 0}, "bins must be between 1 and 10,000"),
        ({"lower": 17, "upper": 91, "bins": 10_001}, "bins must be between 1 and 10,000"),
        ({"lower": 17, "upper": 91, "bins": 2.5}, "bins must be an integer"),
        ({"lower": 17, "upper": 91, "bins": "16"}, "bins must be an integer"),
        ({"lower": 17, "upper": 91, "bins": 16, "step": 1}, "column 'age': unknown key 'step'"),
        ({"lower": 17, "upper": 91}, "the grid needs 'bins'"),
        ({"lower": 17, "upper": 20, "bins": 10}, "holds no integer"),  # the input's age holds integers
        ({"lower": "17", "upper": 91, "bins": 2}, "lower must be a number"),
        ({"lower": 17, "upper": 91, "bins": 2, "type": "int"}, 'type must be "integer" or "float", got \'int\''),
    ],
)
def test_a_bad_numeric_entry_stops_before_any_data_or_budget(tmp_path, entry, message):
    assert_refused_before_spending(tmp_path, entry, message)  # NaN and Infinity: Python's JSON


def assert_refused_before_spending(tmp_path, age, message: str) -> None:
    """synthesize with ``age``'s domain entry exits 2 with ``message``, nothing charged, nothing written."""
    pq.write_table(numeric_table(100), tmp_path / "d.parquet")
    (tmp_path / "domain.json").write_text(json.dumps({"age": age, "c": 2}))
    ledger = Ledger(str(tmp_path / "ledger.json"))
    ledger.init("d", epsilon=5.0, delta=1e-6)
    args = {"--input": str(tmp_path / "d.parquet"), "--domain": str(tmp_path / "domain.json"), "--epsilon": "1",
            "--output": str(tmp_path / "s.csv"), "--budget-ledger": ledger.path, "--dataset-id": "d"}  # fmt: skip
    assert_usage_error("pipelines.synthesize", args, message)
    assert ledger.dataset("d")["releases"] == [] and not (tmp_path / "s.csv").exists()


def test_a_numeric_entry_on_a_text_column_is_refused_from_the_schema(tmp_path):
    pq.write_table(pa.table({"age": ["17", "30"], "c": [0, 1]}), tmp_path / "d.parquet")
    (tmp_path / "domain.json").write_text(json.dumps({"age": AGE, "c": 2}))
    args = {"--input": str(tmp_path / "d.parquet"), "--domain": str(tmp_path / "domain.json"), "--epsilon": "1",
            "--output": str(tmp_path / "s.csv")}  # fmt: skip
    assert_usage_error("pipelines.synthesize", args, "column 'age' holds text, but")
    assert not (tmp_path / "s.csv").exists()


@pytest.mark.parametrize("method", ["aim", "mwem"])
def test_private_edges_are_released_at_quantiles_and_charged_with_the_synthesis_once(tmp_path, method):
    rng = np.random.default_rng(22)  # test-only
    age = np.concatenate([rng.integers(18, 30, 1_500), rng.integers(60, 80, 1_500)])
    pq.write_table(pa.table({"age": age, "c": (age > 50).astype(np.int64)}), tmp_path / "d.parquet")
    entry = {"lower": 0, "upper": 120, "bins": "private", "count": 4, "share": 0.25}
    (tmp_path / "domain.json").write_text(json.dumps({"age": entry, "c": 2}))
    ledger = Ledger(str(tmp_path / "ledger.json"))
    ledger.init("d", epsilon=20.0, delta=1e-6)
    out = tmp_path / "s.parquet"
    delta = ["--delta", "1e-8"] if method == "aim" else []  # mwem is pure epsilon-DP: no --delta
    args = ["--input", str(tmp_path / "d.parquet"), "--domain", str(tmp_path / "domain.json"), "--epsilon", "8",
            *delta, "--method", method, "--rounds", "3", "--seed", "6",
            "--output", str(out), "--budget-ledger", ledger.path, "--dataset-id", "d"]  # fmt: skip
    assert synthesize.main(args) == 0

    manifest = json.loads((tmp_path / "s.manifest.json").read_text())
    stated = manifest["numeric"]["age"]
    assert stated["edges_epsilon"] == 2.0 and stated["type"] == "integer" and stated["bins"] == 4
    edges = np.array(stated["edges"])
    assert edges[0] == 0 and edges[-1] == 120 and np.all(np.diff(edges) > 0) and np.all(edges == np.round(edges))
    assert 18 <= edges[2] <= 80  # the median lies between the two groups at epsilon 2 on 3,000 rows
    assert not list(tmp_path.glob("*edges*"))  # the edges are in the manifest

    (release,) = ledger.dataset("d")["releases"]  # one charge for the edges and the synthesis
    assert release["epsilon"] == pytest.approx(8.0)
    if method == "aim":  # the edges' epsilon 2 leaves AIM more by basic composition than the zCDP route would
        assert release["delta"] == 1e-8 and release["rho"] is None and manifest["rho"] is None
        assert manifest["composition"]["route"] == "basic"
        assert manifest["composition"]["aim_rho"] == pytest.approx(epsilon_to_zcdp(6, delta=1e-8))

    table = pq.read_table(out)
    grid = NumericGrid(0, 120, 4, integer=True, cuts=tuple(edges[1:-1]))
    values = table.column("age").to_numpy()
    first, last = grid.integer_ranges
    codes = grid.codes(values)[0]
    assert np.all((first[codes] <= values) & (values <= last[codes])) and values.min() >= 0 and values.max() <= 120

    real = np.bincount(grid.codes(age)[0], minlength=4) / age.size
    synthetic = np.bincount(codes, minlength=4) / values.size
    error = np.abs(real - synthetic).sum()
    run = evaluate_one_way(tmp_path / "d.parquet", tmp_path / "domain.json", out)
    assert f"average L1 error {error:.4f}" in run  # evaluate_synthetic reads the edges from the manifest


@pytest.mark.parametrize("share,route", [(0.3, "basic"), (0.01, "zcdp")])
def test_aim_beside_private_edges_takes_the_larger_rho_and_the_ledger_records_what_the_run_charged(
    tmp_path, share, route
):
    """At epsilon 1, delta 1e-9 edges of share 0.3 cost 75% of the zCDP route's rho: basic composition leaves AIM
    2.03 times more. A share of 0.01 costs little rho, and the zCDP route leaves more. Either way the ledger
    records the charge of the route taken, which fits the run's budget (issue 34, 6a)."""
    rng = np.random.default_rng(24)  # test-only
    age = rng.integers(18, 90, 2_000)
    pq.write_table(pa.table({"age": age, "c": (age > 50).astype(np.int64)}), tmp_path / "d.parquet")
    entry = {"lower": 0, "upper": 120, "bins": "private", "count": 4, "share": share}
    (tmp_path / "domain.json").write_text(json.dumps({"age": entry, "c": 2}))
    ledger = Ledger(str(tmp_path / "ledger.json"))
    ledger.init("d", epsilon=1.0, delta=1e-9)
    args = ["--input", str(tmp_path / "d.parquet"), "--domain", str(tmp_path / "domain.json"), "--epsilon", "1",
            "--delta", "1e-9", "--method", "aim", "--rounds", "2", "--seed", "6", "--output", str(tmp_path / "s.csv"),
            "--budget-ledger", ledger.path, "--dataset-id", "d"]  # fmt: skip
    assert synthesize.main(args) == 0

    stated = json.loads((tmp_path / "s.manifest.json").read_text())["composition"]
    by_zcdp = epsilon_to_zcdp(1, delta=1e-9) - share**2 / 8
    by_basic = epsilon_to_zcdp(1 - share, delta=1e-9)
    assert stated["route"] == route and stated["aim_rho"] == pytest.approx(max(by_zcdp, by_basic), rel=1e-12)
    assert stated["edges_epsilon"] == pytest.approx(share) and stated["edges_rho"] == pytest.approx(share**2 / 8)
    (release,) = ledger.dataset("d")["releases"]
    charged = Release.approximate(1 - share, 1e-9, "aim") if route == "basic" else Release.zcdp(by_zcdp, "aim")
    expected = compose([charged, Release.exponential_mechanism(share)], "run")
    assert (release["epsilon"], release["delta"]) == (expected.epsilon, expected.delta)
    assert release["rho"] == pytest.approx(expected.rho) if route == "zcdp" else release["rho"] is None
    assert release["status"] == "done"
    assert budget_of(ledger.dataset("d")).remaining() == pytest.approx(0, abs=1e-9)  # the run's whole budget


def test_private_edges_with_a_unit_are_the_quantiles_of_k_rows_a_unit(tmp_path):
    # Each user holds K = 3 rows, so bounding keeps them all: the edges are then exactly the seeded draw of
    # JointExp with max_rows 3 (sensitivity 2K) on the whole column; with K taken as 1 they would not be.
    rng = np.random.default_rng(23)  # test-only
    age = np.repeat(rng.integers(18, 90, 400), 3)
    users = np.repeat(np.arange(400), 3)
    pq.write_table(pa.table({"user": users, "age": age, "c": (age > 50).astype(np.int64)}), tmp_path / "d.parquet")
    entry = {"lower": 0, "upper": 120, "bins": "private", "count": 4, "share": 0.5}
    (tmp_path / "domain.json").write_text(json.dumps({"age": entry, "c": 2}))
    args = ["--input", str(tmp_path / "d.parquet"), "--domain", str(tmp_path / "domain.json"), "--epsilon", "0.2",
            "--method", "mwem", "--rounds", "2", "--seed", "6", "--privacy-unit", "user", "--max-rows-per-unit", "3",
            "--output", str(tmp_path / "s.parquet")]  # fmt: skip
    assert synthesize.main(args) == 0
    stated = json.loads((tmp_path / "s.manifest.json").read_text())["numeric"]["age"]["edges"]

    family = HistogramCounts("age", 0, 120, JOINT_BINS)
    histogram = family.count(pa.record_batch({"age": age}))
    expected = {}
    for max_rows in (3, 1):
        step = PrivateQuantiles(epsilon=0.1, quantiles=[0.25, 0.5, 0.75], family=family, method="joint",
                                max_rows=max_rows, seed=6)  # fmt: skip
        points = np.array(list(step.release(histogram).values()))
        expected[max_rows] = NumericGrid.near(0, 120, 4, integer=True, points=points).edges.tolist()
    assert stated == expected[3] and expected[3] != expected[1]


def evaluate_one_way(*paths) -> str:
    """What evaluate_synthetic prints of the 1-way marginal of age."""
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert evaluate_synthetic.main([*(str(p) for p in paths), "--columns", "age", "--degree", "1"]) == 0
    return stdout.getvalue()


@pytest.mark.parametrize(
    "entry,message",
    [
        ({"count": 1}, "count must be an integer from 2 to 64"),
        ({"count": 65}, "count must be an integer from 2 to 64"),
        ({"count": 4.0}, "count must be an integer from 2 to 64"),
        ({"share": 0}, "share must be a number strictly between 0 and 1"),
        ({"share": 1.5}, "share must be a number strictly between 0 and 1"),
        ({"step": 1}, "unknown key 'step'"),
        ({"upper": 5, "count": 8}, "need more integers"),  # the input's age holds integers
        ({"lower": 50, "upper": 50}, "lower must be below upper"),
    ],
)
def test_a_bad_private_grid_stops_before_any_data_or_budget(tmp_path, entry, message):
    private = {"lower": 0, "upper": 120, "bins": "private", "count": 4, "share": 0.2}
    assert_refused_before_spending(tmp_path, private | entry, message)


def test_private_grids_must_leave_the_generator_some_epsilon(tmp_path):
    pq.write_table(numeric_table(100), tmp_path / "d.parquet")
    private = {"lower": 0, "upper": 120, "bins": "private", "count": 4, "share": 0.5}
    (tmp_path / "domain.json").write_text(json.dumps({"age": private, "income": private, "c": 2}))
    args = {"--input": str(tmp_path / "d.parquet"), "--domain": str(tmp_path / "domain.json"), "--epsilon": "1",
            "--output": str(tmp_path / "s.csv")}  # fmt: skip
    assert_usage_error("pipelines.synthesize", args, "shares add up to 1")
    (tmp_path / "domain.json").write_text(json.dumps({"age": private | {"count": 4, "bins": 4}}))
    assert_usage_error("pipelines.synthesize", args, "unknown key 'count'")


def test_evaluate_needs_the_manifest_that_states_private_edges(tmp_path):
    pq.write_table(numeric_table(100), tmp_path / "d.parquet")
    private = {"lower": 0, "upper": 120, "bins": "private", "count": 4, "share": 0.5}
    (tmp_path / "domain.json").write_text(json.dumps({"age": private}))
    args = [str(tmp_path / "d.parquet"), str(tmp_path / "domain.json"), str(tmp_path / "d.parquet"), "--degree", "1"]
    with pytest.raises(ValueError, match=r"private bin edges, stated in .*d\.manifest\.json, which cannot be read"):
        evaluate_synthetic.main(args)


def test_a_dry_run_states_the_private_edges_and_their_epsilon_and_spends_nothing(tmp_path, capsys):
    pq.write_table(numeric_table(100), tmp_path / "d.parquet")
    private = {"lower": 0, "upper": 120, "bins": "private", "count": 4, "share": 0.25}
    (tmp_path / "domain.json").write_text(json.dumps({"age": private, "c": 2}))
    args = ["--input", str(tmp_path / "d.parquet"), "--domain", str(tmp_path / "domain.json"), "--epsilon", "2",
            "--method", "mwem", "--output", str(tmp_path / "s.csv"), "--dry-run"]  # fmt: skip
    assert synthesize.main(args) == 0
    out = capsys.readouterr().out
    assert 'private bin edges: "age: 4 bins, epsilon 0.5"' in out and "epsilon=2 " in out
    assert not (tmp_path / "s.csv").exists() and not (tmp_path / "s.dead_letter.csv").exists()
