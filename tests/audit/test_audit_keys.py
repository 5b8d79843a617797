"""Audit of the mechanisms that release keys found in the data: (epsilon, delta)-DP, exactly.

For every pair of neighbouring per-key row counts on a small universe of keys (one unit's rows
added: at most K rows over at most L keys), the law of the output from its definition
(references.py) on both, and the hockey-stick divergence at epsilon both ways: at most delta.
Then the real sampler against that law (chi-square, seeded). delta is large here so that the
events it pays for are frequent enough to show.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import gmpy2
import numpy as np
import pyarrow as pa
import pytest
from privacy_loss import hockey_stick, record_sampler, unit_contributions
from references import keys_then_exponential_pmf, limited_domain_pmf, partition_selection_pmf

from beam_expmech.mechanisms.limited_domain import limited_domain_top_k
from beam_expmech.mechanisms.partition_selection import PartitionSelection
from beam_expmech.mechanisms.randomness import random_source
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


@pytest.mark.parametrize("max_keys", [1, 2, 3])
def test_partition_selection_is_epsilon_delta_dp(audit, max_keys):
    rule = PartitionSelection(epsilon=EPSILON, delta=DELTA, max_keys=max_keys)
    units = [np.array([1 if key in keys else 0 for key in range(KEYS)])
             for size in range(1, max_keys + 1) for keys in itertools.combinations(range(KEYS), size)]  # fmt: skip
    worst, pairs = worst_delta(lambda counts: partition_selection_pmf(counts, rule.probability), units)
    audit.check(f"partition selection L={max_keys}", "(eps, delta)-DP: hockey stick", cases=pairs, worst=worst,
                bound=DELTA)  # fmt: skip
    assert worst > DELTA / 20


@pytest.mark.parametrize("max_keys", [1, 3])
def test_partition_selection_sampler_follows_its_rule(audit, max_keys):
    rule = PartitionSelection(epsilon=EPSILON, delta=DELTA, max_keys=max_keys)
    units = np.array([1, 2, rule.units_needed(0.5), rule.always])
    source = random_source(np.random.default_rng(max_keys))
    draws = [tuple(np.flatnonzero(rule.keep(units, source)).tolist()) for _ in range(3_000)]
    record_sampler(audit, f"partition selection L={max_keys}", draws, partition_selection_pmf(units, rule.probability))


# --- the command line's step over keys found in the data, as pipelines.select builds it ------------


def command_line_step(mechanism: str, k: int, max_rows: int, max_keys: int, seed: int):
    args, _ = select.parse_args(["--input", "x", "--column", "query", "--epsilon", str(EPSILON), "--delta", str(DELTA),
                                 "--top-k", str(k), "--privacy-unit", "user", "--max-rows-per-unit", str(max_rows),
                                 "--max-keys-per-unit", str(max_keys), "--mechanism", mechanism, "--seed", str(seed),
                                 "--output", "x.json"])  # fmt: skip
    select.check_flags(args)
    return select.key_selection(args)


def shards_of(rows, units, shards: int) -> list[tuple[int, pa.Table]]:
    """Per-key totals of keys "k0", "k1", ... (absent when no unit holds it), spread over ``shards``."""
    present = [i for i in range(len(rows)) if units[i] > 0]
    return [(s, pa.table({KEY: [f"k{i}" for i in present if i % shards == s],
                          ROWS: pa.array([rows[i] for i in present if i % shards == s], pa.int64()),
                          UNITS: pa.array([units[i] for i in present if i % shards == s], pa.int64())}))
            for s in range(shards)]  # fmt: skip


CLEAR = ([40, 30, 26, 3], [20, 15, 13, 2])  # (rows, units) per key; no ties: the definitions' tie rules do not matter
FEW_UNITS = ([9, 8, 6, 3], [4, 4, 3, 2])  # whether partition selection keeps a key is a coin
CLOSE_ROWS = ([12, 10, 8, 3], [40, 40, 40, 40])  # every key kept: the exponential mechanism's epsilon shows
SHIPPED = [("limited-domain", 2, 2, 2, 1, CLEAR), ("limited-domain", 3, 1, 1, 2, CLEAR),
           ("keys-then-exponential", 2, 2, 2, 2, FEW_UNITS), ("keys-then-exponential", 1, 1, 1, 1, FEW_UNITS),
           ("keys-then-exponential", 2, 1, 1, 2, CLOSE_ROWS)]  # fmt: skip


@pytest.mark.parametrize("mechanism,k,max_rows,max_keys,shards,data", SHIPPED)
def test_the_command_lines_key_selection_follows_its_definition(audit, mechanism, k, max_rows, max_keys, shards, data):
    rows, units = data
    draws = []
    for seed in range(2_000):
        chosen = command_line_step(mechanism, k, max_rows, max_keys, seed).release(shards_of(rows, units, shards))
        draws.append(tuple(int(key[1:]) for key in chosen))
    if mechanism == "limited-domain":
        pmf = limited_domain_pmf(rows, k, k, EPSILON, DELTA, max_rows, max_keys)
    else:
        pmf = keys_then_exponential_pmf(rows, units, k, EPSILON, DELTA, 0.5, max_rows, max_keys)
    record_sampler(audit, f"select keys {mechanism} k={k} K={max_rows} L={max_keys}", draws, pmf)


@pytest.mark.parametrize("k,max_rows,max_keys", [(1, 1, 1), (2, 2, 2)])
def test_keys_then_exponential_is_epsilon_delta_dp(audit, k, max_rows, max_keys):
    """Per key (rows, units), rows >= units; a unit adds one unit to each of at most L keys and at most K rows
    over them (at least one each)."""
    states = [(0, 0), (1, 1), (2, 1), (2, 2), (3, 2)]
    worst, pairs = 0.0, 0
    for base in itertools.product(states, repeat=3):
        rows, units = [r for r, _ in base], [u for _, u in base]
        p = keys_then_exponential_pmf(rows, units, k, EPSILON, DELTA, 0.5, max_rows, max_keys)
        for added in unit_contributions(3, max_rows, max_keys):
            q = keys_then_exponential_pmf([r + a for r, a in zip(rows, added, strict=True)],
                                          [u + (a > 0) for u, a in zip(units, added, strict=True)],
                                          k, EPSILON, DELTA, 0.5, max_rows, max_keys)  # fmt: skip
            worst = max(worst, hockey_stick(p, q, EPSILON), hockey_stick(q, p, EPSILON))
            pairs += 1
    audit.check(f"keys then exponential k={k} K={max_rows} L={max_keys}", "(eps, delta)-DP: hockey stick",
                cases=pairs, worst=worst, bound=DELTA)  # fmt: skip
    assert worst > DELTA / 20
