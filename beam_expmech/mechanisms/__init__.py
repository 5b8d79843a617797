"""Selection mechanisms: exact, in log space, with OS randomness by default. No Beam, no files."""

from beam_expmech.mechanisms.exponential import (
    accuracy_bound,
    exponential_mechanism,
    selection_probabilities,
    top_k,
)
from beam_expmech.mechanisms.permute_and_flip import permute_and_flip, permute_and_flip_probabilities
from beam_expmech.mechanisms.randomness import RandomSource, random_source

__all__ = [
    "RandomSource",
    "accuracy_bound",
    "exponential_mechanism",
    "permute_and_flip",
    "permute_and_flip_probabilities",
    "random_source",
    "selection_probabilities",
    "top_k",
]
