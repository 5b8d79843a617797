"""Atomic writes: a path is absent, as before, or complete."""

from __future__ import annotations

import os

import pytest

from beam_expmech.io import readers, writers


def test_atomic_write_replaces_whole_or_not_at_all(tmp_path, monkeypatch):
    path = tmp_path / "out" / "release.json"
    writers.write_json(str(path), {"selected": ["a"]})
    assert readers.read_json(str(path)) == {"selected": ["a"]}

    def crash(*_):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        writers.write_json(str(path), {"selected": ["b"]})
    assert readers.read_json(str(path)) == {"selected": ["a"]}  # the old release, whole
