"""The public tables of tests/data (their source: tests/data/README.md) as paths, record batches and marginals."""

from __future__ import annotations

import csv
import itertools
import json
from pathlib import Path

import numpy as np
import pyarrow as pa

from beam_expmech.predicates import MarginalWorkload

DATA = Path(__file__).resolve().parents[1] / "data"


def csv_path(name: str) -> Path:
    """The table ``name`` (nltcs, titanic) as CSV with a header."""
    return DATA / name / f"{name}.csv"


def domain_path(name: str) -> Path:
    """Its domain file, {"column": number_of_codes}."""
    return DATA / name / "domain.json"


def load(name: str, columns: int) -> tuple[pa.RecordBatch, dict[str, int]]:
    """The first ``columns`` columns of a table and their domain sizes."""
    domain = json.loads(domain_path(name).read_text())
    with open(csv_path(name)) as handle:
        reader = csv.reader(handle)
        header = next(reader)
        rows = np.array([[int(v) for v in row] for row in reader])
    cols = list(domain)[:columns]
    batch = pa.record_batch({c: rows[:, header.index(c)] for c in cols})
    return batch, {c: domain[c] for c in cols}


def marginals(batch: pa.RecordBatch, domain: dict[str, int], degree: int) -> dict:
    """Every ``degree``-way marginal's true counts."""
    workload = MarginalWorkload(list(itertools.combinations(domain, degree)), domain)
    return workload.split(workload.count(batch))
