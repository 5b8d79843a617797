"""AIM's defaults, chosen on half of bench_synth's tables and never on the other half.

    python -m benchmarks.tune_synth [--seeds 3] [--epsilons 1.0,0.3] [--shares 0.25,0.5,0.75] [--rounds 4,8,16,32]
                                    [--rare none,3] [--smoothing 0.5] [--tables diabetes,anes96,fair]
    python -m benchmarks.tune_synth --one-ways 0,0.25,0.5,1 [--seeds 15] [--epsilons 0.1,0.3,1]
                                    [--tables diabetes,anes96]

The rule, fixed before any run (2026-12-02, issue 16):
  * the split: bench_synth's ten tables sorted by their number of rows, the 2nd, 4th, ... tune
    (``TUNING``: diabetes, anes96, fair, nltcs, payroll) and the 1st, 3rd, ... are only reported
    (``REPORTED``: penguins, breast_cancer, titanic, randhie, wide). Alternating by size keeps both
    halves alike in size; this parity keeps the slowest table (wide) out of the grid.
  * the grid: AIM's share of rho on the 1-way marginals times its rounds per column (rounds = that
    times the number of columns; the first rounds' budget is the rest of rho over the rounds), and
    (2026-12-03) times whether rare codes are merged (``aim(rare=...)``: none, or MST's 3), and
    (2026-12-03, later) times the weight of an ordered column's neighbouring bins in a merged code's
    spread (``aim(smoothing=...)``).
  * the rules: a setting for every table, or one for large data and one for small (the same rounds,
    merging and smoothing, a larger share of rho on the 1-ways for small data), where small means
    fewer than z0 rows per unit of the noise a measurement spending all of rho would have (the rows,
    estimated by AIM from its noisy 1-ways, times sqrt(2 rho) / K), z0 in 30, 100, 300, 1000. A rule's
    error on a (table, epsilon) is its setting's from the grid, picked by the table's true size (AIM's
    estimate is within a few rows of it on these tables: a rule near a table's z would be said so).
  * the score of a rule: over (tuning table, epsilon), the median over the seeds of its model's
    average 3-way error divided by the same for the old defaults (half of rho on the 1-ways, 16
    rounds a column), multiplied and rooted (a geometric mean, so that no table's scale dominates).
    The lowest score wins; a rule within 1% of the old defaults' 1.0 does not replace them.

Every setting runs the same seeds. Privacy does not enter: each run is a complete AIM at the given rho.
The rule chosen on 2026-12-02 (docs/benchmarks.md): a quarter of rho on the 1-ways, 90% on small data
(z0 = 300), 4 rounds a column. On 2026-12-03, with merging in the grid: the same shares, rare codes
merged, 16 rounds a column: aim()'s defaults since. Then the smoothing weight, the rest held at that
rule's values: ``--shares 0.25,0.9 --rounds 16 --rare 3 --smoothing 0,0.25,0.5,1 --seeds 10 --tables
diabetes,anes96,fair`` (the tuning tables with numeric columns; nltcs and payroll have none, so every
weight scores alike there), docs/benchmarks.md. On 2026-12-04 the small data's share again, with merging
and smoothing at those values: ``--shares 0.25,0.5,0.75,0.9 --rounds 16 --rare 3 --smoothing 0.5 --seeds 10
--tables diabetes,anes96,fair`` (nltcs and payroll are large data at both epsilons, z over 1,000, where
every rule whose large-data share is 0.25 picks the same setting: they cannot reorder those rules):
0.25, 0.75 under 300 (score 0.9463; 0.9 under 300: 0.9604).

``--one-ways W,...`` (issue 38) scores auto's independent path instead (``choice.independent_one_ways``, the
count taken as the true size): the median model error over the seeds with each smoothing weight W (noise scales
added to each clipped count), divided by W = 0's, beside each (table, epsilon)'s z. On the tuning tables where
auto takes that path (diabetes and anes96 at small z; fair, nltcs and payroll never do), W = 1 - z / 40 under
z = 40 (``choice.SMOOTH_Z``) was read off this table: ``--one-ways 0,0.25,0.5,1 --seeds 15 --epsilons 0.1,0.3,1
--tables diabetes,anes96``.
"""

from __future__ import annotations

import argparse
import itertools
import math
import time

import numpy as np

from beam_expmech.accounting import epsilon_to_zcdp
from beam_expmech.mechanisms.randomness import random_source
from beam_expmech.synth.aim import aim
from beam_expmech.synth.choice import count_and_rho, independent_one_ways
from benchmarks.bench_synth import DELTA, counts, errors, load

TUNING = ["diabetes", "anes96", "fair", "nltcs", "payroll"]
REPORTED = ["penguins", "breast_cancer", "titanic", "randhie", "wide"]
DEFAULTS = (0.5, 16, None, 0.0)  # (one_way_share, rounds per column, rare, smoothing) in aim() before this rule ran
MARGIN = 0.01  # a rule must beat the old defaults by this much to replace them
SMALL = [30, 100, 300, 1000]  # z0: rows per unit of noise under which a table is small


def model_error(
    true: dict,
    domain: dict[str, int],
    ordered: frozenset[str],
    rho: float,
    seed: int,
    setting: tuple[float, int, float | None, float],
) -> float:
    share, per_column, rare, smoothing = setting
    rounds = per_column * len(domain)
    model = aim(
        true,
        domain,
        rho=rho,
        rng=seed,
        one_way_share=share,
        rounds=rounds,
        rare=rare,
        ordered=ordered,
        smoothing=smoothing,
    ).model
    return errors(true, lambda m: model.project(m) / model.total)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epsilons", default="1.0,0.3")
    parser.add_argument("--shares", default="0.25,0.5,0.75")
    parser.add_argument("--rounds", default="4,8,16,32", help="rounds per column")
    parser.add_argument("--rare", default="none,3", help="aim(rare=...): none never merges codes")
    parser.add_argument("--smoothing", default="0.5", help="aim(smoothing=...): 0 never smooths")
    parser.add_argument("--tables", default=",".join(TUNING))
    parser.add_argument("--one-ways", help="smoothing weights of auto's independent path to score instead")
    args = parser.parse_args()
    if args.one_ways:
        return one_ways(args)
    rares = [None if r == "none" else float(r) for r in args.rare.split(",")]
    settings = list(
        itertools.product(
            map(float, args.shares.split(",")),
            map(int, args.rounds.split(",")),
            rares,
            map(float, args.smoothing.split(",")),
        )
    )
    if DEFAULTS not in settings:
        settings.insert(0, DEFAULTS)
    epsilons = [float(e) for e in args.epsilons.split(",")]
    medians: dict[tuple, dict[tuple, float]] = {s: {} for s in settings}
    print(f"{'table':<9} {'epsilon':>7} " + " ".join(f"{f'{s:g}/{r}/{m}/{w:g}':>15}" for s, r, m, w in settings),
          flush=True)  # fmt: skip
    rows = {}
    for name in args.tables.split(","):
        batch, domain, ordered = load(name)
        rows[name] = batch.num_rows
        true = counts(batch, domain, 3)
        for epsilon in epsilons:
            rho = epsilon_to_zcdp(epsilon, delta=DELTA)
            start = time.perf_counter()
            for setting in settings:
                runs = [model_error(true, domain, ordered, rho, seed, setting) for seed in range(args.seeds)]
                medians[setting][name, epsilon] = float(np.median(runs))
            row = " ".join(f"{medians[s][name, epsilon]:>15.4f}" for s in settings)
            print(f"{name:<9} {epsilon:>7g} {row}   ({time.perf_counter() - start:.0f} s)", flush=True)
    base = medians[DEFAULTS]
    z = {k: rows[k[0]] * math.sqrt(2 * epsilon_to_zcdp(k[1], delta=DELTA)) for k in base}  # K = 1

    def score(pick) -> float:  # pick: (table, epsilon) -> setting
        return float(np.exp(np.mean([np.log(medians[pick(k)][k] / base[k]) for k in base])))

    rules = {f"{s:g} / {r} rounds / rare {m} / smoothing {w:g}": (lambda k, s=(s, r, m, w): s)
             for s, r, m, w in settings}  # fmt: skip
    for (low, *rest), (high, *rest2), z0 in itertools.product(settings, settings, SMALL):
        if rest == rest2 and low < high:
            r, m, w = rest
            rules[f"{low:g}, {high:g} under {z0} / {r} rounds / rare {m} / smoothing {w:g}"] = (
                lambda k, a=(low, *rest), b=(high, *rest), z0=z0: b if z[k] < z0 else a
            )
    scores = {name: score(pick) for name, pick in rules.items()}
    for name in sorted(scores, key=scores.__getitem__)[:10]:
        print(f"{scores[name]:.4f}  {name}")
    best = min(scores, key=scores.__getitem__)
    print(f"chosen: {best if scores[best] < 1 - MARGIN else 'the old defaults'} (score {scores[best]:.4f})")


def one_ways(args: argparse.Namespace) -> None:
    """auto's independent path at each smoothing weight: median error over the seeds, over weight 0's."""
    weights = [float(w) for w in args.one_ways.split(",")]
    print(f"{'table':<9} {'epsilon':>7} {'z':>6} {'W = 0':>8} " + " ".join(f"{f'W = {w:g}':>9}" for w in weights[1:]))
    for name in args.tables.split(","):
        batch, domain, _ = load(name)
        true = counts(batch, domain, 3)
        for epsilon in (float(e) for e in args.epsilons.split(",")):
            count_epsilon, rho = count_and_rho(epsilon, DELTA)
            medians = []
            for weight in weights:
                runs = []
                for seed in range(args.seeds):
                    model = independent_one_ways(true, domain, epsilon=epsilon - count_epsilon, max_rows=1,
                                                 count=(batch.num_rows, count_epsilon), smoothing=weight,
                                                 source=random_source(seed)).model  # fmt: skip
                    runs.append(errors(true, model.marginal)[0])
                medians.append(float(np.median(runs)))
            z = batch.num_rows * math.sqrt(2 * rho)
            ratios = " ".join(f"{m / medians[0]:>9.3f}" for m in medians[1:])
            print(f"{name:<9} {epsilon:>7g} {z:>6.0f} {medians[0]:>8.4f} {ratios}", flush=True)


if __name__ == "__main__":
    main()
