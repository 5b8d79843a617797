"""A release's format follows its name: JSON, or a table (CSV, Parquet) with its manifest beside it."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from beam_expmech.io import readers, release_files, writers
from beam_expmech.io.release_files import (
    manifest_path,
    result_format,
    result_table,
    table_format,
    write_result,
    writes_manifest,
)

SELECTION = {"selected": ["b", "a, the second", 'c "quoted"']}
QUANTILES = {"quantiles": {"0.1": 3.25, "0.5": 7.0, "0.9": -1e300}}
HALFSPACE = {"weights": [-1, 0.5, 2], "features": ["x1", "x2", "x3"]}
RESULTS = [SELECTION, QUANTILES, HALFSPACE]


def document_of(result: dict) -> dict:
    """A release's JSON document: the result, then public fields (as the pipelines' are)."""
    return {**result, "epsilon": 1.0, "mechanism": "test"}


@pytest.mark.parametrize(
    ("path", "fmt"),
    [
        ("sel.json", "json"),
        ("out/sel.csv", "csv"),
        ("/abs/sel.parquet", "parquet"),
        ("SEL.JSON", "json"),
        ("sel.Csv", "csv"),
        ("gs://bucket/folder/sel.PARQUET", "parquet"),
        ("file:///tmp/a.b/sel.csv", "csv"),
    ],
)
def test_a_results_format_is_its_extension_in_any_case_on_any_file_system(path, fmt):
    assert result_format(path) == fmt


@pytest.mark.parametrize(
    ("path", "fmt"), [("t.parquet", "parquet"), ("gs://b/t.CSV", "csv"), ("file:///t.Avro", "avro"), ("T.AVRO", "avro")]
)
def test_a_tables_format_is_its_extension(path, fmt):
    assert table_format(path) == fmt


@pytest.mark.parametrize(
    "path", ["x.avro", "x", "x.csv.gz", "x.pq", "gs://bucket.csv/x", "folder.json/", ".json", "x.manifest.json.bak"]
)
def test_a_result_named_for_another_format_or_none_is_refused_in_one_line_naming_what_is_allowed(path):
    with pytest.raises(ValueError) as refused:
        result_format(path)
    assert str(refused.value) == (
        f"output must end in .json, .csv or .parquet (the release's format follows its name), got {path!r}"
    )


@pytest.mark.parametrize("path", ["t.json", "t.pq", "t", "gs://b/t.avro.tmp"])
def test_a_table_named_for_another_format_or_none_is_refused_naming_the_flag(path):
    with pytest.raises(ValueError) as refused:
        table_format(path, name="--output")
    assert str(refused.value) == (
        f"--output must end in .parquet, .csv or .avro (the release's format follows its name), got {path!r}"
    )


def test_a_refusal_stays_one_line_whatever_the_name_holds():
    with pytest.raises(ValueError) as refused:
        result_format("line\nbreak.txt")
    assert "\n" not in str(refused.value) and "'line\\nbreak.txt'" in str(refused.value)


def test_a_format_is_read_from_the_name_alone(tmp_path):
    """Nothing need exist: neither the folder, nor a file, nor a reachable bucket (it is asked before the charge)."""
    assert result_format(str(tmp_path / "no" / "such" / "folder" / "sel.csv")) == "csv"
    assert table_format("gs://no-such-bucket-anywhere/t.avro") == "avro"
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize(
    ("path", "manifest"),
    [
        ("sel.csv", "sel.manifest.json"),
        ("out/SEL.PARQUET", "out/SEL.manifest.json"),
        ("gs://b/a.b/t.avro", "gs://b/a.b/t.manifest.json"),
        ("x.manifest.json", "x.manifest.manifest.json"),
        ("x.json", "x.manifest.json"),
    ],
)
def test_a_manifest_lies_beside_its_release_under_its_stem_never_at_the_release_itself(path, manifest):
    assert manifest_path(path) == manifest != path


@pytest.mark.parametrize(
    ("path", "beside"),
    [("sel.json", False), ("SEL.JSON", False), ("sel.csv", True), ("gs://b/sel.Parquet", True), ("t.avro", True)],
)
def test_every_release_but_a_json_document_has_a_manifest_beside_it(path, beside):
    assert writes_manifest(path) is beside


def test_a_selections_table_ranks_its_labels_best_first():
    table = result_table(SELECTION)
    assert table.schema == pa.schema([("rank", pa.int64()), ("selected", pa.string())])
    assert table.to_pydict() == {"rank": [1, 2, 3], "selected": SELECTION["selected"]}


def test_an_empty_selection_is_a_table_of_no_rows_with_its_columns():
    table = result_table({"selected": []})
    assert table.num_rows == 0 and table.schema == pa.schema([("rank", pa.int64()), ("selected", pa.string())])


def test_quantiles_table_each_level_as_a_number_beside_its_value():
    table = result_table(QUANTILES)
    assert table.schema == pa.schema([("quantile", pa.float64()), ("value", pa.float64())])
    assert table.to_pydict() == {"quantile": [0.1, 0.5, 0.9], "value": [3.25, 7.0, -1e300]}


def test_a_halfspaces_table_gives_each_feature_its_weight():
    table = result_table(HALFSPACE)
    assert table.schema == pa.schema([("feature", pa.string()), ("weight", pa.float64())])
    assert table.to_pydict() == {"feature": ["x1", "x2", "x3"], "weight": [-1.0, 0.5, 2.0]}


@pytest.mark.parametrize(
    ("result", "says"),
    [
        ({"selected": ["a"], "epsilon": 1.0}, "a result holds"),
        ({"weights": [1.0]}, "a result holds"),
        ({}, "a result holds"),
        ({"selected": ["a", 2]}, "labels must be text"),
        ({"weights": [1.0, 2.0], "features": ["x1"]}, "2 weights, 1 features"),
    ],
)
def test_a_result_of_another_shape_has_no_table(result, says):
    with pytest.raises(ValueError, match=says):
        result_table(result)


def read_table(path: str, fmt: str, schema: pa.Schema) -> pa.Table:
    if fmt == "parquet":
        return pq.read_table(path)
    # CSV holds no types: read as the table was typed (3.0 is written 3, which would be read as an integer)
    return pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(column_types=schema))


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
@pytest.mark.parametrize("result", RESULTS, ids=["selection", "quantiles", "halfspace"])
def test_a_table_release_reads_back_as_its_table_with_its_manifest_beside_it(tmp_path, result, fmt):
    path = str(tmp_path / f"release.{fmt}")
    table = result_table(result)
    manifest = {"epsilon": 1.0, "format": fmt}
    write_result(path, document=document_of(result), table=table, manifest=manifest)
    assert read_table(path, fmt, table.schema).equals(table)
    assert readers.read_json(manifest_path(path)) == manifest
    assert set(os.listdir(tmp_path)) == {"release.manifest.json", f"release.{fmt}"}


def test_a_csv_release_is_the_tables_csv(tmp_path):
    path = tmp_path / "sel.csv"
    table = result_table(SELECTION)
    write_result(str(path), document=document_of(SELECTION), table=table, manifest={})
    assert path.read_bytes() == writers.table_to_csv(table)


def test_an_empty_selection_as_csv_is_its_header_alone(tmp_path):
    path = tmp_path / "sel.csv"
    write_result(str(path), document={"selected": []}, table=result_table({"selected": []}), manifest={})
    assert path.read_bytes() == b'"rank","selected"\n'


@pytest.mark.parametrize("result", RESULTS, ids=["selection", "quantiles", "halfspace"])
def test_a_json_release_is_write_jsons_bytes_and_has_no_manifest(tmp_path, result):
    document = document_of(result)
    writers.write_json(str(tmp_path / "expected.json"), document)
    write_result(str(tmp_path / "release.json"), document=document, table=result_table(result), manifest={"x": 1})
    assert (tmp_path / "release.json").read_bytes() == (tmp_path / "expected.json").read_bytes()
    assert sorted(os.listdir(tmp_path)) == ["expected.json", "release.json"]


def test_an_upper_case_extension_is_written_in_its_format(tmp_path):
    path = str(tmp_path / "SEL.PARQUET")
    table = result_table(SELECTION)
    write_result(path, document=document_of(SELECTION), table=table, manifest={"m": 1})
    assert pq.read_table(path).equals(table)
    assert readers.read_json(str(tmp_path / "SEL.manifest.json")) == {"m": 1}


@pytest.mark.parametrize("name", ["sel.avro", "sel", "sel.txt"])
def test_a_release_named_for_no_result_format_is_refused_and_nothing_is_written(tmp_path, name):
    with pytest.raises(ValueError, match=r"must end in \.json, \.csv or \.parquet"):
        write_result(str(tmp_path / name), document={}, table=result_table(SELECTION), manifest={})
    assert os.listdir(tmp_path) == []


def test_the_manifest_is_written_after_the_table(tmp_path, monkeypatch):
    """A manifest is found only beside a complete table: if the table's write fails, no manifest is written."""

    def crash(*_):
        raise OSError("disk gone")

    monkeypatch.setattr(release_files.writers, "write_table_atomically", crash)
    with pytest.raises(OSError):
        write_result(str(tmp_path / "sel.csv"), document={}, table=result_table(SELECTION), manifest={})
    assert os.listdir(tmp_path) == []
