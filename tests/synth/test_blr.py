"""BLR: the pmf from its definition, and NLTCS (privacy and the sampler: tests/audit)."""

from __future__ import annotations

import itertools
import math
import tracemalloc
from fractions import Fraction

import numpy as np
import pytest
from public_tables import csv_path

from beam_expmech.synth.blr import (
    blr_probabilities,
    blr_synthesize,
    candidate_count,
    check_parameters,
    conjunction_queries,
    histogram_to_rows,
    query_count,
)

NLTCS = csv_path("nltcs")


def definition_pmf(data_rows, domain, m, epsilon, max_rows=1):
    """Independent of the library: every multiset of m rows, error max over conjunctions of <= 2 literals."""
    n = len(data_rows)
    cells = list(itertools.product(*[range(s) for s in domain]))
    queries = [
        (subset, values)
        for k in (1, 2)
        for subset in itertools.combinations(range(len(domain)), k)
        for values in itertools.product(*[range(domain[i]) for i in subset])
    ]

    def fraction(rows, query, size):
        subset, values = query
        return Fraction(sum(all(r[i] == v for i, v in zip(subset, values, strict=True)) for r in rows), size)

    weights = {}
    for multiset in itertools.combinations_with_replacement(range(len(cells)), m):
        synthetic = [cells[c] for c in multiset]
        error = max(abs(fraction(data_rows, q, n) - fraction(synthetic, q, m)) for q in queries)
        # u in count units scaled to n rows: -n * error, sensitivity max_rows
        weights[multiset] = math.exp(-epsilon * float(n * error) / (2 * max_rows))
    total = sum(weights.values())
    return {k: w / total for k, w in weights.items()}


def histogram_key(histogram):
    return tuple(c for c, count in enumerate(histogram) for _ in range(count))


def test_pmf_matches_the_definition():
    data_rows = [(0, 1), (1, 1), (1, 1), (0, 0), (1, 0)]
    data = np.bincount([2 * a + b for a, b in data_rows], minlength=4)
    candidates, p = blr_probabilities(data, [2, 2], rows=3, epsilon=1.5, max_rows=1)
    want = definition_pmf(data_rows, [2, 2], 3, 1.5)
    assert len(candidates) == candidate_count(4, 3) == len(want)
    for histogram, prob in zip(candidates, p, strict=True):
        assert prob == pytest.approx(want[histogram_key(histogram)], rel=1e-9)


def test_on_nltcs_columns():
    with open(NLTCS) as handle:
        next(handle)
        rows = np.array([[int(v) for v in line.split(",")[:3]] for line in handle])
    data = np.bincount(np.ravel_multi_index(rows.T, (2, 2, 2)), minlength=8)
    candidates, p = blr_probabilities(data, [2, 2, 2], rows=6, epsilon=1e4)
    best = candidates[np.argmax(p)]
    synthetic = blr_synthesize(data, [2, 2, 2], rows=6, epsilon=1e4, rng=62)
    np.testing.assert_array_equal(synthetic, best)  # a large epsilon finds the best 6-row dataset
    assert histogram_to_rows(synthetic, [2, 2, 2]).shape == (6, 3)
    small = blr_synthesize(data, [2, 2, 2], rows=6, epsilon=0.1, rng=63)
    assert small.sum() == 6 and (small >= 0).all()


def test_refuses_a_space_too_large():
    with pytest.raises(ValueError, match=r"3,268,760 candidate datasets, over the limit of 1,000,000"):
        blr_synthesize(np.ones(16, int), [2, 2, 2, 2], rows=10, epsilon=1)
    with pytest.raises(ValueError, match="epsilon"):
        blr_synthesize(np.ones(4, int), [2, 2], rows=2, epsilon=0)
    with pytest.raises(ValueError, match="histogram of 4 counts"):
        blr_synthesize(np.ones(5, int), [2, 2], rows=2, epsilon=1)


def test_the_memory_it_states_before_a_run_bounds_what_the_run_holds():
    for domain in ([2, 3], [4, 4, 4], [3, 2, 5, 2]):
        assert conjunction_queries(domain, 2).shape[1] == query_count(domain, 2)
    stated = check_parameters([4, 4, 4], rows=3)  # 45,760 candidates
    tracemalloc.start()
    try:
        blr_synthesize(np.arange(64), [4, 4, 4], rows=3, epsilon=1, rng=64)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= stated < 2 * peak
    # one candidate per cell: 10^6 x 10^6 int64, refused before any of it is allocated
    with pytest.raises(ValueError, match=r"BLR over 1,000,000 cells, rows = 1 would hold about [\d,.]+ GiB, over"):
        blr_synthesize(np.zeros(10**6, int), [1000, 1000], rows=1, epsilon=1)
