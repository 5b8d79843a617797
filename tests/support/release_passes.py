"""A declared release's own data pass, run with its final step swapped for a capture (the privacy audit).

The pass is the one ``PrivateRelease.run`` builds (``Prepared.job``: its columns, family, shard size, bounding and
counting, from the declaration), read as the release reads (``passes.Reading`` of its source, matched files, unit,
dead letter and seed), by ``passes.counting_pipeline`` and ``passes.run_pipeline``: only the final step, which
would draw the release, is ``final`` instead, so that a test sees what the release's mechanism is given.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import apache_beam as beam

from beam_expmech.releases import PrivateRelease, passes


def reading(release: PrivateRelease, pipeline_args: Sequence[str] = ()) -> passes.Reading:
    """How ``release`` reads its data (as ``PrivateRelease.run`` does, on these Beam options)."""
    return passes.Reading(release.source, release.files, release.unit, release.dead_letter, tuple(pipeline_args),
                          release.seed)  # fmt: skip


def run_pass(release: PrivateRelease, final: beam.PTransform, write: Callable[[object], None],
             pipeline_args: Sequence[str] = ()) -> None:  # fmt: skip
    """``release``'s data pass (read, validate, bound, count) with ``final`` as its last step, to ``write``."""
    how = reading(release, pipeline_args)
    job = dataclasses.replace(release.prepared.job, release=final)
    passes.run_pipeline(how, passes.counting_pipeline(how, job, write))
