"""The graphical model behind AIM: junction trees, exact inference, fitting and sampling."""

from __future__ import annotations

import itertools
import tracemalloc

import numpy as np
import pytest
from sampling import assert_follows

from beam_expmech.mechanisms.randomness import random_source
from beam_expmech.synth import graphical_model
from beam_expmech.synth.graphical_model import GraphicalModel, Measurement, junction_tree
from beam_expmech.synth.sampling import code_dtype

DOMAIN = {"a": 2, "b": 3, "c": 2, "d": 4, "e": 2, "f": 3}
# A cycle a-b-c-d-a (needs a fill-in edge), a pendant e, and f alone (a forest).
SETS = [("a", "b"), ("b", "c"), ("c", "d"), ("a", "d"), ("d", "e"), ("f",)]


def brute_force_joint(model: GraphicalModel) -> np.ndarray:
    """The full distribution exp(sum of potentials) / Z over every column, axes in domain order."""
    columns = tuple(model.domain)
    log_p = np.zeros([model.domain[c] for c in columns])
    for clique, potential in zip(model.cliques, model.potentials, strict=True):
        log_p = log_p + potential.reshape([model.domain[c] if c in clique else 1 for c in columns])
    p = np.exp(log_p - log_p.max())
    return p / p.sum()


def joint_marginal(joint: np.ndarray, columns: tuple, domain: dict = DOMAIN) -> np.ndarray:
    names = list(domain)
    summed = joint.sum(axis=tuple(i for i, c in enumerate(names) if c not in columns))
    kept = [c for c in names if c in columns]
    return np.transpose(summed, [kept.index(c) for c in columns])


def random_model(seed: int) -> GraphicalModel:
    model = GraphicalModel(DOMAIN, SETS, total=1000.0)
    rng = np.random.default_rng(seed)
    model.potentials = [rng.normal(0, 1.5, p.shape) for p in model.potentials]
    model.marginals = model._calibrate(model.potentials)
    return model


def test_junction_tree_is_a_tree_with_running_intersection():
    cliques, edges = junction_tree(DOMAIN, SETS)
    for s in SETS:
        assert any(set(s) <= set(c) for c in cliques), s
    assert len(edges) == len(cliques) - 2  # f's clique is its own tree
    for column in DOMAIN:  # the cliques holding a column are connected in the tree
        holding = {i for i, c in enumerate(cliques) if column in c}
        reached, frontier = set(), [min(holding)]
        while frontier:
            i = frontier.pop()
            reached.add(i)
            frontier += [j for a, b in edges for i2, j in ((a, b), (b, a)) if i2 == i and j in holding - reached]
        assert reached == holding, column
    assert all(list(c) == sorted(c, key=list(DOMAIN).index) for c in cliques)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_marginal_is_exact_inside_and_across_cliques(seed):
    model = random_model(seed)
    joint = brute_force_joint(model)
    for k in (1, 2, 3):
        for columns in itertools.permutations(DOMAIN, k):
            if k == 3 and columns[0] > columns[1]:
                continue  # enough orders checked
            np.testing.assert_allclose(model.project(columns), 1000 * joint_marginal(joint, columns), rtol=1e-9)


@pytest.mark.parametrize("seed,labels", [(11, 52), (12, 52), (13, 52), (11, 0)])
def test_projections_from_the_calibrated_marginals_match_the_full_joint_on_a_wider_model(seed, labels, monkeypatch):
    """Eight columns, eight random 3-way sets: several cliques, fill-in, candidates across 2-4 cliques
    (labels 0: the elimination for more columns than np.einsum can label, one column at a time)."""
    monkeypatch.setattr(graphical_model, "_EINSUM_LABELS", labels)
    rng = np.random.default_rng(seed)
    domain = {f"x{i}": int(k) for i, k in enumerate(rng.integers(2, 5, 8))}
    sets = [tuple(rng.choice(list(domain), 3, replace=False)) for _ in range(8)]
    model = GraphicalModel(domain, sets, total=500.0)
    assert len(model.cliques) >= 3
    model.potentials = [rng.normal(0, 2.0, p.shape) for p in model.potentials]
    model.marginals = model._calibrate(model.potentials)
    joint = brute_force_joint(model)
    for clique, marginal in zip(model.cliques, model.marginals, strict=True):
        np.testing.assert_allclose(marginal, joint_marginal(joint, clique, domain), rtol=1e-9, atol=1e-15)
    across = 0
    for columns in itertools.combinations(domain, 3):
        across += model.clique_holding(columns) is None
        expected = 500.0 * joint_marginal(joint, columns[::-1], domain)
        np.testing.assert_allclose(model.project(columns[::-1]), expected, rtol=1e-9, atol=1e-12)
    assert across > 0  # some marginals needed elimination


def test_extreme_potentials_give_finite_marginals():
    model = random_model(8)
    model.potentials = [p * 2000 for p in model.potentials]  # log-probabilities far below e^-745
    model.marginals = model._calibrate(model.potentials)
    for columns in [("a",), ("a", "c"), ("b", "e", "f"), ("a", "d", "e")]:
        counts = model.project(columns)
        assert np.isfinite(counts).all() and abs(counts.sum() - 1000.0) < 1e-6


@pytest.mark.parametrize("depth", [700.0, 712.0, 720.0, 740.0, 800.0])
def test_a_subnormal_separator_leaves_projections_across_cliques_finite(depth):
    """Review 8: a separator cell of probability e^-712 (subnormal) had an inverse of inf, and inf * 0 made
    the projection across the two cliques NaN."""
    model = GraphicalModel({"a": 2, "b": 2, "c": 2}, [("a", "b"), ("b", "c")], total=1000.0)
    model.potentials = [np.array([[0.0, -depth], [0.0, -depth]]), np.zeros((2, 2))]
    model.marginals = model._calibrate(model.potentials)
    counts = model.project(("a", "c"))
    assert np.isfinite(counts).all() and abs(counts.sum() - 1000.0) < 1e-6
    np.testing.assert_allclose(counts, np.full((2, 2), 250.0), rtol=1e-9)


@pytest.mark.parametrize("depth", [346.0, 720.0, 800.0])  # beyond _SMALLEST_SUM from 346 nats on (review)
@pytest.mark.parametrize("low", [0, 1])  # which clique holds the slice far below the rest: the leaf, the root
def test_a_slice_far_below_its_clique_but_raised_by_another_keeps_its_probability(low, depth):
    """Calibration exponentiates a clique once and scales it by the other side's message: a slice hundreds of
    nats below the rest of its clique, raised as much by the other clique, is as likely as the others. A shift
    by the clique's largest value alone would zero it: such a clique is shifted per separator slice."""
    domain = {"a": 2, "b": 2, "c": 3}
    model = GraphicalModel(domain, [("a", "b"), ("b", "c")], total=1000.0)
    rng = np.random.default_rng(low)
    leaf, root = rng.normal(0, 1, (2, 2)), rng.normal(0, 1, (2, 3))  # (b, c) has more cells: the root
    if low == 0:
        leaf[:, 1] -= depth
        root[1, :] += depth
    else:
        leaf[:, 1] += depth
        root[1, :] -= depth
    model.potentials = [leaf, root]
    model.marginals = model._calibrate(model.potentials)
    joint = brute_force_joint(model)
    assert 0.05 < joint_marginal(joint, ("b",), domain)[1] < 0.95
    for columns in [("a", "b"), ("b", "c"), ("a", "c"), ("b",)]:
        np.testing.assert_allclose(model.project(columns), 1000.0 * joint_marginal(joint, columns, domain), rtol=1e-9)


@pytest.mark.parametrize(
    "shape,axes",
    [((9, 16, 2, 10, 42), (4,)), ((9, 16, 16, 5, 2), (3,)), ((16, 16, 15, 10, 2), (3, 4)),
     ((16, 16, 15, 10, 2), (0, 2, 4)), ((3, 40, 20), (1,)), ((2, 3, 1, 4), (0, 1, 2, 3)), ((5, 1, 3), (1,)),
     ((7,), (0,)), ((4, 6), ())],
)  # fmt: skip
def test_sums_over_any_axes_are_numpys(shape, axes):
    array = np.random.default_rng(len(shape)).random(shape)
    for keepdims in (False, True):
        summed = graphical_model._sum_out(array, axes, keepdims=keepdims)
        np.testing.assert_allclose(summed, array.sum(axis=axes, keepdims=keepdims), rtol=1e-12)
    assert graphical_model._sum_out(array, ()) is not array  # a copy, as numpy's reduce would give


def test_partial_sums_leave_the_fit_as_it_was_up_to_rounding(monkeypatch):
    """Measured marginals summed from a shared partial sum of their clique, and their gradients gathered
    through it, instead of each from the whole clique: the same steps, to rounding."""
    domain = {"a": 5, "b": 6, "c": 7, "d": 8}
    truth = GraphicalModel.of_log_potentials(
        domain, [(tuple(domain), np.random.default_rng(3).normal(0, 1, (5, 6, 7, 8)))], total=2000.0
    )
    rng = np.random.default_rng(4)
    sets = [("a", "b"), ("a", "c"), ("b", "c"), ("c", "d"), ("a",)]
    measurements = [Measurement(c, truth.project(c) + rng.normal(0, 2.0, truth.project(c).shape), 2.0) for c in sets]
    shared = GraphicalModel(domain, [tuple(domain)], total=2000.0)
    terms, _ = shared._terms(measurements)
    assert any(t.target is None for t in terms)  # the case under test: a partial sum in the fit
    shared.fit(measurements, iterations=60)
    monkeypatch.setattr(GraphicalModel, "_partial_sums", lambda self, columns, inside: [])
    alone = GraphicalModel(domain, [tuple(domain)], total=2000.0)
    alone.fit(measurements, iterations=60)
    np.testing.assert_allclose(shared.marginals[0], alone.marginals[0], rtol=1e-9)
    assert shared._step == alone._step  # the same steps taken and refused


def test_fit_recovers_marginals_of_a_distribution_the_model_can_express():
    truth = random_model(4)  # its cliques' marginals pin down the whole distribution
    measurements = [Measurement(c, truth.project(c), 1.0) for c in truth.cliques]
    model = GraphicalModel(DOMAIN, SETS, total=1000.0)
    model.fit(measurements, iterations=3000)
    for columns in [*SETS, ("a", "c"), ("b", "e", "f")]:
        np.testing.assert_allclose(model.project(columns), truth.project(columns), atol=0.05)


def test_fit_stops_once_its_steps_gain_less_than_the_tolerance(monkeypatch):
    truth = random_model(9)
    rng = np.random.default_rng(10)
    measurements = [Measurement(c, truth.project(c) + rng.normal(0, 5.0, truth.project(c).shape), 5.0) for c in SETS]
    steps = []
    calibrate = GraphicalModel._calibrate
    monkeypatch.setattr(GraphicalModel, "_calibrate", lambda self, p: steps.append(1) or calibrate(self, p))
    full, early = GraphicalModel(DOMAIN, SETS, total=1000.0), GraphicalModel(DOMAIN, SETS, total=1000.0)
    full.fit(measurements, iterations=400)
    ran_full, steps[:] = len(steps), []
    early.fit(measurements, iterations=400, tolerance=0.01)
    assert len(steps) < ran_full

    def loss(model):
        return sum(((model.project(m.columns) - m.values) ** 2).sum() / (2 * m.sigma**2) for m in measurements)

    assert loss(early) - loss(full) < 400 * 0.01  # what the steps it skipped could at most have gained at that rate
    assert loss(early) < loss(GraphicalModel(DOMAIN, SETS, total=1000.0))


def test_fit_refuses_a_measurement_outside_the_model():
    with pytest.raises(ValueError, match="lies in no clique"):
        GraphicalModel(DOMAIN, SETS).fit([Measurement(("a", "f"), np.ones((2, 3)), 1.0)])


def test_fit_holds_a_few_clique_sized_arrays_however_many_measurements_lie_in_the_clique():
    domain = {"x": 40, "y": 40, "z": 40}  # one clique of 64,000 cells (500 KiB as float64)
    model = GraphicalModel(domain, [("x", "y", "z")], total=1000.0)
    measurements = [Measurement((c,), np.full(40, 25.0), 1.0) for c in domain for _ in range(50)]
    clique_bytes = 8 * 40**3
    tracemalloc.start()
    try:
        model.fit(measurements, iterations=2)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * clique_bytes  # not one clique-sized array per measurement (150 here)


def test_extended_model_starts_as_the_same_distribution():
    model = random_model(5)
    bigger = model.extended([("b", "e", "f")])
    assert any(set("bef") <= set(c) for c in bigger.cliques)
    for columns in [("a", "b", "c"), ("e", "f"), ("d",)]:
        np.testing.assert_allclose(bigger.project(columns), model.project(columns), rtol=1e-9)


def test_a_model_of_log_potentials_is_their_normalised_exponentiated_sum():
    """Factors whose axes are not in domain order, overlapping and across a cycle (benchmarks read
    OpenDP's models this way): every projection equals the brute-force joint's."""
    rng = np.random.default_rng(14)
    factors = [(("b", "a"), rng.normal(0, 1.5, (3, 2))), (("d", "c", "b"), rng.normal(0, 1.5, (4, 2, 3))),
               (("a", "d"), rng.normal(0, 1.5, (2, 4))), (("e",), rng.normal(0, 1.5, 2))]  # fmt: skip
    model = GraphicalModel.of_log_potentials(DOMAIN, factors, total=50.0)
    names = list(DOMAIN)
    log_p = np.zeros(list(DOMAIN.values()))
    for columns, values in factors:
        ordered = sorted(columns, key=names.index)
        aligned = np.transpose(values, [columns.index(c) for c in ordered])
        log_p = log_p + aligned.reshape([DOMAIN[c] if c in columns else 1 for c in names])
    joint = np.exp(log_p - log_p.max())
    joint /= joint.sum()
    for columns in [("a", "b", "c"), ("e", "d", "a"), ("f",), ("c", "e"), ("d", "b")]:
        np.testing.assert_allclose(model.project(columns), 50.0 * joint_marginal(joint, columns), atol=1e-10)


def test_sampled_rows_follow_the_model():
    model = random_model(6)
    rows = model.sample(30_000, random_source(7))
    assert set(rows) == set(DOMAIN) and all(v.dtype == code_dtype(DOMAIN[c]) for c, v in rows.items())
    joint = brute_force_joint(model)
    cells = np.ravel_multi_index([rows[c] for c in DOMAIN], list(DOMAIN.values()))
    assert_follows(cells.tolist(), dict(enumerate(joint.ravel())))


def test_projections_across_cliques_follow_the_model_through_a_fit_and_an_extension():
    """Review 8: a cache of sums kept past a fit went unseen, since every other test projects once."""
    model = random_model(11)
    rng = np.random.default_rng(12)
    for columns in [("a", "e"), ("b", "d", "f")]:  # across cliques: filled into the caches
        model.project(columns)
    truth = random_model(13)
    model.fit([Measurement(c, truth.project(c) + rng.normal(0, 1.0, truth.project(c).shape), 1.0) for c in SETS],
              iterations=50)  # fmt: skip
    joint = brute_force_joint(model)
    for columns in [("a", "e"), ("b", "d", "f")]:
        np.testing.assert_allclose(model.project(columns), 1000.0 * joint_marginal(joint, columns), atol=1e-9)
    extended = model.extended([("a", "c", "e")])
    joint = brute_force_joint(extended)
    for columns in [("a", "e"), ("b", "d", "f"), ("a", "c", "e")]:
        np.testing.assert_allclose(extended.project(columns), 1000.0 * joint_marginal(joint, columns), atol=1e-9)


def test_repeated_measurements_of_one_set_fit_as_their_inverse_variance_weighted_mean():
    """Review 8: a plain mean in place of the weighted one passed every test. Two measurements of one set
    with sigmas 1 and 3 fit exactly as one at their weighted mean with sigma 1 / sqrt(1 + 1/9)."""
    truth = random_model(14)
    rng = np.random.default_rng(15)
    noisy = [truth.project(c) + rng.normal(0, 2.0, truth.project(c).shape) for c in SETS]
    shifted = truth.project(("a", "b")) + 40.0
    repeated = [
        *(Measurement(c, y, 1.0) for c, y in zip(SETS, noisy, strict=True)),
        Measurement(("a", "b"), shifted, 3.0),
    ]
    weight = 1.0 + 1.0 / 9.0
    mean = (noisy[0] + shifted / 9.0) / weight
    single = [
        Measurement(("a", "b"), mean, 1.0 / np.sqrt(weight)),
        *(Measurement(c, y, 1.0) for c, y in zip(SETS[1:], noisy[1:], strict=True)),
    ]
    one, two = GraphicalModel(DOMAIN, SETS, total=1000.0), GraphicalModel(DOMAIN, SETS, total=1000.0)
    one.fit(repeated, iterations=200)
    two.fit(single, iterations=200)
    for columns in SETS:
        np.testing.assert_allclose(one.project(columns), two.project(columns), rtol=1e-6, atol=1e-6)


def test_a_value_summing_several_noisy_cells_weighs_as_little_as_its_variance_says():
    """A value summing k cells has variance k sigma^2: with the total fixed, the fit moves it k times as far
    as a value of one cell (the weighted least-squares answer y - lambda k, sum = N)."""
    values = np.array([400.0, 300.0, 200.0, 120.0])
    summed = np.array([1, 1, 1, 4])
    model = GraphicalModel({"a": 4}, [("a",)], total=1000.0)
    model.fit([Measurement(("a",), values, 1.0, summed)], iterations=3000, tolerance=0.0)
    shift = (values.sum() - 1000.0) / summed.sum()
    np.testing.assert_allclose(model.project(("a",)), values - shift * summed, atol=1e-3)
    assert Measurement(("a",), values, 2.0, summed).noisy_cells() == 7


def test_a_measurement_out_of_the_domains_order_is_refused():
    """Its counts would be fitted transposed (review 8, finding 6)."""
    model = GraphicalModel(DOMAIN, SETS, total=1000.0)
    with pytest.raises(ValueError, match="domain's order"):
        model.fit([Measurement(("b", "a"), np.ones((3, 2)), 1.0)], iterations=1)
