"""Beam transforms: read and validate batches (of files or rows), bound contributions, count, and the private
final steps (a selection, quantiles, a halfspace, synthetic data)."""

from beam_expmech.transforms.bounding import BoundContributions
from beam_expmech.transforms.counts import GatherCounts, PredicateCounts
from beam_expmech.transforms.halfspace import PrivateHalfspace
from beam_expmech.transforms.quantiles import PrivateQuantiles
from beam_expmech.transforms.read import ReadRecordBatches, ValidateBatches, WriteDeadLetter
from beam_expmech.transforms.rows import RowsToBatches
from beam_expmech.transforms.select import PrivateSelect
from beam_expmech.transforms.synthesis import PrivateSynthesis

__all__ = [
    "BoundContributions",
    "GatherCounts",
    "PredicateCounts",
    "PrivateHalfspace",
    "PrivateQuantiles",
    "PrivateSelect",
    "PrivateSynthesis",
    "ReadRecordBatches",
    "RowsToBatches",
    "ValidateBatches",
    "WriteDeadLetter",
]
