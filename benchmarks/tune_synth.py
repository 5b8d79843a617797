"""AIM's defaults, chosen on half of bench_synth's tables and never on the other half.

    python -m benchmarks.tune_synth [--seeds 3] [--epsilons 1.0,0.3] [--shares 0.25,0.5,0.75] [--rounds 4,8,16,32]
                                    [--rare none,3] [--smoothing 0.5] [--tables diabetes,anes96,fair]
    python -m benchmarks.tune_synth --one-ways 0,0.25,0.5,1 [--seeds 15] [--epsilons 0.1,0.3,1]
                                    [--tables diabetes,anes96]
    python -m benchmarks.tune_synth [--cells diabetes:1.5,fair:0.2,...] [--scores-of FILE]

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

On 2026-12-07 (issue 38), with auto taking its independent path under z = 96, most of the cells that had
chosen the small data's share no longer ran AIM. The shares again, on AIM's cells of the tuning half from z = 113
to 66,653 (``--cells``: the tuning tables at epsilons that put them there, 25 cells), with a large data's
share (0.1) and a third regime in the rule, and rules reading aim.one_way_error (how noisy the 1-ways would
be with all of rho, from the rows and the domain's sizes) as well as z: ``--shares 0.1,0.25,0.75 --rounds 16
--rare 3 --smoothing 0.5 --seeds 6 --cells ...`` (docs/benchmarks.md). Chosen: 0.1, 0.25 from a 1-way error of
0.3, 0.75 from 1 (score 0.8836; with 5 cells more around payroll's and nltcs' crossing, 30 in all, 0.8754, the
same rule). ``--scores-of FILE`` scores the rules again on a table a run printed.

``--ramps LOW:HIGH,...`` (issue 38, 2026-12-07, later) scores the default rule's ramp instead
(``aim.VERY_NOISY_ONE_WAYS``: the 1-way error over which the share rises from a quarter to three quarters; the
rule until then was a step at 1, ``1:1``): AIM with its default shares and each ramp, the median model error over
the seeds divided by the first ramp's, beside each (table, epsilon)'s 1-way error at its true size. 0.7 to 1.1
was chosen by the same comparison made on the commit before (the step with its own draws), on the tuning cells
whose 1-way error is within the noise of the step (docs/benchmarks.md, "the 1-way share's ramp"); on today's
code ``--ramps 1:1,0.7:1.1 --seeds 40 --cells fair:0.1,anes96:1.5`` repeats its two largest gains.

``--one-ways W,...`` (issue 38) scores auto's independent path instead (``choice.independent_one_ways``, the
count taken as the true size, the posterior medians at their weight): the median model error over the seeds with
each smoothing weight W (noise scales added to each clipped count), divided by the first W's, beside each (table,
epsilon)'s z. On the tuning tables where auto takes that path (diabetes and anes96 at small z; fair, nltcs and
payroll never do), W = 1 - z / 40 under z = 40 (``choice.SMOOTH_Z``) was read off this table, before the
posterior medians: ``--one-ways 0,0.25,0.5,1 --seeds 15 --epsilons 0.1,0.3,1 --tables diabetes,anes96``.

``--medians M,...`` scores the same path at today's smoothing rule with each weight M of the 1-ways' empirical
Bayes posterior medians (``choice.MEDIANS_WEIGHT``; 0 is the path before them), divided by the first M's. The
weight 0.5 was chosen on the 21 tuning cells that take the path (docs/benchmarks.md, "the independent path's
1-ways through an empirical Bayes prior"): ``--medians 0,0.5,1 --seeds 60 --cells diabetes:0.05,diabetes:0.1,
...`` (that section lists the cells). There the count's noise was drawn too; here the count is the true size.
"""

from __future__ import annotations

import argparse
import itertools
import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from beam_expmech.accounting import epsilon_to_zcdp
from beam_expmech.mechanisms.randomness import random_source
from beam_expmech.synth import aim as aim_module
from beam_expmech.synth.aim import aim, one_way_error
from beam_expmech.synth.choice import SMOOTH_Z, count_and_rho, independent_one_ways
from beam_expmech.synth.compression import RARE, SMOOTHING
from benchmarks.bench_synth import DELTA, counts, errors, load

TUNING = ["diabetes", "anes96", "fair", "nltcs", "payroll"]
REPORTED = ["penguins", "breast_cancer", "titanic", "randhie", "wide"]
DEFAULTS = (0.5, 16, None, 0.0)  # (one_way_share, rounds per column, rare, smoothing) in aim() before this rule ran
AIM_DEFAULTS = (None, aim_module.ROUNDS_PER_COLUMN, RARE, SMOOTHING)  # aim()'s today: its rule picks the shares
MARGIN = 0.01  # a rule must beat the old defaults by this much to replace them
SMALL = [30, 100, 300, 1000]  # z0: rows per unit of noise under which a table is small
ONE_WAY_ERRORS = [0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0]  # e0: aim.one_way_error from which the 1-ways are noisy


def model_error(
    true: dict,
    domain: dict[str, int],
    ordered: frozenset[str],
    rho: float,
    seed: int,
    setting: tuple[float | None, int, float | None, float],
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
    parser.add_argument("--cells", help="TABLE:EPSILON,... to run instead of every table at every epsilon")
    parser.add_argument("--one-ways", help="smoothing weights of auto's independent path to score instead")
    parser.add_argument("--medians", help="weights of the posterior medians on auto's independent path to score")
    parser.add_argument("--scores-of", metavar="FILE", help="score the rules on a grid this command printed before")
    parser.add_argument("--ramps", help="LOW:HIGH,...: the default rule's ramps of the 1-way share to score instead")
    args = parser.parse_args()
    if args.one_ways:
        return one_ways(args)
    if args.medians:
        return medians_weights(args)
    if args.ramps:
        return ramps(args)
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
    medians = read_grid(args.scores_of) if args.scores_of else run_grid(settings, cells_to_run(args), args.seeds)
    choose(medians)


def run_grid(settings: list[tuple], cells: dict[str, list[float]], seeds: int) -> dict[tuple, dict[tuple, float]]:
    """{setting: {(table, epsilon): median model error over the seeds}}, printed as a table as it runs."""
    medians: dict[tuple, dict[tuple, float]] = {s: {} for s in settings}
    print(f"{'table':<9} {'epsilon':>7} " + " ".join(f"{f'{s:g}/{r}/{m}/{w:g}':>15}" for s, r, m, w in settings),
          flush=True)  # fmt: skip
    for name, epsilons in cells.items():
        batch, domain, ordered = load(name)
        true = counts(batch, domain, 3)
        for epsilon in epsilons:
            rho = epsilon_to_zcdp(epsilon, delta=DELTA)
            start = time.perf_counter()
            for setting in settings:
                runs = [model_error(true, domain, ordered, rho, seed, setting) for seed in range(seeds)]
                medians[setting][name, epsilon] = float(np.median(runs))
            row = " ".join(f"{medians[s][name, epsilon]:>15.4f}" for s in settings)
            print(f"{name:<9} {epsilon:>7g} {row}   ({time.perf_counter() - start:.0f} s)", flush=True)
    return medians


def read_grid(path: str) -> dict[tuple, dict[tuple, float]]:
    """``run_grid``'s medians, read back from the table it printed (the rules scored again, nothing rerun)."""
    lines = Path(path).read_text().splitlines()
    settings = []
    for label in lines[0].split()[2:]:
        share, rounds, rare, smoothing = label.split("/")
        settings.append((float(share), int(rounds), None if rare == "None" else float(rare), float(smoothing)))
    medians: dict[tuple, dict[tuple, float]] = {s: {} for s in settings}
    for line in lines[1:]:
        name, epsilon, *values = line.split()
        if name in TUNING:
            for setting, value in zip(settings, values[: len(settings)], strict=True):
                medians[setting][name, float(epsilon)] = float(value)
    return medians


def choose(medians: dict[tuple, dict[tuple, float]]) -> None:
    """Score every rule over the grid's cells and print the best ten and the one chosen."""
    settings = list(medians)
    base = medians[DEFAULTS]
    tables = {name: load(name) for name, _ in base}
    rows = {name: batch.num_rows for name, (batch, _, _) in tables.items()}
    z = {k: rows[k[0]] * math.sqrt(2 * epsilon_to_zcdp(k[1], delta=DELTA)) for k in base}  # K = 1
    error = {k: one_way_error(tables[k[0]][1], rows=rows[k[0]], rho=epsilon_to_zcdp(k[1], delta=DELTA)) for k in base}

    def score(pick) -> float:  # pick: (table, epsilon) -> setting
        return float(np.exp(np.mean([np.log(medians[pick(k)][k] / base[k]) for k in base])))

    rules = {f"{s:g} / {r} rounds / rare {m} / smoothing {w:g}": (lambda k, s=(s, r, m, w): s)
             for s, r, m, w in settings}  # fmt: skip
    # A larger share of rho on the 1-ways where the data is small: fewer rows per unit of noise (z, the rules
    # until 2026-12-07), or noisier 1-ways (aim.one_way_error, the domain's sizes too); with two thresholds
    # the stricter one gives the largest share.
    families = {
        "z under": (SMALL, lambda k, z0: z[k] < z0, min),
        "one_way_error from": (ONE_WAY_ERRORS, lambda k, e0: error[k] >= e0, max),
    }
    for family, (thresholds, small, stricter) in families.items():
        for (low, *rest), (high, *rest2), t in itertools.product(settings, settings, thresholds):
            if rest == rest2 and low < high:
                rules[f"{low:g}, {high:g} {family} {t:g} / {_rest(rest)}"] = (
                    lambda k, a=(low, *rest), b=(high, *rest), t=t, small=small: b if small(k, t) else a
                )
        for (low, *rest), (mid, *rest2), (high, *rest3), pair in itertools.product(
            settings, settings, settings, itertools.combinations(thresholds, 2)
        ):
            if rest == rest2 == rest3 and low < mid < high:
                inner = stricter(pair)
                outer = pair[0] if inner == pair[1] else pair[1]
                rules[f"{low:g}, {mid:g} {family} {outer:g}, {high:g} {family} {inner:g} / {_rest(rest)}"] = (
                    lambda k, a=(low, *rest), b=(mid, *rest), c=(high, *rest), i=inner, o=outer, small=small: (
                        c if small(k, i) else b if small(k, o) else a
                    )
                )
    scores = {name: score(pick) for name, pick in rules.items()}
    for name in sorted(scores, key=scores.__getitem__)[:10]:
        print(f"{scores[name]:.4f}  {name}")
    best = min(scores, key=scores.__getitem__)
    print(f"chosen: {best if scores[best] < 1 - MARGIN else 'the old defaults'} (score {scores[best]:.4f})")


def _rest(setting: list) -> str:
    """A setting's rounds, merging and smoothing, as the rules' names show them."""
    rounds, rare, smoothing = setting
    return f"{rounds} rounds / rare {rare} / smoothing {smoothing:g}"


def cells_to_run(args: argparse.Namespace) -> dict[str, list[float]]:
    """{table: its epsilons}: ``--cells``, or every table of ``--tables`` at every epsilon of ``--epsilons``;
    a reported table refused (the rule never sees that half)."""
    if not args.cells:
        return {name: [float(e) for e in args.epsilons.split(",")] for name in args.tables.split(",")}
    cells: dict[str, list[float]] = {}
    for cell in args.cells.split(","):
        name, epsilon = cell.split(":")
        cells.setdefault(name, []).append(float(epsilon))
    if reported := sorted(set(cells) & set(REPORTED)):
        raise SystemExit(f"--cells: {', '.join(reported)} are on the reported half")
    return cells


def one_ways(args: argparse.Namespace) -> None:
    """auto's independent path at each smoothing weight: median error over the seeds, over the first weight's."""
    independent_path(args, "W", args.one_ways, lambda weight, z: {"smoothing": weight})


def medians_weights(args: argparse.Namespace) -> None:
    """auto's independent path, today's smoothing, at each weight of its posterior medians: median error over the
    seeds, over the first weight's."""
    independent_path(args, "M", args.medians,
                     lambda weight, z: {"smoothing": max(0.0, 1 - z / SMOOTH_Z), "medians_weight": weight})  # fmt: skip


def independent_path(args: argparse.Namespace, name: str, flag: str, options: Callable[[float, float], dict]) -> None:
    """``choice.independent_one_ways`` (the count taken as the true size) at each of ``flag``'s values, each run's
    keyword arguments ``options(value, z)``: the median model error over the seeds, divided by the first value's,
    beside each (table, epsilon)'s z."""
    values = [float(v) for v in flag.split(",")]
    print(f"{'table':<9} {'epsilon':>7} {'z':>6} {f'{name} = {values[0]:g}':>8} "
          + " ".join(f"{f'{name} = {v:g}':>9}" for v in values[1:]))  # fmt: skip
    for table, epsilons in cells_to_run(args).items():
        batch, domain, _ = load(table)
        true = counts(batch, domain, 3)
        for epsilon in epsilons:
            count_epsilon, rho = count_and_rho(epsilon, DELTA)
            z = batch.num_rows * math.sqrt(2 * rho)
            medians = []
            for value in values:
                runs = [
                    errors(true, independent_one_ways(
                        true, domain, epsilon=epsilon - count_epsilon, max_rows=1,
                        count=(batch.num_rows, count_epsilon), source=random_source(seed), **options(value, z),
                    ).model.marginal)[0]
                    for seed in range(args.seeds)
                ]  # fmt: skip
                medians.append(float(np.median(runs)))
            ratios = " ".join(f"{m / medians[0]:>9.3f}" for m in medians[1:])
            print(f"{table:<9} {epsilon:>7g} {z:>6.0f} {medians[0]:>8.4f} {ratios}", flush=True)


def ramps(args: argparse.Namespace) -> None:
    """AIM's default shares with each ramp of the 1-way share: median error over the seeds, over the first's."""
    ramps = [tuple(float(x) for x in ramp.split(":")) for ramp in args.ramps.split(",")]
    print(f"{'table':<9} {'epsilon':>7} {'error':>6} {args.ramps.split(',')[0]:>9} "
          + " ".join(f"{r:>9}" for r in args.ramps.split(",")[1:]))  # fmt: skip
    for name, epsilons in cells_to_run(args).items():
        batch, domain, ordered = load(name)
        true = counts(batch, domain, 3)
        for epsilon in epsilons:
            rho = epsilon_to_zcdp(epsilon, delta=DELTA)
            medians = []
            for low, high in ramps:
                aim_module.VERY_NOISY_ONE_WAYS = (low, high * (1 + 1e-9))  # a step where low == high
                runs = [model_error(true, domain, ordered, rho, seed, AIM_DEFAULTS) for seed in range(args.seeds)]
                medians.append(float(np.median(runs)))
            error = one_way_error(domain, rows=batch.num_rows, rho=rho)
            ratios = " ".join(f"{m / medians[0]:>9.3f}" for m in medians[1:])
            print(f"{name:<9} {epsilon:>7g} {error:>6.3f} {medians[0]:>9.4f} {ratios}", flush=True)


if __name__ == "__main__":
    main()
