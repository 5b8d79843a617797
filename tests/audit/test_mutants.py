"""The mutants of ``make audit-mutants`` stay planted where the code is: each snippet occurs exactly once."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

# mutants.py is a script (make audit-mutants) beside this file; imported by its path.
_SPEC = importlib.util.spec_from_file_location("mutants", Path(__file__).with_name("mutants.py"))
mutants = sys.modules["mutants"] = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(mutants)
MUTANTS, occurrences = mutants.MUTANTS, mutants.occurrences


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_every_mutant_applies_to_the_code_as_it_is(mutant):
    assert occurrences(mutant) == 1, f"{mutant.path} no longer holds the snippet this mutant replaces"
    assert mutant.old != mutant.new and mutant.tests
