"""fit_rows: a local search that brings synthetic rows' workload marginals towards the model's."""

from __future__ import annotations

import collections
import itertools
import math
import tracemalloc

import numpy as np
import pytest

from beam_expmech.mechanisms.randomness import random_source
from beam_expmech.ordering import stable_order
from beam_expmech.synth import row_fitting
from beam_expmech.synth.mwem import mwem
from beam_expmech.synth.row_fitting import fit_rows
from beam_expmech.synth.sampling import code_dtype

DOMAIN = {"a": 3, "b": 4, "c": 2, "d": 5}
WORKLOAD = list(itertools.combinations(DOMAIN, 3))


def counts(rows: dict[str, np.ndarray], columns: tuple[str, ...]) -> np.ndarray:
    shape = [DOMAIN[c] for c in columns]
    flat = np.ravel_multi_index([rows[c] for c in columns], shape)
    return np.bincount(flat, minlength=int(np.prod(shape))).reshape(shape)


def distance(rows: dict[str, np.ndarray], probabilities) -> float:
    n = len(rows["a"])
    return sum(float(np.abs(counts(rows, m) - n * probabilities(m)).sum()) for m in WORKLOAD)


def random_rows(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    return {c: rng.integers(0, size, n) for c, size in DOMAIN.items()}


def model_of(rng: np.random.Generator):
    """A joint distribution with dependent columns, answering any marginal in probabilities."""
    joint = rng.dirichlet(np.full(int(np.prod(list(DOMAIN.values()))), 0.3)).reshape(list(DOMAIN.values()))
    names = list(DOMAIN)
    return lambda m: joint.sum(axis=tuple(i for i, c in enumerate(names) if c not in m))


def test_the_rows_reach_a_point_where_no_single_value_changed_brings_them_closer():
    rng = np.random.default_rng(1)
    probabilities = model_of(rng)
    rows = random_rows(rng, 300)
    fitted = fit_rows(rows, DOMAIN, WORKLOAD, probabilities, source=random_source(2))
    after = distance(fitted, probabilities)
    assert after < 0.6 * distance(rows, probabilities)
    best = after
    for r in range(0, 300, 7):  # every column and value of a sample of rows
        for c, size in DOMAIN.items():
            for v in range(size):
                moved = {k: x.copy() for k, x in fitted.items()}
                moved[c][r] = v
                best = min(best, distance(moved, probabilities))
    assert best >= after - 1e-9


def test_every_round_brings_the_rows_closer_by_exactly_what_it_kept():
    """Many rows in few cells, so that proposals crowd the same cells: the rule of room per cell keeps each
    round's gains exact, so the running differences stay those of the rows and the distance never rises."""
    rng = np.random.default_rng(3)
    probabilities = model_of(rng)
    rows = {c: np.minimum(rng.integers(0, 2, 2_000), size - 1) for c, size in DOMAIN.items()}
    table = np.stack([rows[c] for c in DOMAIN], axis=1)
    layout = row_fitting._Layout(DOMAIN, WORKLOAD)
    distance = row_fitting._Distance(layout.difference(table, probabilities))
    source, previous, kept = random_source(4), np.abs(distance.difference).sum(), 0
    for _ in range(3):
        for column in range(len(DOMAIN)):
            kept += row_fitting._round(table, column, distance, layout, source)[0]
            difference = layout.difference(table, probabilities)
            np.testing.assert_allclose(distance.difference, difference, atol=1e-9)
            np.testing.assert_allclose(distance.arriving, np.abs(difference + 1) - np.abs(difference), atol=1e-9)
            np.testing.assert_allclose(distance.leaving, np.abs(difference - 1) - np.abs(difference), atol=1e-9)
            assert np.abs(difference).sum() <= previous + 1e-9
            previous = np.abs(difference).sum()
    assert kept > 100


def test_a_sweep_of_drawn_rows_that_moves_none_does_not_end_the_search():
    """Review: where a round's rows are drawn, a sweep can miss the one row left to move; the search goes on until
    its rounds have drawn about every row. 20,000 rows; the model wants one of them, in its cell alone, moved."""
    rows = 20_000
    b = np.arange(rows) % 200
    a = np.where(b == 199, 1, (np.arange(rows) // 200) % 2)
    lone = np.flatnonzero(b == 199)[0]
    a[lone] = 0
    counts = np.zeros((2, 200))
    np.add.at(counts, (a, b), 1)
    counts[:, 199] += [-1, 1]
    target = {("a",): counts.sum(axis=1) / rows, ("a", "b"): counts / rows}
    assert row_fitting._Layout({"a": 2, "b": 200}, list(target)).proposing(0) < rows  # rounds draw their rows
    for seed in range(3):
        fitted = fit_rows({"a": a, "b": b}, {"a": 2, "b": 200}, list(target), target.__getitem__,
                          source=random_source(seed))  # fmt: skip
        assert fitted["a"][lone] == 1 and np.array_equal(np.delete(fitted["a"], lone), np.delete(a, lone))


def test_rows_that_already_answer_as_the_model_stay_as_they_are():
    rng = np.random.default_rng(5)
    rows = random_rows(rng, 200)
    own = {m: counts(rows, m) / 200 for m in WORKLOAD}
    fitted = fit_rows(rows, DOMAIN, WORKLOAD, own.__getitem__, source=random_source(6))
    assert all(np.array_equal(fitted[c], rows[c]) for c in DOMAIN)


def test_the_same_randomness_gives_the_same_rows_and_the_input_is_not_changed():
    rng = np.random.default_rng(7)
    probabilities = model_of(rng)
    rows = random_rows(rng, 500)
    kept = {c: v.copy() for c, v in rows.items()}
    first, second = (fit_rows(rows, DOMAIN, WORKLOAD, probabilities, source=random_source(8)) for _ in range(2))
    assert all(np.array_equal(first[c], second[c]) for c in DOMAIN)
    assert all(np.array_equal(rows[c], kept[c]) for c in DOMAIN)
    narrowest = code_dtype(max(DOMAIN.values()))  # one byte a code here, not eight
    assert all(first[c].dtype == narrowest and first[c].min() >= 0 and first[c].max() < DOMAIN[c] for c in DOMAIN)


@pytest.mark.parametrize("rows", [0, 1])
def test_no_rows_or_one(rows):
    rng = np.random.default_rng(9)
    fitted = fit_rows(random_rows(rng, rows), DOMAIN, WORKLOAD, model_of(rng), source=random_source(10))
    assert [len(v) for v in fitted.values()] == [rows] * len(DOMAIN)


def test_a_column_of_one_code_and_a_workload_without_a_column():
    domain = {"a": 3, "b": 1, "c": 4}
    rng = np.random.default_rng(11)
    rows = {"a": rng.integers(0, 3, 100), "b": np.zeros(100, np.int64), "c": rng.integers(0, 4, 100)}
    target = {("a", "b"): np.array([[0.8], [0.1], [0.1]])}
    fitted = fit_rows(rows, domain, [("a", "b")], target.__getitem__, source=random_source(12))
    assert np.bincount(fitted["a"], minlength=3).tolist() == [80, 10, 10]
    assert np.array_equal(fitted["c"], rows["c"]) and np.array_equal(fitted["b"], rows["b"])


def test_a_cell_takes_only_the_moves_that_keep_each_kept_gain_exact():
    """20 rows of code 0 against targets 17, 1.5 and 1.5: differences 3, -1.5, -1.5. Every row proposes the
    move to code 1 (the first of two equal bests), worth 2: 1 where it leaves, 1 where it arrives. But a cell
    1.5 short takes one move (a second would gain nothing there): one is kept, and the distance falls by
    exactly 2; the next round, the same to code 2."""
    domain, workload = {"a": 3}, [("a",)]
    table = np.zeros((20, 1), np.int64)
    layout = row_fitting._Layout(domain, workload)
    distance = row_fitting._Distance(layout.difference(table, lambda m: np.array([0.85, 0.075, 0.075])))
    for l1, counts in ((4.0, [19, 1, 0]), (2.0, [18, 1, 1])):
        kept, _ = row_fitting._round(table, 0, distance, layout, random_source(13))
        assert kept == 1 and np.abs(distance.difference).sum() == pytest.approx(l1)
        assert np.bincount(table[:, 0], minlength=3).tolist() == counts


def _kept_one_by_one(touches: np.ndarray, room: np.ndarray) -> np.ndarray:
    """``_kept``'s rule, a proposal and a cell at a time: each pass ranks every touch among the live proposals'
    touches of its cell, in priority order."""
    room, kept, alive = room.copy(), np.zeros(len(touches), bool), list(range(len(touches)))
    for _ in range(row_fitting.PASSES):
        seen, fits = collections.Counter(), []
        for p in alive:
            ranks = []
            for c in touches[p]:
                ranks.append(seen[c])
                seen[c] += 1
            if all(r < room[c] for r, c in zip(ranks, touches[p], strict=True)):
                fits.append(p)
        for p in fits:
            kept[p] = True
            for c in touches[p]:
                room[c] -= 1
        alive = [p for p in alive if not kept[p] and all(room[c] > 0 for c in touches[p])]
    return kept


def test_kept_is_its_rule_applied_one_proposal_at_a_time():
    """Many proposals crowding few cells (a cell touched twice by one proposal too), over several passes."""
    rng = np.random.default_rng(15)
    for _ in range(100):
        touches = rng.integers(0, 10, (int(rng.integers(1, 60)), int(rng.integers(1, 5))))
        room = rng.integers(1, 4, 10)
        assert np.array_equal(row_fitting._kept(touches, room.copy()), _kept_one_by_one(touches, room))


def test_kept_proposals_never_overfill_a_cell_and_the_first_is_always_kept():
    rng = np.random.default_rng(14)
    for _ in range(50):
        touches = np.stack([rng.choice(12, 4, replace=False) for _ in range(40)])
        room = rng.integers(1, 4, 12)
        kept = row_fitting._kept(touches, room.copy())
        assert kept[0]
        assert np.all(np.bincount(touches[kept].ravel(), minlength=12) <= room)


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda rows, p: (rows | {"b": rows["b"] + 4}, p), "a code outside its column's domain"),
        (lambda rows, p: (rows, lambda m: np.full_like(p(m), np.nan)), "not finite non-negative"),
        (lambda rows, p: (rows, lambda m: -p(m)), "not finite non-negative"),
        (lambda rows, p: (rows, lambda m: p(m).ravel()), "not finite non-negative of its shape"),
    ],
)
def test_bad_codes_or_model_answers_are_refused(change, message):
    rng = np.random.default_rng(15)
    rows, probabilities = change(random_rows(rng, 50), model_of(rng))
    with pytest.raises(ValueError, match=message):
        fit_rows(rows, DOMAIN, WORKLOAD, probabilities, source=random_source(16))


def test_a_marginal_naming_a_column_twice_is_refused():
    rng = np.random.default_rng(17)
    with pytest.raises(ValueError, match="names a column twice"):
        fit_rows(random_rows(rng, 50), DOMAIN, [("a", "a")], model_of(rng), source=random_source(18))


@pytest.mark.parametrize(
    "sizes,degree,rows",
    [
        ([2] * 4, 3, 400_000),  # every row proposes in a round: the rows' arrays dominate
        ([300] * 4, 2, 100_000),  # many values: a round's gains dominate
        ([2] * 7, 5, 100_000),  # wide marginals: the rows' cells dominate
        ([2] * 16, 16, 1),  # one marginal of 2^16 cells and one row (review): the workload's cells dominate
        ([4] * 8, 8, 3),  # the same, with _distinct's table of marks
        ([2] * 24, 3, 1),  # 2,024 marginals (review): the layout of the workload dominates
    ],
)
def test_drawing_and_fitting_rows_hold_no_more_than_the_bound_a_generator_checks(monkeypatch, sizes, degree, rows):
    """memory_bound, which the synthesis step checks against MAX_MEMORY before any budget is spent, against
    tracemalloc's peak of synthetic_rows (from a fitted MWEM model, the draw and a few rounds of the search)."""
    monkeypatch.setattr(row_fitting, "WORK", 2**23)  # test-only: the first rounds, each column's largest
    domain = {f"c{i}": size for i, size in enumerate(sizes)}
    rng = np.random.default_rng(19)  # test-only
    base = rng.integers(0, min(sizes), 3_000)
    data = {c: (base + rng.integers(0, 2, 3_000)) % size for c, size in domain.items()}
    workload = list(itertools.combinations(domain, degree))
    shapes = {m: [domain[c] for c in m] for m in workload}
    true = {m: np.bincount(np.ravel_multi_index([data[c] for c in m], shape), minlength=math.prod(shape)).reshape(shape)
            for m, shape in shapes.items()}  # fmt: skip
    model = mwem(true, domain, epsilon=5.0, rounds=3, rng=20).model
    tracemalloc.start()
    try:
        held = tracemalloc.get_traced_memory()[0]
        fitted = row_fitting.synthetic_rows(model, domain, workload, rows, source=random_source(21))
        peak = tracemalloc.get_traced_memory()[1] - held
    finally:
        tracemalloc.stop()
    assert len(fitted["c0"]) == rows and peak <= row_fitting.memory_bound(domain, workload)(rows)


@pytest.mark.parametrize("size,bound", [(1, 1), (7, 3), (5_000, 60), (200_000, 400_000), (200_000, 510_028),
                                        (3_000, 10**8)])  # fmt: skip
def test_the_rounds_sorts_are_numpys(size, bound):
    """A round's distinct cells and its order by cell (a table of marks, a sort of packed words) are exactly
    np.unique's and a stable argsort's, on the table's path and on the fallback (a bound far above the count)."""
    values = np.random.default_rng(size).integers(0, bound, size)  # test-only
    distinct, inverse = row_fitting._distinct(values, bound)
    expected, expected_inverse = np.unique(values, return_inverse=True)
    assert np.array_equal(distinct, expected) and np.array_equal(inverse, expected_inverse.ravel())
    assert np.array_equal(stable_order(values), np.argsort(values, kind="stable"))
