"""Every command's release and manifest, under a test seed, byte for byte as recorded in tests/data/golden/.

The recorded bytes were written by the commands before the declared release (beam_expmech/release.py) took
them over (issue 35: "every command keeps its flags and its bytes"); a change that means to change what a
command releases writes them again, on purpose and in the same commit:

    GOLDEN_WRITE=1 .venv/bin/python -m pytest tests/pipelines/test_release_bytes.py

The data are generated here (seeded), so the bytes depend on the code alone.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest
from beam_data import write

from pipelines import learn, quantiles, select, synthesize

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
WRITE = os.environ.get("GOLDEN_WRITE") == "1"


def _table(rows: int = 3_000) -> pa.Table:
    """(user_id, item, category, amount, a, b, y): units of several rows, Zipf-like items and categories, bits."""
    rng = np.random.default_rng(35)
    item = np.minimum(rng.zipf(1.5, rows) - 1, 39)
    bits = rng.integers(0, 2, (3, rows))
    return pa.table(
        {
            "user_id": rng.integers(0, 400, rows),
            "item": item.astype(np.int64),
            "category": pa.array([f"c{v}" for v in np.minimum(rng.zipf(1.6, rows), 30)]),
            "amount": np.round(rng.gamma(2.0, 10.0, rows), 2),
            "a": bits[0],
            "b": bits[1],
            "y": (bits[0] | bits[2]).astype(np.int64),
        }
    )


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("golden")
    table = _table()
    write(table, folder / "data.parquet", "parquet")
    (folder / "candidates.txt").write_text("".join(f"c{i}\n" for i in range(1, 25)))
    domain = {"category": [f"c{i}" for i in range(1, 31)], "a": 2, "b": 2, "y": 2,
              "amount": {"lower": 0, "upper": 100, "bins": 8}}  # fmt: skip
    (folder / "domain.json").write_text(json.dumps(domain))
    private = {**domain, "amount": {"lower": 0, "upper": 100, "bins": "private", "count": 4, "share": 0.3}}
    (folder / "private.json").write_text(json.dumps(private))
    return folder


UNIT = ["--privacy-unit", "user_id", "--max-rows-per-unit", "3"]
CASES = {
    "select_range": (select, ["--column", "item", "--candidate-range", "0:40", *UNIT, "--epsilon", "1",
                              "--top-k", "3"]),
    "select_candidates_pf": (select, ["--column", "category", "--candidates", "{data}/candidates.txt",
                                      "--mechanism", "permute-and-flip", "--epsilon", "0.5"]),
    "select_keys_laplace": (select, ["--column", "category", *UNIT, "--max-keys-per-unit", "2", "--epsilon", "1",
                                     "--delta", "1e-6", "--top-k", "3"]),
    "select_keys_exponential": (select, ["--column", "category", *UNIT, "--epsilon", "1", "--delta", "1e-6",
                                         "--top-k", "2", "--mechanism", "keys-then-exponential"]),
    "select_keys_limited": (select, ["--column", "category", "--epsilon", "1", "--delta", "1e-6", "--top-k", "3",
                                     "--mechanism", "limited-domain"]),
    "quantiles_independent": (quantiles, ["--column", "amount", "--lower", "0", "--upper", "100", "--quantiles",
                                          "0.1,0.5,0.9", *UNIT, "--epsilon", "1", "--bins", "1024"]),
    "quantiles_joint": (quantiles, ["--column", "amount", "--lower", "0", "--upper", "100", "--quantiles",
                                    "0.25,0.75", "--epsilon", "1", "--method", "joint"]),
    "learn": (learn, ["--features", "a,b", "--label", "y", "--weights=-1,0,1", *UNIT, "--epsilon", "1"]),
    "synthesize_aim": (synthesize, ["--domain", "{data}/domain.json", *UNIT, "--method", "aim", "--epsilon", "1",
                                    "--rows", "300"]),
    "synthesize_auto": (synthesize, ["--domain", "{data}/domain.json", *UNIT, "--epsilon", "1", "--rows", "300"]),
    "synthesize_mwem": (synthesize, ["--domain", "{data}/domain.json", "--columns", "category,a,y",
                                     "--method", "mwem", "--rounds", "4", "--epsilon", "1"]),
    "synthesize_blr": (synthesize, ["--domain", "{data}/domain.json", "--columns", "a,y", "--method", "blr",
                                    "--rows", "12", "--epsilon", "1"]),
    "synthesize_private_bins": (synthesize, ["--domain", "{data}/private.json", "--columns", "amount,a,y",
                                             "--method", "aim", "--epsilon", "1", "--rows", "200"]),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_release_and_manifest_bytes_are_as_recorded(case, data, tmp_path):
    command, flags = CASES[case]
    synthetic = command is synthesize
    out = tmp_path / ("release.csv" if synthetic else "release.json")
    argv = ["--input", str(data / "data.parquet"), *(f.format(data=data) for f in flags), "--seed", "11",
            "--output", str(out)]  # fmt: skip
    assert command.main(argv) == 0
    written = {f"{case}.release{out.suffix}": out.read_bytes()}
    if synthetic:
        written[f"{case}.manifest.json"] = (tmp_path / "release.manifest.json").read_bytes()
    for name, content in written.items():
        if WRITE:
            GOLDEN.mkdir(exist_ok=True)
            (GOLDEN / name).write_bytes(content)
        assert content == (GOLDEN / name).read_bytes(), f"{name} differs from the recorded release"
    if synthetic:  # the recorded table is a table of the declared columns (not an empty file)
        assert pacsv.read_csv(out).num_rows > 0
