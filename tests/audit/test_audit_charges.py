"""Audit of what each declared release charges: the Release it reserves in the ledger (``PrivateRelease.cost``, the
charge ``PrivateRelease.run`` makes) covers the epsilon its final step spends (whose law the other audits check
against the ideal mechanism at that epsilon), and the zCDP it claims is the exponential mechanism's epsilon^2/8 at
that epsilon, never less. (select's charge is checked against the exact Renyi divergence of its mechanism in
test_audit_pipeline.py.) Each release is the one its command line declares."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines import learn, quantiles


def check_charge(audit, subject: str, charged, spent: float) -> None:
    audit.check(subject, "epsilon the final step spends vs charged", cases=1, worst=spent, bound=charged.epsilon)
    audit.check(subject, "its epsilon^2/8 vs the rho charged", cases=1, worst=spent**2 / 8, bound=charged.rho)


@pytest.mark.parametrize("method", ["independent", "joint"])
def test_quantiles_charge_covers_its_final_step(audit, tmp_path, method):
    pq.write_table(pa.table({"v": [1.0]}), tmp_path / "x.parquet")
    args, _ = quantiles.parse_args(["--input", str(tmp_path / "x.parquet"), "--column", "v", "--quantiles",
                                    "0.25,0.5,0.75", "--method", method, "--lower", "0", "--upper", "8", "--bins",
                                    "8", "--epsilon", "1.5", "--output", str(tmp_path / "x.json")])  # fmt: skip
    release = quantiles.declared(args)
    step = release.query.final_step(release.unit, release.budget)
    check_charge(audit, f"pipelines.quantiles {method}: charge", release.cost, step.epsilon)


def test_learn_charge_covers_its_final_step(audit, tmp_path):
    pq.write_table(pa.table({"a": [0], "b": [1], "y": [1]}), tmp_path / "x.parquet")
    args, _ = learn.parse_args(["--input", str(tmp_path / "x.parquet"), "--features", "a,b", "--label", "y",
                                "--weights", "-1,0,1", "--epsilon", "0.7",
                                "--output", str(tmp_path / "x.json")])  # fmt: skip
    release = learn.declared(args)
    step = release.query.final_step(release.unit, release.budget)
    check_charge(audit, "pipelines.learn: charge", release.cost, step.epsilon)
