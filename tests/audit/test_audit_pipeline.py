"""Black-box audit of the declared selection (``Select`` over public candidates, as ``PrivateRelease`` runs it and
``pipelines.select`` declares it from its flags), in every configuration its command line allows.

The counts come from the release's own data pass (``Prepared.job``: read, validate, bound, count into candidate
shards) on two neighbouring tiny datasets; the selection is then drawn many times, seeded, by the release's own
final step (``Select.final_step(unit, budget, seed)``; ``PrivateSelect.select``: the shard top-k and the exact
merge that its Beam ``expand`` runs) in one process, and mapped to labels as the release does. Each configuration
is checked

- against the exact pmf of the ideal mechanism on each dataset (k rounds of peeling for top-k,
  permute-and-flip's own pmf), by a seeded chi-square; and
- on the neighbouring pair: for every outcome, Clopper-Pearson intervals (99.9% each) give a lower
  confidence bound on |ln P(o | D) / P(o | D')|, which must stay below epsilon.

Shards of 3 of the 7 candidates (3, 3 and a short 1) exercise the merge. A final step declared with
the wrong sensitivity must fail the same check.
"""

from __future__ import annotations

import itertools
import math
import pickle

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from privacy_loss import DRAWS, PrivacyLoss, log_ratio_lower_bound, record_sampler, score_neighbours
from release_passes import run_pass
from sampling import assert_follows, peeling_pmf

from beam_expmech.mechanisms import exponential_mechanism, permute_and_flip_probabilities
from beam_expmech.mechanisms.randomness import stream_source
from beam_expmech.releases import Budget, PrivacyUnit, PrivateRelease, Select
from beam_expmech.releases.declaration import EACH_ROW
from pipelines import select

LABELS = ("a", "b", "c", "d", "e", "f", "g")
MAX_ROWS = 2  # K rows per user: sensitivity 2
# D: three users with two rows each on candidates 0, 1, 5 and 6 (counts 6 6 0 0 0 6 6: ties everywhere);
# D': one more user with three rows of candidate 0, of which the bounding keeps two.
D_ITEMS = [item for item in (0, 1, 5, 6) for _ in range(3 * MAX_ROWS)]
D_USERS = [i // MAX_ROWS for i in range(len(D_ITEMS))]
NEW_USER, NEW_ITEMS = 1000, [0, 0, 0]


def command_line(tmp_path, *, top_k: int, mechanism: str, labelled: bool, shard_size: int) -> list[str]:
    if labelled:
        (tmp_path / "candidates.txt").write_text("\n".join(LABELS) + "\n")
        candidates = ["--candidates", str(tmp_path / "candidates.txt")]
    else:
        candidates = ["--candidate-range", f"0:{len(LABELS)}"]
    return ["--column", "item", *candidates, "--privacy-unit", "user", "--max-rows-per-unit", str(MAX_ROWS),
            "--epsilon", "2", "--top-k", str(top_k), "--mechanism", mechanism, "--shard-size", str(shard_size),
            "--seed", "0"]  # fmt: skip


def declared(tmp_path, name: str, users: list[int], items: list[int], flags: list[str], labelled: bool):
    """The release ``pipelines.select`` declares from ``flags`` over this data (written to NAME.parquet)."""
    path = tmp_path / f"{name}.parquet"
    column = [LABELS[i] for i in items] if labelled else items
    pq.write_table(pa.table({"user": users, "item": column}), path)
    args, _ = select.parse_args(["--input", str(path), *flags, "--output", str(tmp_path / f"{name}.json")])
    select.check_flags(args)
    return select.declared(args)


def release_shards(tmp_path, name: str, release: PrivateRelease) -> list:
    """The (candidate shard, counts) pairs the release's own data pass hands its final step."""
    captured = tmp_path / f"{name}.pickle"
    run_pass(release, beam.combiners.ToList(),
             lambda shards: captured.write_bytes(pickle.dumps(sorted(shards, key=lambda kv: kv[0]))))  # fmt: skip
    return pickle.loads(captured.read_bytes())


def pipeline_shards(tmp_path, name: str, users: list[int], items: list[int], flags: list[str], labelled: bool):
    """(the declared release, the shards its pass computes for this data)."""
    release = declared(tmp_path, name, users, items, flags, labelled)
    return release, release_shards(tmp_path, name, release)


def released(release, shards, *, sensitivity: float | None = None) -> list[tuple]:
    """The labels the release's final step releases over DRAWS seeded runs."""
    query, family, outcomes = release.query, release.query.family(), []
    for seed in range(DRAWS):
        step = query.final_step(release.unit, release.budget, seed)
        if sensitivity is not None:
            step.sensitivity = sensitivity  # a planted bug the audit must catch
        outcomes.append(tuple(family.labels(step.select(shards))))
    return outcomes


def ideal_pmf(query: Select, budget: Budget, counts: np.ndarray) -> dict:
    """The ideal mechanism's law over released label tuples: peeling for the exponential mechanism."""
    family = query.family()
    sensitivity = MAX_ROWS * family.contribution
    if query.mechanism == "permute-and-flip":
        p = permute_and_flip_probabilities(counts, epsilon=budget.epsilon, sensitivity=sensitivity, monotonic=True)
        pmf = {(i,): float(q) for i, q in enumerate(p)}
    else:
        pmf = peeling_pmf(counts.astype(float), query.k, budget.epsilon, sensitivity, monotonic=True)
    return {tuple(family.labels(list(outcome))): q for outcome, q in pmf.items()}


def hits(outcomes: list[tuple], support: list[tuple]) -> np.ndarray:
    position = {o: i for i, o in enumerate(support)}
    counts = np.zeros(len(support), dtype=int)
    for o in outcomes:
        counts[position[o]] += 1
    return counts


CONFIGURATIONS = [
    # (top_k, mechanism, labelled, shard_size)
    (1, "exponential", False, 3),
    (2, "exponential", False, 3),
    (3, "exponential", True, 3),
    (2, "exponential", True, 7),  # one shard
    (1, "permute-and-flip", True, 3),
    (1, "permute-and-flip", False, 7),
]


@pytest.mark.parametrize("top_k,mechanism,labelled,shard_size", CONFIGURATIONS)
def test_select_as_shipped(audit, tmp_path, top_k, mechanism, labelled, shard_size):
    flags = command_line(tmp_path, top_k=top_k, mechanism=mechanism, labelled=labelled, shard_size=shard_size)
    release, d = pipeline_shards(tmp_path, "d", D_USERS, D_ITEMS, flags, labelled)
    _, d_prime = pipeline_shards(tmp_path, "d_prime", [*D_USERS, *[NEW_USER] * 3], [*D_ITEMS, *NEW_ITEMS], flags,
                                 labelled)  # fmt: skip
    assert [s for s, _ in d] == list(range(math.ceil(len(LABELS) / shard_size)))
    assert np.concatenate([c for _, c in d]).tolist() == [6, 6, 0, 0, 0, 6, 6]
    assert np.concatenate([c for _, c in d_prime]).tolist() == [8, 6, 0, 0, 0, 6, 6]

    query, budget = release.query, release.budget
    assert (query.k, query.mechanism, query.shard_size, budget.epsilon) == (top_k, mechanism, shard_size, 2.0)
    assert release.unit == PrivacyUnit("user", MAX_ROWS)
    subject = f"pipelines.select k={top_k} {mechanism}, {'labels' if labelled else 'ints'}, shards of {shard_size}"
    draws = {}
    for name, shards in (("D", d), ("D'", d_prime)):
        draws[name] = released(release, shards)
        pmf = ideal_pmf(query, budget, np.concatenate([c for _, c in shards]))
        p_value = assert_follows(draws[name], pmf)
        audit.check(subject, "released vs ideal pmf: -log10 p (chi-square)", cases=DRAWS,
                    worst=-math.log10(p_value), bound=6.0)  # fmt: skip
    support = sorted(ideal_pmf(query, budget, np.zeros(len(LABELS))))
    _, certain = log_ratio_lower_bound(hits(draws["D"], support), hits(draws["D'"], support))
    audit.check(subject, f"|ln P/P'|: 99.9% lower bound ({DRAWS:,} runs each)", cases=2 * DRAWS, worst=certain,
                bound=budget.epsilon)  # fmt: skip


def test_the_black_box_check_catches_a_wrong_sensitivity(tmp_path):
    """A final step that ignored the bound of 2 rows per user shows a loss well above epsilon."""
    flags = command_line(tmp_path, top_k=1, mechanism="exponential", labelled=False, shard_size=3)
    release, d = pipeline_shards(tmp_path, "d", D_USERS, D_ITEMS, flags, False)
    _, d_prime = pipeline_shards(tmp_path, "d_prime", [*D_USERS, *[NEW_USER] * 3], [*D_ITEMS, *NEW_ITEMS], flags,
                                 False)  # fmt: skip
    support = sorted(ideal_pmf(release.query, release.budget, np.zeros(len(LABELS))))
    wrong = [hits(released(release, shards, sensitivity=0.5), support) for shards in (d, d_prime)]
    assert log_ratio_lower_bound(*wrong)[1] > release.budget.epsilon


@pytest.mark.parametrize("top_k,mechanism", [(1, "exponential"), (2, "exponential"), (3, "exponential"),
                                             (1, "permute-and-flip")])  # fmt: skip
def test_select_charges_what_its_mechanism_spends(audit, top_k, mechanism):
    """The Release the declared selection charges (``Prepared.cost``, what ``PrivateRelease`` charges) covers the
    ideal mechanism it runs (whose law the released draws follow, above): epsilon-DP and, as charged, the Renyi
    bound of rho-zCDP, exactly on a score grid."""
    query = Select("item", range(3), k=top_k, mechanism=mechanism, shard_size=3)  # a pmf over every grid point
    unit, budget = PrivacyUnit("user", MAX_ROWS), Budget(2)
    cost, loss = query.prepare(unit, budget, 0).cost, PrivacyLoss()
    for counts in itertools.product((0, 3), repeat=3):
        base = ideal_pmf(query, budget, np.array(counts, dtype=float))
        for other in score_neighbours(np.array(counts, dtype=float), MAX_ROWS, monotone=True):
            loss.add(base, ideal_pmf(query, budget, other))
    loss.report(audit, f"pipelines.select k={top_k} {mechanism}: charge", epsilon=cost.epsilon, rho=cost.rho)


def test_unseeded_selection_draws_fresh_os_randomness():
    """Without a seed the final step's noise is the OS's: repeated runs on tied counts disagree, and the
    release says its randomness was private."""
    query, budget = Select("c", range(7), k=2, shard_size=3), Budget(1)
    step = query.final_step(EACH_ROW, budget)
    shards = [(0, np.zeros(3, np.int64)), (1, np.zeros(3, np.int64)), (2, np.zeros(1, np.int64))]
    assert len({tuple(step.select(shards)) for _ in range(20)}) > 1  # 20 equal draws: p < 1e-35
    assert step.seed is None and stream_source(step.seed, 0).private and stream_source(step.seed, 1).private
    assert query.prepare(EACH_ROW, budget).fields["private_randomness"] is True


def test_scores_beyond_float_precision_are_sampled_exactly(audit):
    """Scores that differ by less than float64 can tell apart at their size (MWEM's scores in units of
    2^-30 counts reach 2^60 at n = 10^9): the exact step must decide, or the draw is uniform."""
    top = 2**60
    scores = np.array([top, top + 1, top + 3], dtype=object)
    weights = [math.exp(2 * (s - top)) for s in scores]  # epsilon 4, sensitivity 1: exp(2 (s - top)), exactly
    pmf = {i: w / sum(weights) for i, w in enumerate(weights)}
    rng = np.random.default_rng(17)
    draws = [exponential_mechanism(scores, epsilon=4, sensitivity=1, rng=rng) for _ in range(3000)]
    record_sampler(audit, "exponential (scores beyond 2^53)", draws, pmf)


def lumped_peeling_pmf(heavy: dict[int, float], zeros: int, epsilon: float, k: int) -> dict[tuple, float]:
    """Peeling (k rounds of epsilon/k, sensitivity 1, monotone) over the ``heavy`` candidates' counts and
    ``zeros`` candidates of count 0, with every zero-count candidate reported as "z"."""
    weights = {h: math.exp(epsilon / k * count) for h, count in heavy.items()}

    def rounds(left: dict, zeros_left: int, depth: int) -> dict[tuple, float]:
        if depth == 0:
            return {(): 1.0}
        total = sum(left.values()) + zeros_left
        pmf: dict[tuple, float] = {}
        options = [(h, w, {x: v for x, v in left.items() if x != h}, zeros_left) for h, w in left.items()]
        options.append(("z", zeros_left, left, zeros_left - 1))
        for name, weight, rest, rest_zeros in options:
            for tail, p in rounds(rest, rest_zeros, depth - 1).items():
                pmf[(name, *tail)] = pmf.get((name, *tail), 0.0) + weight / total * p
        return pmf

    return rounds(weights, zeros, k)


def test_select_at_production_shard_sizes(audit, tmp_path):
    """Shards of 2^16 candidates: a candidate whose first 16 bits of noise are all ones has no finite
    upper bound, so most draws take the second screen (48 bits) and some the exact step; the tiny
    configurations above almost never do. Released draws against peeling, zero-count candidates lumped."""
    shard, heavy = 1 << 16, {0: 10, 1: 11, 1 << 16: 12, (1 << 16) + 1: 13}  # both shards hold heavy ones
    items = [item for item, count in heavy.items() for _ in range(count)]
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"item": items}), path)
    flags = ["--input", str(path), "--column", "item", "--candidate-range", f"0:{2 * shard}", "--epsilon", "2",
             "--top-k", "2", "--shard-size", str(shard), "--output", str(tmp_path / "d.json")]  # fmt: skip
    args, _ = select.parse_args(flags)
    release = select.declared(args)
    assert release.prepared.job.shard_size == shard
    shards = release_shards(tmp_path, "d", release)
    draws = []
    for seed in range(DRAWS // 2):
        step = release.query.final_step(release.unit, release.budget, seed)
        draws.append(tuple(c if c in heavy else "z" for c in step.select(shards)))
    pmf = lumped_peeling_pmf(heavy, 2 * shard - len(heavy), release.budget.epsilon, release.query.k)
    record_sampler(audit, "pipelines.select k=2, 2 shards of 2^16", draws, pmf)
