"""Audit of what each command charges: the Release it reserves in the ledger covers the epsilon its final
step spends (whose law the other audits check against the ideal mechanism at that epsilon), and the zCDP
it claims is the exponential mechanism's epsilon^2/8 at that epsilon, never less. (select's charge is
checked against the exact Renyi divergence of its mechanism in test_audit_pipeline.py.)"""

from __future__ import annotations

import pytest

from beam_expmech.predicates import HistogramCounts
from pipelines import learn, quantiles


def check_charge(audit, subject: str, charged, spent: float) -> None:
    audit.check(subject, "epsilon the final step spends vs charged", cases=1, worst=spent, bound=charged.epsilon)
    audit.check(subject, "its epsilon^2/8 vs the rho charged", cases=1, worst=spent**2 / 8, bound=charged.rho)


@pytest.mark.parametrize("method", ["independent", "joint"])
def test_quantiles_charge_covers_its_final_step(audit, method):
    args, _ = quantiles.parse_args(["--input", "x", "--column", "v", "--quantiles", "0.25,0.5,0.75", "--method",
                                    method, "--lower", "0", "--upper", "8", "--bins", "8", "--epsilon", "1.5",
                                    "--output", "x.json"])  # fmt: skip
    step = quantiles.final_step(args, HistogramCounts(args.column, args.lower, args.upper, args.bins))
    check_charge(audit, f"pipelines.quantiles {method}: charge", step.cost, step.epsilon)


def test_learn_charge_covers_its_final_step(audit):
    args, _ = learn.parse_args(["--input", "x", "--features", "a,b", "--label", "y", "--weights", "-1,0,1",
                                "--epsilon", "0.7", "--output", "x.json"])  # fmt: skip
    step = learn.final_step(args, learn.candidate_matrix(args, len(learn.feature_columns(args))))
    check_charge(audit, "pipelines.learn: charge", step.cost, step.epsilon)
