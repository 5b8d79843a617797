"""A command's release is written in the format its --output names, or refused before the charge."""

from __future__ import annotations

import json

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from beam_data import write
from commands import assert_usage_error

from beam_expmech.ledger import Ledger
from pipelines import learn, quantiles, select, synthesize


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    rng = np.random.default_rng(5)
    rows = 2_000
    a, b = rng.integers(0, 2, (2, rows))
    table = pa.table({"user": rng.integers(0, 300, rows), "item": np.minimum(rng.zipf(1.5, rows) - 1, 9),
                      "shop": pa.array([["north, \"big\"", "south\nside", "east"][v % 3] for v in range(rows)]),
                      "amount": rng.gamma(2.0, 10.0, rows), "a": a, "b": b, "y": a | b})  # fmt: skip
    return write(table, tmp_path_factory.mktemp("formats") / "data.parquet", "parquet")


def read_table(path):
    return pacsv.read_csv(path) if path.suffix == ".csv" else pq.read_table(path)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_select_writes_the_labels_as_a_table_and_the_release_beside_it(data, tmp_path, suffix):
    candidates = tmp_path / "shops.txt"
    candidates.write_text('north, "big"\neast\n')  # a label with a comma and quotes: CSV must quote it
    out = tmp_path / f"top{suffix}"
    argv = ["--input", str(data), "--column", "shop", "--candidates", str(candidates), "--epsilon", "1", "--top-k",
            "2", "--seed", "1", "--output", str(out)]  # fmt: skip
    assert select.main(argv) == 0
    table = read_table(out)
    manifest = json.loads((tmp_path / "top.manifest.json").read_text())
    assert table.column("selected").to_pylist() == manifest["selected"]
    assert sorted(manifest["selected"]) == ["east", 'north, "big"'] and manifest["top_k"] == 2


def test_quantiles_and_the_halfspace_write_their_tables(data, tmp_path):
    out = tmp_path / "q.csv"
    argv = ["--input", str(data), "--column", "amount", "--lower", "0", "--upper", "100", "--quantiles", "0.25,0.75",
            "--epsilon", "1", "--seed", "2", "--output", str(out)]  # fmt: skip
    assert quantiles.main(argv) == 0
    table = read_table(out)
    manifest = json.loads((tmp_path / "q.manifest.json").read_text())
    assert table.column("quantile").to_pylist() == [0.25, 0.75]
    assert table.column("value").to_pylist() == list(manifest["quantiles"].values())
    out = tmp_path / "w.parquet"
    argv = ["--input", str(data), "--features", "a,b", "--label", "y", "--epsilon", "1", "--seed", "3",
            "--output", str(out)]  # fmt: skip
    assert learn.main(argv) == 0
    table = read_table(out)
    assert table.column("feature").to_pylist() == ["a", "b"]
    assert table.column("weight").to_pylist() == json.loads((tmp_path / "w.manifest.json").read_text())["weights"]


def test_synthesize_writes_avro(data, tmp_path):
    domain = tmp_path / "domain.json"
    domain.write_text(json.dumps({"item": 10, "a": 2, "amount": {"lower": 0, "upper": 100, "bins": 8}}))
    out = tmp_path / "s.avro"
    argv = ["--input", str(data), "--domain", str(domain), "--method", "mwem", "--rounds", "3", "--rows", "500",
            "--epsilon", "1", "--seed", "4", "--output", str(out)]  # fmt: skip
    assert synthesize.main(argv) == 0
    with open(out, "rb") as handle:
        reader = fastavro.reader(handle)
        fields = {f["name"]: f["type"] for f in reader.writer_schema["fields"]}
        rows = list(reader)
    assert fields == {"item": "long", "a": "long", "amount": "double"} and len(rows) == 500
    assert json.loads((tmp_path / "s.manifest.json").read_text())["rows"] == 500


@pytest.mark.parametrize(
    ("command", "flags", "message"),
    [
        ("pipelines.select", {"--column": "item", "--candidate-range": "0:10", "--output": "sel.avro"},
         "must end in .json, .csv or .parquet"),
        ("pipelines.quantiles", {"--column": "amount", "--lower": "0", "--upper": "1", "--quantiles": "0.5",
                                 "--output": "q.txt"}, "must end in .json, .csv or .parquet"),
        ("pipelines.synthesize", {"--domain": "{domain}", "--output": "s.json"}, "must end in .parquet, .csv or .avro"),
    ],
)  # fmt: skip
def test_an_unknown_format_is_refused_before_the_charge(data, tmp_path, command, flags, message):
    ledger = tmp_path / "ledger.json"
    Ledger(str(ledger)).init("d", epsilon=5.0)
    before = ledger.read_bytes()
    domain = tmp_path / "domain.json"
    domain.write_text(json.dumps({"item": 10}))
    flags = {k: str(tmp_path / v) if k == "--output" else v.format(domain=domain) for k, v in flags.items()}
    flags |= {"--input": str(data), "--epsilon": "1", "--budget-ledger": str(ledger), "--dataset-id": "d"}
    assert_usage_error(command, flags, message)
    assert ledger.read_bytes() == before
