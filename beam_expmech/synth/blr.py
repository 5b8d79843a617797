"""BLR (Blum, Ligett and Roth 2008): one exponential mechanism over whole synthetic datasets.

The candidates are every histogram y of m rows over a tiny domain (cells = the product of the
column domains), each with the same base measure (histograms, not ordered rows: a multiset
of m rows is one candidate). The query class is every conjunction of up to ``degree``
literals (column_i = v_i); with x the data's histogram over the cells, n = sum(x) and Q the
cell-by-query 0/1 matrix, a candidate scores

    u(y) = -max_h | m (Q^T x)_h - n (Q^T y)_h |      (m times the error in counts of the
                                                      synthetic data, scaled to n rows)

in exact integers. Sensitivity: one privacy unit with at most K rows moves (Q^T x)_h by some a
in [0, K] and n by K, so each term moves by m a - K (Q^T y)_h, within [-K m, K m]: D = K m
(not monotone). Privacy: epsilon-DP (and epsilon**2/8-zCDP).

Exact sampling over all C(m + cells - 1, m) candidates is feasible only on tiny domains: the
generator refuses, naming the count, beyond ``max_candidates``, and beyond ``MAX_MEMORY`` for
the (candidates x cells) and (candidates x queries) arrays it holds (``check_parameters``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from beam_expmech import parameters
from beam_expmech.mechanisms.exponential import exponential_mechanism, selection_probabilities
from beam_expmech.mechanisms.randomness import RandomLike, random_source
from beam_expmech.synth import check_memory
from beam_expmech.synth.sampling import code_dtype, split_cells

DEFAULT_MAX_CANDIDATES = 1_000_000


def conjunction_queries(domain: Sequence[int], degree: int) -> np.ndarray:
    """The 0/1 matrix (cells x queries) of every conjunction of 1 .. degree literals."""
    cells = np.array(list(itertools.product(*[range(size) for size in domain])))  # C order
    columns = []
    for k in range(1, degree + 1):
        for subset in itertools.combinations(range(len(domain)), k):
            for values in itertools.product(*[range(domain[i]) for i in subset]):
                columns.append(np.all(cells[:, list(subset)] == values, axis=1))
    return np.array(columns, dtype=np.int64).T


def candidate_count(cells: int, rows: int) -> int:
    """The number of histograms of ``rows`` rows over ``cells`` cells."""
    return math.comb(rows + cells - 1, rows)


def check_size(cells: int, rows: int, *, max_candidates: int = DEFAULT_MAX_CANDIDATES) -> int:
    """The candidate count, or a ValueError naming it when it exceeds ``max_candidates``."""
    count = candidate_count(cells, rows)
    if count > max_candidates:
        raise ValueError(
            f"BLR over {cells} cells with {rows} rows has {count:,} candidate datasets, over the limit of "
            f"{max_candidates:,}: use fewer rows or columns, or another method"
        )
    return count


def query_count(domain: Sequence[int], degree: int) -> int:
    """The number of conjunctions of 1 .. ``degree`` literals: the columns of ``conjunction_queries``."""
    exactly = [1] + [0] * degree  # exactly[k]: conjunctions of k literals over the columns seen so far
    for size in domain:
        for k in range(degree, 0, -1):
            exactly[k] += exactly[k - 1] * size
    return sum(exactly[1:])


def check_parameters(
    domain: Sequence[int],
    *,
    rows: int,
    degree: int = 2,
    max_rows: int = 1,
    max_candidates: int = DEFAULT_MAX_CANDIDATES,
) -> int:
    """Every check BLR makes from public parameters, in one place; the bytes the run will hold.

    The pipeline calls it before it spends any budget, the generator before it starts. A
    ValueError when an argument is bad, the candidates exceed ``max_candidates``, or the
    arrays (candidates x cells, cells x queries, and three of candidates x queries while
    scoring), and the synthetic rows drawn (``histogram_to_rows``) exceed ``MAX_MEMORY``.
    """
    domain = [parameters.count(size, "domain size") for size in domain]
    rows = parameters.count(rows, "rows")
    degree = parameters.count(degree, "BLR's query degree", at_most=len(domain), of="columns")
    parameters.count(max_rows, "max_rows")
    cells = math.prod(domain)
    count = check_size(cells, rows, max_candidates=max_candidates)
    queries = query_count(domain, degree)
    # candidates, the cells' codes, 3 (candidates x queries) while scoring, the queries (as bools, then int64),
    # and the mechanism's few arrays of one entry per candidate
    arrays = 8 * (count * cells + cells * len(domain) + 3 * count * queries + 8 * count) + 9 * cells * queries
    # the rows: each one's cell and a column split off it (two words), its codes as split and as stacked
    arrays += rows * (16 + 2 * len(domain) * code_dtype(max(domain)).itemsize)
    return check_memory(
        arrays, f"BLR over {cells:,} cells, rows = {rows}", "use fewer rows or columns, or another method"
    )


def all_histograms(cells: int, rows: int, *, max_candidates: int) -> np.ndarray:
    """Every histogram of ``rows`` rows over ``cells`` cells: shape (count, cells), int64."""
    count = check_size(cells, rows, max_candidates=max_candidates)
    histograms = np.zeros((count, cells), dtype=np.int64)
    for i, combo in enumerate(itertools.combinations_with_replacement(range(cells), rows)):
        np.add.at(histograms[i], list(combo), 1)
    return histograms


def blr_scores(data: np.ndarray, candidates: np.ndarray, queries: np.ndarray) -> tuple[np.ndarray, int]:
    """(u(y) for every candidate, the scores' sensitivity per row of contribution: m)."""
    rows = int(candidates[0].sum())
    answers = queries.T @ data  # (queries,)
    synthetic = candidates @ queries  # (candidates, queries)
    errors = np.abs(rows * answers[None, :] - int(data.sum()) * synthetic)
    return -errors.max(axis=1), rows


def _prepared(data, domain, rows, degree, max_rows, max_candidates):
    check_parameters(domain, rows=rows, degree=degree, max_rows=max_rows, max_candidates=max_candidates)
    data = np.asarray(data, dtype=np.int64)
    if data.shape != (math.prod(domain),) or (data < 0).any():
        raise ValueError(f"data must be a histogram of {math.prod(domain)} counts >= 0")
    candidates = all_histograms(data.size, rows, max_candidates=max_candidates)
    scores, per_row = blr_scores(data, candidates, conjunction_queries(domain, degree))
    return candidates, scores, max_rows * per_row


def blr_probabilities(
    data: object, domain: Sequence[int], *, rows: int, epsilon: float, max_rows: int = 1, degree: int = 2
) -> tuple[np.ndarray, np.ndarray]:
    """(every candidate histogram, its probability): the exact pmf as float64, for audits."""
    candidates, scores, sensitivity = _prepared(data, domain, rows, degree, max_rows, DEFAULT_MAX_CANDIDATES)
    return candidates, selection_probabilities(scores, epsilon=epsilon, sensitivity=sensitivity)


def blr_synthesize(
    data: object,
    domain: Sequence[int],
    *,
    rows: int,
    epsilon: float,
    max_rows: int = 1,
    degree: int = 2,
    max_candidates: int = DEFAULT_MAX_CANDIDATES,
    rng: RandomLike = None,
) -> np.ndarray:
    """An epsilon-DP synthetic histogram of ``rows`` rows (C-order cells over ``domain``).

    ``data`` is the data's histogram over the same cells; ``max_rows`` bounds any privacy
    unit's rows. The work and memory grow with the candidate count: checked first.
    """
    epsilon = parameters.positive_finite(epsilon, "epsilon")
    candidates, scores, sensitivity = _prepared(data, domain, rows, degree, max_rows, max_candidates)
    chosen = exponential_mechanism(scores, epsilon=epsilon, sensitivity=sensitivity, rng=random_source(rng))
    return candidates[chosen]


def histogram_to_rows(histogram: np.ndarray, domain: Sequence[int]) -> np.ndarray:
    """The synthetic rows (codes per column, in the narrowest type holding every column's) of a histogram over
    C-order cells, one row per unit of count."""
    cells = np.repeat(np.arange(histogram.size), histogram)
    dtype = code_dtype(max(domain))
    return np.stack([codes.astype(dtype, copy=False) for codes in split_cells(cells, list(domain))], axis=1)
