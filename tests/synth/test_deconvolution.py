import math

import numpy as np
import pytest

from beam_expmech.synth import deconvolution
from beam_expmech.synth.deconvolution import posterior_medians


def by_the_definition(noisy, scales, rows):
    """The estimator written out cell by cell: Laplace likelihoods on the grid, PRIOR_STEPS EM steps from a uniform
    prior (the prior the mean of the cells' posteriors), each cell's lowest r whose posterior mass up to it is at
    least a half, each column normalised."""
    rows = max(rows, 1.0)
    sizes = [len(x) for x in noisy.values()]
    grid = [0.0, *np.geomspace(deconvolution.SMALLEST_RATIO, max(sizes), deconvolution.GRID_POINTS)]
    cells = [(float(value), len(x), scales[c]) for c, x in noisy.items() for value in x]
    likelihoods = [[math.exp(-abs(value - r * rows / size) / scale) for r in grid] for value, size, scale in cells]
    prior = [1 / len(grid)] * len(grid)
    for _ in range(deconvolution.PRIOR_STEPS):
        mass = [0.0] * len(grid)
        for likelihood in likelihoods:
            weights = [p * f for p, f in zip(prior, likelihood, strict=True)]
            for j, w in enumerate(weights):
                mass[j] += w / sum(weights)
        prior = [m / len(cells) for m in mass]
    medians = []
    for likelihood in likelihoods:
        weights = [p * f for p, f in zip(prior, likelihood, strict=True)]
        below = np.cumsum(weights) / sum(weights)
        medians.append(next(r for r, b in zip(grid, below, strict=True) if b >= 0.5))
    out, start = {}, 0
    for column, size in zip(noisy, sizes, strict=True):
        part = np.array(medians[start : start + size])
        start += size
        out[column] = part / part.sum() if part.sum() > 0 else np.full(size, 1 / size)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_the_estimate_is_the_definition_s_cell_by_cell_and_block_by_block(monkeypatch, seed):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 12, rng.integers(1, 5))
    truth = {f"c{i}": rng.dirichlet(np.full(size, 0.4)) * 300 for i, size in enumerate(sizes)}
    scales = {c: float(rng.uniform(2, 60)) for c in truth}
    noisy = {c: np.rint(x + rng.laplace(0, scales[c], x.size)) for c, x in truth.items()}
    expected = by_the_definition(noisy, scales, 300.0)
    monkeypatch.setattr(deconvolution, "BLOCK", 3)  # blocks that split columns
    for column, estimate in posterior_medians(noisy, scales, rows=300.0).items():
        np.testing.assert_allclose(estimate, expected[column], rtol=1e-12, atol=1e-15)


def test_counts_without_noise_come_back_as_their_proportions_to_the_grid_s_resolution():
    counts = {"a": np.array([600.0, 300.0, 100.0]), "b": np.array([250.0, 250.0, 250.0, 250.0])}
    estimates = posterior_medians(counts, {"a": 1e-3, "b": 1e-3}, rows=1000)
    for column, x in counts.items():
        np.testing.assert_allclose(estimates[column], x / x.sum(), rtol=0.1)
        assert estimates[column].sum() == pytest.approx(1.0)


def test_a_column_whose_rows_sit_on_one_code_is_estimated_better_than_clipped_counts_under_heavy_noise():
    """Under noise of the size of a cell's rows, most of the codes of a skewed column read positive noise, which
    clipping keeps; the pooled prior learns that most cells are near 0 and takes them there."""
    rng = np.random.default_rng(4)
    skewed = np.array([800.0] + [200.0 / 19] * 19)
    flat = np.full(8, 125.0)
    truth = {"skewed": skewed / 1000, "flat": flat / 1000}
    scales = {"skewed": 40.0, "flat": 40.0}
    ours, clipped = {c: [] for c in truth}, {c: [] for c in truth}
    for _ in range(60):
        noisy = {"skewed": skewed + rng.laplace(0, 40, 20), "flat": flat + rng.laplace(0, 40, 8)}
        estimates = posterior_medians(noisy, scales, rows=1000)
        for c, p in truth.items():
            ours[c].append(np.abs(estimates[c] - p).sum())
            kept = np.maximum(noisy[c], 0)
            clipped[c].append(np.abs(kept / kept.sum() - p).sum())
    assert np.mean(ours["skewed"]) < 0.85 * np.mean(clipped["skewed"])
    assert np.mean(ours["flat"]) < np.mean(clipped["flat"])


def test_the_estimate_is_the_same_whatever_the_columns_order_and_never_random():
    counts = {"a": np.array([40.0, -7.0, 13.0]), "b": np.array([5.0, 90.0, -20.0, 31.0, 2.0])}
    scales = {"a": 9.0, "b": 15.0}
    once = posterior_medians(counts, scales, rows=150)
    reversed_order = posterior_medians(dict(reversed(counts.items())), dict(reversed(scales.items())), rows=150)
    again = posterior_medians(counts, scales, rows=150)
    for column in counts:
        np.testing.assert_array_equal(once[column], reversed_order[column])
        np.testing.assert_array_equal(once[column], again[column])


@pytest.mark.parametrize("rows", [-50.0, 0.0, 1e9])
def test_counts_far_below_zero_or_any_size_give_a_distribution(rows):
    counts = {"a": np.array([-1e6, -5e5, -2e6]), "b": np.array([3.0, 1e7])}
    estimates = posterior_medians(counts, {"a": 1.0, "b": 1.0}, rows=rows)
    for column, x in counts.items():
        assert estimates[column].shape == x.shape
        assert np.all(np.isfinite(estimates[column])) and np.all(estimates[column] >= 0)
        assert estimates[column].sum() == pytest.approx(1.0)
    np.testing.assert_array_equal(estimates["a"], np.full(3, 1 / 3))  # every median 0: uniform
