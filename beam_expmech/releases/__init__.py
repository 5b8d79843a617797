"""The declared release: a source, a privacy unit and its bounds, a budget, a query and an output, as data; from
them every sensitivity, the cost, the charge, the dry run, the Beam graph and the release's files
(private_release.py). One module an idea: declaration.py (unit, budget, source), queries.py (select, quantiles,
halfspace), synthesis.py, domains.py (a synthesis's domain), charges.py (the charge, the dry run), passes.py (one
data pass on Beam), runners.py (Beam's options and runners)."""

from beam_expmech.releases.declaration import Budget, Files, PrivacyUnit, Rows
from beam_expmech.releases.passes import JobFailedError
from beam_expmech.releases.private_release import PrivateRelease
from beam_expmech.releases.queries import Halfspace, Quantiles, Select
from beam_expmech.releases.synthesis import Synthesis

__all__ = [
    "Budget",
    "Files",
    "Halfspace",
    "JobFailedError",
    "PrivacyUnit",
    "PrivateRelease",
    "Quantiles",
    "Rows",
    "Select",
    "Synthesis",
]
