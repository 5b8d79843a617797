"""The privacy audit's record (tests/audit): every check reports the worst case it found next to its bound.

``make audit`` (``pytest tests/audit --audit-table``) prints them as one table; a check whose
worst case exceeds its bound fails its test.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

LONG = os.environ.get("BEAM_EXPMECH_AUDIT_LONG") == "1"  # make audit-long: more cases everywhere it matters


@dataclass
class Finding:
    subject: str
    check: str
    cases: int
    worst: float
    bound: float


class Audit:
    """Collects findings; ``check`` records one and fails when its worst case breaks the bound."""

    def __init__(self) -> None:
        self.findings: list[Finding] = []

    def check(self, subject: str, check: str, *, cases: int, worst: float, bound: float) -> None:
        self.findings.append(Finding(subject, check, cases, float(worst), float(bound)))
        assert cases > 0, f"{subject}: {check}: no case was tried"
        assert worst <= bound * (1 + 1e-9) + 1e-12, f"{subject}: {check}: worst {worst:.6g} > bound {bound:.6g}"

    def table(self) -> list[str]:
        """One row per (subject, check): cases summed, the worst ratio to its bound kept."""
        rows: dict[tuple[str, str], Finding] = {}
        for f in self.findings:
            key = (f.subject, f.check)
            kept = rows.get(key)
            if kept is None:
                rows[key] = Finding(f.subject, f.check, f.cases, f.worst, f.bound)
                continue
            cases = kept.cases + f.cases
            if _ratio(f) > _ratio(kept):
                kept = Finding(f.subject, f.check, cases, f.worst, f.bound)
            kept.cases = cases
            rows[key] = kept
        header = f"{'subject':<38} {'check':<46} {'cases':>9} {'worst':>11} {'bound':>11} {'worst/bound':>11}"
        lines = [header, "-" * len(header)]
        for f in rows.values():
            lines.append(f"{f.subject:<38} {f.check:<46} {f.cases:>9,} {f.worst:>11.5g} {f.bound:>11.5g} "
                         f"{_ratio(f):>11.4f}")  # fmt: skip
        return lines


def _ratio(finding: Finding) -> float:
    return finding.worst / finding.bound if finding.bound else 0.0


AUDIT = Audit()
