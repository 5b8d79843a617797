"""The real tables of ../shared/data as record batches, and their exact marginals, for the generators' tests."""

from __future__ import annotations

import csv
import itertools
import json
from pathlib import Path

import numpy as np
import pyarrow as pa

from beam_expmech.predicates import MarginalWorkload

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def load(name: str, columns: int) -> tuple[pa.RecordBatch, dict[str, int]]:
    """The first ``columns`` columns of a shared table and their domain sizes."""
    domain = json.loads((DATA / name / "domain.json").read_text())
    with open(DATA / name / f"{name}.csv") as handle:
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
