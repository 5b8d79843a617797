"""Audit of the mechanisms that release keys found in the data: (epsilon, delta)-DP, exactly.

For every pair of neighbouring per-key row counts on a small universe of keys (one unit's rows
added: at most K rows over at most L keys), the law of the output from its definition
(references.py) on both, and the hockey-stick divergence at epsilon both ways: at most delta.
Then the real sampler against that law (chi-square, seeded). delta is large here so that the
events it pays for are frequent enough to show.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import gmpy2
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from privacy_loss import hockey_stick, record_sampler, unit_contributions
from references import (
    gaussian_tail,
    keys_then_exponential_pmf,
    keys_then_laplace_pmf,
    limited_domain_pmf,
    optimal_partition_rule,
    partition_selection_pmf,
)

from beam_expmech.accounting import zcdp_to_epsilon
from beam_expmech.mechanisms.limited_domain import limited_domain_top_k
from beam_expmech.mechanisms.partition_selection import PartitionSelection
from beam_expmech.mechanisms.randomness import random_source
from beam_expmech.transforms import keys
from beam_expmech.transforms.keys import KEY, ROWS, UNITS
from pipelines import select

EPSILON, DELTA = 1.0, 0.05
KEYS = 4


def worst_delta(pmf_of, contributions) -> tuple[float, int]:
    """The largest hockey-stick divergence at EPSILON over every count grid point and unit, both ways."""
    worst, pairs = 0.0, 0
    for counts in itertools.product(range(4), repeat=KEYS):
        base = pmf_of(np.array(counts))
        for unit in contributions:
            other = pmf_of(np.array(counts) + unit)
            worst = max(worst, hockey_stick(base, other, EPSILON), hockey_stick(other, base, EPSILON))
            pairs += 1
    return worst, pairs


# --- top-k over keys found in the data: the limited-domain mechanism -----------------------------

LIMITED_DOMAIN = [  # (k, kbar, K rows per unit, L keys per unit)
    (1, 1, 1, 1),
    (1, 2, 2, 2),
    (2, 2, 1, 2),
    (2, 3, 2, 2),
    (3, 3, 1, 3),
]


@pytest.mark.parametrize("k,kbar,max_rows,max_keys", LIMITED_DOMAIN)
def test_limited_domain_is_epsilon_delta_dp(audit, k, kbar, max_rows, max_keys):
    def pmf_of(counts):
        return limited_domain_pmf(counts, k, kbar, EPSILON, DELTA, max_rows, max_keys)

    worst, pairs = worst_delta(pmf_of, list(unit_contributions(KEYS, max_rows, max_keys)))
    audit.check(f"limited domain k={k} kbar={kbar} K={max_rows} L={max_keys}", "(eps, delta)-DP: hockey stick",
                cases=pairs, worst=worst, bound=DELTA)  # fmt: skip
    assert worst > DELTA / 20  # the grid reaches the events delta pays for: the check has teeth


@pytest.mark.parametrize("k,kbar,max_rows,max_keys", LIMITED_DOMAIN)
@pytest.mark.parametrize("counts", [(9, 9, 8, 0), (3, 1, 1, 1), (30, 2, 2, 1), (6, 2, 0, 0), (5, 0, 0, 0)])
def test_limited_domain_sampler_follows_its_definition(audit, counts, k, kbar, max_rows, max_keys):
    present = sorted((key for key, c in enumerate(counts) if c > 0), key=lambda key: (-counts[key], key))
    top, rest = present[:kbar], present[kbar:]
    source = random_source(np.random.default_rng([k, kbar, max_rows, max_keys, *counts]))
    draws = []
    for _ in range(3_000):
        drawn = limited_domain_top_k([counts[key] for key in top], counts[rest[0]] if rest else 0, k, kbar=kbar,
                                     epsilon=EPSILON, delta=DELTA, max_rows=max_rows, max_keys=max_keys,
                                     rng=source)  # fmt: skip
        draws.append(tuple(top[i] for i in drawn))
    pmf = limited_domain_pmf(counts, k, kbar, EPSILON, DELTA, max_rows, max_keys)
    record_sampler(audit, f"limited domain k={k} kbar={kbar} K={max_rows} L={max_keys}", draws, pmf)


# --- partition selection ----------------------------------------------------------------------


@pytest.mark.parametrize("epsilon,delta,max_keys", [(1.0, 1e-6, 1), (0.3, 1e-9, 3), (4.0, 0.05, 2)])
def test_partition_selection_rule_is_the_optimal_one_and_keeps_both_inequalities(audit, epsilon, delta, max_keys):
    """p(n) <= e^x p(n-1) + d and 1 - p(n-1) <= e^x (1 - p(n)) + d at x = epsilon / L, d = delta / L, checked
    with e^x rounded down at 256 bits; and p is the optimal rule (floats) to 1e-9 relative: a rule of zeros is safe
    but useless (the float recursion itself drifts by e^(n x) ulps)."""
    rule = PartitionSelection(epsilon=epsilon, delta=delta, max_keys=max_keys)
    with gmpy2.context(precision=256, round=gmpy2.RoundDown):
        grow = Fraction(*gmpy2.exp(gmpy2.mpfr(Fraction(epsilon) / max_keys)).as_integer_ratio())
    d = Fraction(delta) / max_keys
    worst, optimal = Fraction(-1), 0.0
    for n in range(1, rule.always + 2):
        p, before = rule.probability(n), rule.probability(n - 1)
        worst = max(worst, p - (grow * before + d), (1 - before) - (grow * (1 - p) + d))
        optimal = min(1.0, np.exp(epsilon / max_keys) * optimal + delta / max_keys,
                      1 - np.exp(-epsilon / max_keys) * (1 - optimal - delta / max_keys))  # fmt: skip
        assert float(p) == pytest.approx(optimal, rel=1e-9, abs=1e-15)
    audit.check(f"partition selection rule L={max_keys}", "DP inequalities, exact: max excess", cases=rule.always,
                worst=max(0.0, float(worst)), bound=0.0)  # fmt: skip
    assert worst <= 0  # exactly: an excess of 2^-64 (a probability rounded up) is below the table's float slack


RULES = [("optimal", 1), ("optimal", 2), ("optimal", 3), ("gaussian", 2), ("gaussian", 3)]


@pytest.mark.parametrize("rule_name,max_keys", RULES)
def test_partition_selection_is_epsilon_delta_dp(audit, rule_name, max_keys):
    rule = PartitionSelection(epsilon=EPSILON, delta=DELTA, max_keys=max_keys, rule=rule_name)
    units = [np.array([1 if key in keys else 0 for key in range(KEYS)])
             for size in range(1, max_keys + 1) for keys in itertools.combinations(range(KEYS), size)]  # fmt: skip
    worst, pairs = worst_delta(lambda counts: partition_selection_pmf(counts, rule.probability), units)
    audit.check(f"partition selection {rule_name} L={max_keys}", "(eps, delta)-DP: hockey stick", cases=pairs,
                worst=worst, bound=DELTA)  # fmt: skip
    assert worst > DELTA / 20


@pytest.mark.parametrize(
    "epsilon,delta,max_keys",
    [(1.0, 1e-6, 2), (0.3, 1e-9, 5), (4.0, 0.05, 30), (0.05, 1e-12, 40), (EPSILON * 0.5, DELTA, 7)],
)  # the last: the command line's share in test_the_command_lines_key_selection_follows_its_definition
def test_gaussian_thresholding_is_the_gaussian_mechanism_thresholded(audit, epsilon, delta, max_keys):
    """The table is P(Z >= T - n) for the discrete Gaussian (floats, 1e-9); sigma^2 is (eps', delta / 2 - slack)-DP
    as L / (2 sigma^2)-zCDP (slack: the table's rounding), eps' = epsilon - ln(1 / (1 - delta / 2)); T is the least
    with L P(Z >= T - 1) <= delta / 2."""
    rule = PartitionSelection(epsilon=epsilon, delta=delta, max_keys=max_keys, rule="gaussian")
    sigma2, threshold = float(rule.gaussian.sigma2), rule.gaussian.threshold
    tail = gaussian_tail(sigma2)
    assert max_keys * tail(threshold - 1) <= delta / 2 < max_keys * tail(threshold - 2)
    rounding = Fraction(2 * math.ceil(math.exp(epsilon) * (1 + 1e-9)) * max_keys, 1 << 62)  # >= (1 + e^eps) L 2^-62
    noise_delta = Fraction(delta) / 2 - rounding
    spent = zcdp_to_epsilon(max_keys / (2 * sigma2), delta=float(noise_delta) * (1 - 1e-15))  # rounded down
    assert spent <= epsilon + np.log1p(-delta / 2) and spent > 0.999 * (epsilon + np.log1p(-delta / 2))
    worst = max(abs(float(rule.probability(n)) - tail(threshold - n)) for n in range(1, rule.always + 3))
    audit.check(f"gaussian thresholding eps={epsilon} L={max_keys}", "table against P(Z >= T - n): max error",
                cases=rule.always, worst=worst, bound=1e-9)  # fmt: skip
    assert worst <= 1e-9


@pytest.mark.parametrize("rule_name,max_keys", [("optimal", 1), ("optimal", 3), ("gaussian", 3)])
def test_partition_selection_sampler_follows_its_rule(audit, rule_name, max_keys):
    rule = PartitionSelection(epsilon=EPSILON, delta=DELTA, max_keys=max_keys, rule=rule_name)
    units = np.array([1, 2, rule.units_needed(0.5), rule.always])
    source = random_source(np.random.default_rng(max_keys))
    draws = [tuple(np.flatnonzero(rule.keep(units, source)).tolist()) for _ in range(3_000)]
    record_sampler(audit, f"partition selection {rule_name} L={max_keys}", draws,
                   partition_selection_pmf(units, rule.probability))  # fmt: skip


# --- keys found in the data: the final step of the release pipelines.select declares -------------


def command_line_steps(tmp_path, mechanism: str, k: int, max_rows: int, max_keys: int, seeds: range):
    """The final step of the release pipelines.select declares from these flags (``Select(column, None, ...)
    .final_step(unit, budget, seed)``), under each test seed (the flags parsed and declared once)."""
    pq.write_table(pa.table({"user": [0], "query": ["k0"]}), tmp_path / "x.parquet")
    args, _ = select.parse_args(["--input", str(tmp_path / "x.parquet"), "--column", "query", "--epsilon",
                                 str(EPSILON), "--delta", str(DELTA), "--top-k", str(k), "--privacy-unit", "user",
                                 "--max-rows-per-unit", str(max_rows), "--max-keys-per-unit", str(max_keys),
                                 "--mechanism", mechanism, "--seed", "0",
                                 "--output", str(tmp_path / "x.json")])  # fmt: skip
    select.check_flags(args)
    release = select.declared(args)
    assert release.query.candidates is None and release.unit.keys == max_keys
    for seed in seeds:
        yield release.query.final_step(release.unit, release.budget, seed)


def shards_of(rows, units, shards: int) -> list[tuple[int, pa.Table]]:
    """Per-key totals of keys "k0", "k1", ... (absent when no unit holds it), spread over ``shards``."""
    present = [i for i in range(len(rows)) if units[i] > 0]
    return [(s, pa.table({KEY: [f"k{i}" for i in present if i % shards == s],
                          ROWS: pa.array([rows[i] for i in present if i % shards == s], pa.int64()),
                          UNITS: pa.array([units[i] for i in present if i % shards == s], pa.int64())}))
            for s in range(shards)]  # fmt: skip


CLEAR = ([40, 30, 26, 3], [20, 15, 13, 2])  # (rows, units) per key; no ties: the definitions' tie rules do not matter
FEW_UNITS = ([9, 8, 6, 3], [4, 4, 3, 2])  # whether partition selection keeps a key is a coin
CLOSE_ROWS = ([12, 10, 8, 3], [40, 40, 40, 40])  # every key kept: the second stage's epsilon shows
TIED_ROWS = ([9, 9, 8, 3], [40, 40, 40, 40])  # noisy counts tie often: the tie rule shows
NEAR_THRESHOLD = ([70, 60, 50, 45], [28, 25, 22, 30])  # 7 keys a unit: Gaussian thresholding, each key a coin
SHIPPED = [("limited-domain", 2, 2, 2, 1, CLEAR), ("limited-domain", 3, 1, 1, 2, CLEAR),
           ("keys-then-exponential", 2, 2, 2, 2, FEW_UNITS), ("keys-then-exponential", 1, 1, 1, 1, FEW_UNITS),
           ("keys-then-exponential", 2, 1, 1, 2, CLOSE_ROWS),
           ("keys-then-laplace", 2, 2, 2, 2, FEW_UNITS), ("keys-then-laplace", 1, 1, 1, 2, FEW_UNITS),
           ("keys-then-laplace", 2, 1, 1, 2, CLOSE_ROWS), ("keys-then-laplace", 3, 1, 1, 1, TIED_ROWS),
           ("keys-then-laplace", 2, 7, 7, 2, NEAR_THRESHOLD)]  # fmt: skip
KEYS_FIRST = {"keys-then-exponential": keys_then_exponential_pmf, "keys-then-laplace": keys_then_laplace_pmf}


def reference_rule(step, max_keys: int):
    """pi(n) of partition selection at the command line's share (EPSILON / 2, DELTA, L), from its definition in
    floats: the optimal rule's recursion, or P(Z >= T - n) for Gaussian thresholding at the sigma^2 and T that
    test_gaussian_thresholding_is_the_gaussian_mechanism_thresholded checks against the same share (L = 7)."""
    rule = step.keys.rule
    if rule.gaussian is None:
        return optimal_partition_rule(EPSILON * 0.5, DELTA, max_keys)
    assert (rule.epsilon, rule.delta, rule.max_keys) == (EPSILON * 0.5, DELTA, max_keys)
    tail = gaussian_tail(float(rule.gaussian.sigma2))
    return lambda n: tail(rule.gaussian.threshold - n) if n > 0 else 0.0


def second_stage_spends(monkeypatch, mechanism: str) -> list[float]:
    """Record the epsilon / sensitivity each second-stage draw is given (the noise's inverse scale)."""
    name = {"keys-then-laplace": "discrete_laplace_mechanism", "keys-then-exponential": "top_k"}[mechanism]
    real, spent = getattr(keys, name), []

    def recorded(*args, epsilon, sensitivity, **kwargs):
        spent.append(epsilon / sensitivity)
        return real(*args, epsilon=epsilon, sensitivity=sensitivity, **kwargs)

    monkeypatch.setattr(keys, name, recorded)
    return spent


@pytest.mark.parametrize("mechanism,k,max_rows,max_keys,shards,data", SHIPPED)
def test_the_command_lines_key_selection_follows_its_definition(
    audit, tmp_path, monkeypatch, mechanism, k, max_rows, max_keys, shards, data
):
    rows, units = data
    spent = second_stage_spends(monkeypatch, mechanism) if mechanism in KEYS_FIRST else []
    draws, counts = [], shards_of(rows, units, shards)
    for step in command_line_steps(tmp_path, mechanism, k, max_rows, max_keys, range(2_000)):
        draws.append(tuple(int(key[1:]) for key in step.release(counts)))
    if mechanism == "limited-domain":
        pmf = limited_domain_pmf(rows, k, k, EPSILON, DELTA, max_rows, max_keys)
    else:
        assert step.keys.rule.rule == ("gaussian" if max_keys == 7 else "optimal")  # both rules are audited here
        # (the keys are PrivateKeys' for either second stage: Gaussian thresholding is audited once, below)
        pmf = KEYS_FIRST[mechanism](rows, units, k, EPSILON, DELTA, 0.5, max_rows, max_keys,
                                    reference_rule(step, max_keys))  # fmt: skip
        # Exactly, beside the chi-square (which misses a scale 20% off): every draw at the rest of epsilon / K.
        assert spent and set(spent) == {EPSILON * 0.5 / max_rows}
    record_sampler(audit, f"select keys {mechanism} k={k} K={max_rows} L={max_keys} {rows}", draws, pmf)


@pytest.mark.parametrize("mechanism", KEYS_FIRST)
@pytest.mark.parametrize("k,max_rows,max_keys", [(1, 1, 1), (2, 2, 2)])
def test_keys_first_is_epsilon_delta_dp(audit, mechanism, k, max_rows, max_keys):
    """Per key (rows, units), rows >= units; a unit adds one unit to each of at most L keys and at most K rows
    over them (at least one each)."""
    states = [(0, 0), (1, 1), (2, 1), (2, 2), (3, 2)]
    worst, pairs = 0.0, 0
    for base in itertools.product(states, repeat=3):
        rows, units = [r for r, _ in base], [u for _, u in base]
        p = KEYS_FIRST[mechanism](rows, units, k, EPSILON, DELTA, 0.5, max_rows, max_keys)
        for added in unit_contributions(3, max_rows, max_keys):
            q = KEYS_FIRST[mechanism]([r + a for r, a in zip(rows, added, strict=True)],
                                      [u + (a > 0) for u, a in zip(units, added, strict=True)],
                                      k, EPSILON, DELTA, 0.5, max_rows, max_keys)  # fmt: skip
            worst = max(worst, hockey_stick(p, q, EPSILON), hockey_stick(q, p, EPSILON))
            pairs += 1
    audit.check(f"{mechanism} k={k} K={max_rows} L={max_keys}", "(eps, delta)-DP: hockey stick",
                cases=pairs, worst=worst, bound=DELTA)  # fmt: skip
    assert worst > DELTA / 20
