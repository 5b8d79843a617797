"""The mutants of ``make audit-mutants`` stay planted where the code is: each snippet occurs exactly once."""

from __future__ import annotations

import pytest
from mutants import MUTANTS, occurrences


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_every_mutant_applies_to_the_code_as_it_is(mutant):
    assert occurrences(mutant) == 1, f"{mutant.path} no longer holds the snippet this mutant replaces"
    assert mutant.old != mutant.new and mutant.tests
