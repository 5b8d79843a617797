"""The declared release: what it derives, what it refuses before the charge, and that the library and the command
line release the same bytes."""

from __future__ import annotations

import json
import logging
import os
import re

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from apache_beam.typehints import typehints
from beam_data import write

from beam_expmech import Budget, Halfspace, PrivacyUnit, PrivateRelease, Quantiles, Rows, Select, Synthesis
from beam_expmech.ledger import Ledger, budget_of
from beam_expmech.releases import JobFailedError
from beam_expmech.transforms import PrivateSelect
from beam_expmech.transforms.keys import PrivateTopKeys
from pipelines import select


@pytest.fixture
def data(tmp_path):
    rng = np.random.default_rng(3)
    rows = 2_000
    table = pa.table({"user": rng.integers(0, 300, rows), "item": np.minimum(rng.zipf(1.5, rows) - 1, 19),
                      "amount": rng.gamma(2.0, 10.0, rows), "a": rng.integers(0, 2, rows)})  # fmt: skip
    return write(table, tmp_path / "data.parquet", "parquet")


def declared(data, tmp_path, **changes) -> PrivateRelease:
    declaration = {"source": str(data), "unit": PrivacyUnit("user", max_rows=4), "budget": Budget(epsilon=1.0),
                   "query": Select("item", candidates=range(20), k=2), "output": str(tmp_path / "out" / "r.json"),
                   "seed": 9} | changes  # fmt: skip
    return PrivateRelease(**declaration)


def test_every_sensitivity_is_derived_from_the_unit(data, tmp_path):
    """K rows a unit: the selection's sensitivity K; keys found in the data: K rows over L keys."""
    release = declared(data, tmp_path)
    assert release.fields["sensitivity"] == 4 and release.fields["max_rows_per_unit"] == 4
    step = Select("item", candidates=range(20)).final_step(PrivacyUnit("user", max_rows=4), Budget(1.0))
    assert isinstance(step, PrivateSelect) and step.sensitivity == 4
    keys = Select("item", k=3).final_step(PrivacyUnit("user", max_rows=4, max_keys=2), Budget(1.0, delta=1e-6))
    assert isinstance(keys, PrivateTopKeys) and (keys.max_rows, keys.max_keys) == (4, 2)
    each_row = Quantiles("amount", 0, 100, [0.5]).final_step(PrivacyUnit(), Budget(1.0))
    assert each_row.max_rows == 1
    assert Halfspace(["a"], "item").final_step(PrivacyUnit("user", max_rows=7), Budget(1.0)).sensitivity == 7


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: PrivacyUnit("user"), "go together"),
        (lambda: PrivacyUnit("user", max_rows=0), "max_rows must be an integer >= 1"),
        (lambda: PrivacyUnit(max_keys=2), "max_keys goes with a unit column"),
        (lambda: PrivacyUnit(""), "empty"),
        (lambda: Budget(epsilon=0), "epsilon must be finite and > 0"),
        (lambda: Budget(epsilon=1, delta=1.5), "delta must be a number strictly between 0 and 1"),
        (lambda: Budget(epsilon=1, ledger="l.json"), "go together"),
        (lambda: Select("item", candidates=range(5, 5)), "non-empty range"),
        (lambda: Select("item", candidates=range(2**63, 2**63 + 2)), "beyond 64-bit integers"),
        (lambda: Select("item", candidates=[1, 2]), "list of labels"),
        (lambda: Select("item", mechanism="permute-and-flip"), "needs candidates"),
        (lambda: Select("item", candidates=["a"], mechanism="limited-domain"), "keys found in the data"),
        (lambda: Quantiles("amount", 5, 5, [0.5]), "lower must be below upper"),
        (lambda: Halfspace(["a", "a"], "y"), "distinct"),
        (lambda: Synthesis({"a": 2}, method="blr"), "rows is required"),
        (lambda: Synthesis({"a": 2}, method="blr", rows=5, degree=2), "degree and rounds are for aim and mwem"),
        (lambda: Synthesis({"ab": 2}, columns="ab"), "list of column names"),
        (lambda: Halfspace("ab", "y"), "list of column names"),
        (lambda: Halfspace(["a"], "y", weights=[0, 1], candidates=[[1]]), "not both"),
        (lambda: Select("item", shard_size=10), "keys found in the data have their own"),
        (lambda: Quantiles("amount", 0, 1, [0.5, 0.5000001]), "two would be released under one name"),
        (lambda: Quantiles("amount", 0, 1, "0.5"), "list of numbers"),
    ],
)
def test_a_bad_declaration_is_refused_when_made(make, message):
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"query": Select("item", k=2)}, "need a budget with delta > 0"),
        (
            {"unit": PrivacyUnit("user", max_rows=4, max_keys=2)},
            "with a selection over public candidates it would do nothing",
        ),
        ({"output": "r.avro"}, "must end in .json, .csv or .parquet"),
        ({"output": "r"}, "must end in"),
        ({"query": Synthesis({"item": 20}, rows=10), "output": "s.json"}, "must end in .parquet, .csv or .avro"),
        ({"query": Synthesis({"item": 20}, rows=10), "output": "s.avro"}, "the budget needs a delta > 0"),
        ({"query": Synthesis({"item": 20, "a b": 2}, method="mwem"), "output": "s.avro"}, "not an Avro name"),
        ({"dead_letter": "{out}/dead.csv"}, "must lie outside the output's folder"),
        ({"output": "{data}"}, "output is one of the input files"),
        ({"dead_letter": "{data}"}, "dead_letter is one of the input files"),
        ({"query": Select("user", candidates=range(3))}, "also a column the release reads"),
        ({"source": "{tmp}/nothing-*.parquet"}, "nothing-"),
        ({"budget": Budget(1.0, delta=1e-6)}, "pure epsilon-DP: the budget's delta would not be spent"),
        ({"query": Quantiles("amount", 0, 100, [0.5]), "unit": PrivacyUnit("user", 4, max_keys=2)}, "do nothing"),
        (
            {"query": Synthesis({"item": 20}, method="mwem"), "output": "s.csv", "budget": Budget(1.0, delta=1e-9)},
            "pure epsilon-DP",
        ),
        ({"output": "r.manifest.json"}, "the name a table's manifest takes"),
        ({"output": "x" * 201 + ".csv"}, "file name is over 200 bytes"),
        ({"source": "{tmp}/in.manifest.json", "output": "{tmp}/in.csv"}, "the output's manifest is one of the input"),
        ({"source": Rows(lambda p: int("alice@example.com")), "budget": Budget(1.0)}, "read failed"),
        ({"query": "top items"}, "query must be a Select"),
        ({"output": "{tmp}/nope/{up}/r.json", "source": "{tmp}/nope/{up}/nothing.parquet"}, "nothing.parquet"),
        ({"unit": PrivacyUnit("user", max_rows=10**400)}, "must be finite"),
        ({"source": Rows(lambda p: [{"user": 1, "item": 2}])}, "must return a PCollection"),
        ({"unit": "user"}, "unit a PrivacyUnit"),
    ],
)
def test_what_public_information_dooms_is_refused_before_the_charge(data, tmp_path, changes, message):
    """Refused when the release is made: no row read, and the ledger untouched."""
    ledger = tmp_path / "ledger.json"
    Ledger(str(ledger)).init("d", epsilon=5.0)
    before = ledger.read_bytes()
    write(pa.table({"user": [1], "item": [1]}), tmp_path / "in.manifest.json", "csv")
    paths = {"out": tmp_path / "out", "data": data, "tmp": tmp_path, "up": os.pardir}
    changes = {k: v.format(**paths) if isinstance(v, str) else v for k, v in changes.items()}
    if "output" in changes and "/" not in changes["output"]:
        changes["output"] = str(tmp_path / "out" / changes["output"])
    budget = changes.pop("budget", Budget(1.0))
    budget = Budget(budget.epsilon, budget.delta, ledger=str(ledger), dataset_id="d")
    with pytest.raises(Exception, match=message) as refused:
        declared(data, tmp_path, budget=budget, **changes).run()
    assert "alice" not in str(refused.value)
    assert ledger.read_bytes() == before and not (tmp_path / "out").exists()


def test_the_library_and_the_command_line_release_the_same_bytes(data, tmp_path):
    library, command = tmp_path / "library" / "r.json", tmp_path / "command" / "r.json"
    declared(data, tmp_path, output=str(library)).run()
    argv = ["--input", str(data), "--column", "item", "--candidate-range", "0:20", "--top-k", "2", "--epsilon", "1",
            "--privacy-unit", "user", "--max-rows-per-unit", "4", "--seed", "9", "--output", str(command)]  # fmt: skip
    assert select.main(argv) == 0
    assert library.read_bytes() == command.read_bytes()


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_a_table_release_holds_labels_and_its_manifest_beside_it(data, tmp_path, fmt):
    out = tmp_path / "out" / f"r.{fmt}"
    released = declared(data, tmp_path, output=str(out)).run()
    table = pacsv.read_csv(out) if fmt == "csv" else pq.read_table(out)
    assert table.column_names == ["rank", "selected"] and table.column("rank").to_pylist() == [1, 2]
    assert [str(v) for v in table.column("selected").to_pylist()] == released["selected"]
    assert json.loads((tmp_path / "out" / "r.manifest.json").read_text()) == released


def test_the_release_is_charged_once_to_the_ledger_with_its_declared_parameters(data, tmp_path):
    ledger = tmp_path / "ledger.json"
    Ledger(str(ledger)).init("d", epsilon=3.0)
    release = declared(data, tmp_path, budget=Budget(1.0, ledger=str(ledger), dataset_id="d"))
    assert "has 3 of epsilon=3 left" in release.dry_run()
    release.run()
    (record,) = Ledger(str(ledger)).dataset("d")["releases"]
    assert record["status"] == "done" and record["pipeline"] == "select"
    assert record["parameters"] | {"query": "Select", "column": "item", "k": 2, "privacy_unit": "user",
                                   "max_rows_per_unit": 4, "epsilon": 1.0} == record["parameters"]  # fmt: skip
    assert budget_of(Ledger(str(ledger)).dataset("d")).remaining() == pytest.approx(2.0)


def test_rows_of_a_pcollection_release_as_files_do(data, tmp_path):
    """The same rows as dicts in a PCollection, on the multi-process DirectRunner: the same release as the file."""
    table = pq.read_table(data)
    rows = [{"user": u, "item": i} for u, i in zip(table["user"].to_pylist(), table["item"].to_pylist(), strict=True)]
    from_rows = declared(data, tmp_path, source=Rows(lambda p: p | beam.Create(rows), identity_types={"user": int}),
                         output=str(tmp_path / "rows.json"))  # fmt: skip
    released = from_rows.run(["--direct_running_mode=multi_processing", "--direct_num_workers=2"])
    assert released == declared(data, tmp_path, output=str(tmp_path / "files.json")).run()


def test_beam_options_that_would_draw_twice_or_are_unknown_are_refused_before_the_charge(data, tmp_path):
    ledger = tmp_path / "ledger.json"
    Ledger(str(ledger)).init("d", epsilon=3.0)
    release = declared(data, tmp_path, budget=Budget(1.0, ledger=str(ledger), dataset_id="d"))
    before = ledger.read_bytes()
    with pytest.raises(ValueError, match="direct_runner_bundle_repeat"):
        release.run(["--direct_runner_bundle_repeat=2"])
    with pytest.raises(ValueError, match="--epsilom"):
        release.run(["--epsilom=0.1"])
    assert ledger.read_bytes() == before


def test_a_job_that_fails_after_the_charge_keeps_it_and_says_so(tmp_path):
    """A file whose schema reads but whose rows do not: the charge stays, the ledger marks the run failed."""
    bad = tmp_path / "bad.parquet"
    write(pa.table({"user": [1, 2], "item": [1, 2]}), bad, "parquet")
    ledger = tmp_path / "ledger.json"
    Ledger(str(ledger)).init("d", epsilon=3.0)
    release = declared(bad, tmp_path, budget=Budget(1.0, ledger=str(ledger), dataset_id="d"))
    bad.write_bytes(bad.read_bytes()[:4] + bytes(64) + bad.read_bytes()[68:])  # data pages broken, footer intact
    with pytest.raises(JobFailedError, match="budget reserved for it stays spent"):
        release.run()
    (record,) = Ledger(str(ledger)).dataset("d")["releases"]
    assert record["status"] == "failed"


def test_numpy_numbers_in_a_declaration_are_read_as_the_plain_numbers_they_are(data, tmp_path):
    """np.int64 and np.float64 where ints and floats are declared: stated as Python's, the same bytes."""
    plain = declared(data, tmp_path, query=Quantiles("amount", 0, 100, [0.5]), output=str(tmp_path / "a.json"))
    typed = declared(data, tmp_path, query=Quantiles("amount", np.int64(0), np.float64(100), [np.float64(0.5)]),
                     unit=PrivacyUnit("user", max_rows=np.int64(4)), output=str(tmp_path / "b.json"))  # fmt: skip
    assert typed.fields == plain.fields and json.dumps(typed.fields)
    plain.run(), typed.run()
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()


def test_a_table_beside_another_releases_manifest_is_refused(data, tmp_path):
    declared(data, tmp_path, output=str(tmp_path / "out" / "r.csv")).run()
    with pytest.raises(ValueError, match=r"r\.csv is beside the output"):
        declared(data, tmp_path, query=Quantiles("amount", 0, 100, [0.5]), output=str(tmp_path / "out" / "r.parquet"))


def test_quantiles_tables_hold_the_quantiles_as_declared(data, tmp_path):
    out = tmp_path / "q.parquet"
    declared(data, tmp_path, query=Quantiles("amount", 0, 100, [0.123456789, 0.9]), output=str(out)).run()
    assert pq.read_table(out).column("quantile").to_pylist() == [0.123456789, 0.9]


def test_a_path_through_a_missing_folder_and_back_is_written_where_it_was_checked(data, tmp_path):
    """out/nope/(parent)/r.json is out/r.json: checked and written there (it failed after the charge before)."""
    released = declared(data, tmp_path, output=str(tmp_path / "out" / "nope" / os.pardir / "r.json")).run()
    assert json.loads((tmp_path / "out" / "r.json").read_text()) == released


def test_another_tables_manifest_is_found_whatever_the_case_of_its_extension(data, tmp_path):
    declared(data, tmp_path, output=str(tmp_path / "out" / "u.CSV")).run()
    with pytest.raises(ValueError, match=r"u\.CSV is beside the output"):
        declared(data, tmp_path, query=Quantiles("amount", 0, 100, [0.5]), output=str(tmp_path / "out" / "u.parquet"))
    declared(data, tmp_path, output=str(tmp_path / "out" / "u.CSV")).run()  # the same release again: allowed


def test_a_manifest_that_fails_to_be_written_leaves_no_earlier_manifest_beside_the_new_table(
    data, tmp_path, monkeypatch
):
    from beam_expmech.io import release_files, writers

    out = tmp_path / "out" / "q.csv"
    declared(data, tmp_path, query=Quantiles("amount", 0, 100, [0.5]), output=str(out)).run()
    write = writers.write_atomically

    def full_disk(path, data):  # the table is written, then the manifest fails
        if path.endswith(".manifest.json"):
            raise OSError(28, "No space left on device")
        write(path, data)

    monkeypatch.setattr(release_files.writers, "write_atomically", full_disk)
    with pytest.raises(JobFailedError, match="a table written without its manifest is none"):
        declared(data, tmp_path, query=Quantiles("amount", 0, 100, [0.1, 0.9]), output=str(out)).run()
    assert not (tmp_path / "out" / "q.manifest.json").exists()  # the old one described another table


def test_a_release_from_rows_logs_the_same_at_info_on_neighbouring_rows(data, tmp_path, caplog):
    """Through the library, with Beam's own loggers at INFO too: one more row (unreadable, so dead) changes no
    line (Beam's BatchElements logged each bundle's element count)."""
    rows = [{"user": u % 300, "item": u % 20} for u in range(600)]

    def logged(elements: list, name: str) -> list:
        caplog.clear()
        with caplog.at_level(logging.INFO):
            source = Rows(lambda p: p | beam.Create(elements).with_output_types(typehints.Any),
                          identity_types={"user": int})  # fmt: skip
            declared(data, tmp_path, source=source, output=str(tmp_path / f"{name}.json")).run()
        return [(r.name, re.sub(r"localhost:\d+|\d{5,}|/\S+\.json", "#", r.getMessage())) for r in caplog.records]

    assert logged(rows, "d") == logged([*rows, (7, 8)], "d2")
    assert (tmp_path / "d.json").read_bytes() == (tmp_path / "d2.json").read_bytes()
