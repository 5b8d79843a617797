"""Per-key totals as select without candidates counts them: bounding (K rows over L keys a unit), then KeyCounts."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping

import apache_beam as beam

from beam_expmech.transforms import BoundContributions
from beam_expmech.transforms.keys import KEY, ROWS, UNITS, KeyCounts

_RESULTS: dict = {}


def _keep(found, key: str, name: str) -> None:
    _RESULTS.setdefault(key, {})[name] = found


def bounded_key_totals(sources: Mapping[str, Callable], max_rows: int, max_keys: int) -> dict:
    """{dataset: {key: (rows, units)}} of each dataset's validated batches (``sources[name](pipeline, name)``),
    bounded by BoundContributions ("user", K rows over L keys of "query", a test seed), then KeyCounts, on the
    in-process DirectRunner."""
    key = uuid.uuid4().hex
    with beam.Pipeline() as pipeline:
        for name, source in sources.items():
            _ = (
                source(pipeline, name)
                | f"Bound {name}"
                >> BoundContributions("user", max_rows, shards=3, key_column="query", max_keys=max_keys, seed=5)
                | f"Count {name}" >> KeyCounts("query", unit_column="user", shards=2)
                | f"Totals {name}"
                >> beam.FlatMapTuple(lambda _, t: zip(*(t[c].to_pylist() for c in (KEY, ROWS, UNITS)), strict=True))
                | f"All {name}" >> beam.combiners.ToList()
                | f"Keep {name}" >> beam.Map(lambda found, n=name: _keep({q: (r, u) for q, r, u in found}, key, n))
            )
    return _RESULTS.pop(key)
