"""beam-expmech: differentially private selection and synthesis with the exponential mechanism on Apache Beam.

The declared release, the short way in: ``from beam_expmech import PrivateRelease, PrivacyUnit, Budget, Select``
(beam_expmech.releases; imported when first named, so that the mechanisms alone never import Beam).
"""

__version__ = "0.1.0"

_RELEASES = ("Budget", "Files", "Halfspace", "PrivacyUnit", "PrivateRelease", "Quantiles", "Rows", "Select",
             "Synthesis")  # fmt: skip


def __getattr__(name: str):
    if name in _RELEASES:
        from beam_expmech import releases

        return getattr(releases, name)
    raise AttributeError(f"module 'beam_expmech' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_RELEASES])
