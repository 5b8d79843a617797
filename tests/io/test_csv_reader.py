"""CSV: a malformed line is set aside by its number, never quoted, and never takes other lines with it."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_expmech.io import readers
from beam_expmech.io.errors import InputError
from beam_expmech.io.validation import REASON, MalformedRows
from beam_expmech.releases import Files

SECRET = "secret-ssn-123-45-6789"


def test_a_malformed_csv_row_is_set_aside_by_its_row_number_never_quoted(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text(f'user,item\n1,2\n"{SECRET}",30,EXTRA\n7\n3,4\n')
    assert readers.column_types(str(path), "csv") == {"user": pa.binary(), "item": pa.binary()}  # despite the bad rows
    read = list(readers.read_split((str(path), "csv", None), ["user", "item"]))
    rows = pa.Table.from_batches([b for b in read if isinstance(b, pa.RecordBatch)])
    assert rows.column("user").to_pylist() == [b"1", b"3"]
    malformed = pa.concat_tables([b.rows for b in read if isinstance(b, MalformedRows)])
    assert malformed.column(REASON).to_pylist() == [
        f"malformed CSV row: expected 2 fields, got 3 (row 3 of {path})",
        f"malformed CSV row: expected 2 fields, got 1 (row 4 of {path})",
    ]
    assert malformed.column("user").null_count == 2  # which field is which cannot be told


def test_a_malformed_row_that_is_not_utf8_costs_that_row_only(tmp_path, capfd):
    # pyarrow cannot hand such a row to the handler (it decodes it first): it is parsed alone, and set aside.
    latin1 = tmp_path / "latin1.csv"
    latin1.write_bytes(f'user,item\n1,2\n"{SECRET}",30,caf\xe9\n3,4\n'.encode("latin-1"))
    assert readers.column_types(str(latin1), "csv") == {"user": pa.binary(), "item": pa.binary()}
    read = list(readers.read_split((str(latin1), "csv", None), ["user", "item"]))
    rows = pa.Table.from_batches([b for b in read if isinstance(b, pa.RecordBatch)])
    assert sorted(rows.column("user").to_pylist()) == [b"1", b"3"]
    (malformed,) = [b.rows for b in read if isinstance(b, MalformedRows)]
    assert malformed.column(REASON).to_pylist() == [
        f"malformed CSV row: not one record (a row of the wrong width that is not UTF-8 text) (row 3 of {latin1})"
    ]
    printed = capfd.readouterr()
    assert SECRET not in printed.out + printed.err and "0xe9" not in printed.err  # nor Python's own report


@pytest.mark.parametrize(
    "line",
    ['"x,victim', 'x","y', '"unclosed', 'a,"b'],
)
def test_an_unclosed_quote_never_swallows_the_lines_after_it(tmp_path, line):
    """One person's line with an unclosed quote once turned every later line into part of its value:
    the other people's rows were gone, not even in the dead letter. Each line is at most one record."""
    others = "".join(f"b,{unit}\n" for unit in range(1000))
    path = tmp_path / "data.csv"
    path.write_text(f"item,user\n{others}{line}\n{others}")
    read = list(readers.read_split((str(path), "csv", None), ["item", "user"]))
    rows = pa.Table.from_batches([b for b in read if isinstance(b, pa.RecordBatch)])
    set_aside = sum(b.rows.num_rows for b in read if isinstance(b, MalformedRows))
    assert rows.column("item").to_pylist().count(b"b") == 2000
    assert rows.num_rows + set_aside == 2001  # the line itself: one record, or set aside


def test_csv_values_like_na_or_null_are_values(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text('item,user\nNA,1\nnull,2\nNaN,3\n,4\n"",5\n')
    (batch,) = readers.read_split((str(path), "csv", None), ["item", "user"])
    assert batch.column("item").to_pylist() == [b"NA", b"null", b"NaN", None, None]


@pytest.mark.parametrize("delimiter", [";", "\t", "|"])
def test_a_file_of_another_delimiter_reads_as_its_comma_separated_twin(tmp_path, delimiter):
    rows = [["user", "item"], ["1", "a,b"], ["2", f'"x{delimiter}y"'], ["3", ""], ["4", "c"]]
    path = tmp_path / "data.csv"
    path.write_text("".join(delimiter.join(row) + "\n" for row in rows))
    assert readers.check_columns([str(path)], None, ["user", "item"], delimiter=delimiter) == {
        "user": "text",
        "item": "text",
    }
    (batch,) = readers.read_split((str(path), "csv", None), ["user", "item"], delimiter)
    assert batch.column("item").to_pylist() == [b"a,b", f"x{delimiter}y".encode(), None, b"c"]
    assert batch.column("user").to_pylist() == [b"1", b"2", b"3", b"4"]


def test_a_semicolon_file_read_with_commas_says_which_delimiter_it_seems_to_have(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text("user;item\n1;a\n")
    with pytest.raises(
        InputError, match="missing column 'user' \\(the header is one field holding ';': is that the delimiter"
    ):
        readers.check_columns([str(path)], None, ["user", "item"])


def test_a_delimiter_for_a_file_that_is_not_csv_is_refused_not_ignored(tmp_path):
    path = tmp_path / "data.parquet"
    pq.write_table(pa.table({"user": [1], "item": ["a"]}), path)
    with pytest.raises(InputError, match="a delimiter is for CSV files, and this file is parquet"):
        readers.check_columns([str(path)], None, ["user", "item"], delimiter=";")


@pytest.mark.parametrize("delimiter", ["", ";;", '"', "\n", "\r", "\u00e9", "\x00", "\x1f", 5])
def test_a_delimiter_is_one_ascii_character_that_is_no_quote_or_line_end(delimiter):
    with pytest.raises(ValueError, match="a CSV delimiter is one ASCII character"):
        Files("data.csv", delimiter=delimiter)


def test_a_first_line_that_is_a_row_is_not_described(tmp_path):
    """No header: the first line is someone's row. The hint names a separator only where splitting the line at it
    gives the needed columns' names, so it never tells what a row holds."""
    path = tmp_path / "data.csv"
    path.write_text("alice|secret\nbob|other\n")
    with pytest.raises(InputError) as refused:
        readers.check_columns([str(path)], None, ["user", "item"])
    assert str(refused.value) == f"{path}: missing column 'user'"
