"""Train on synthetic, test on real (issue 38): what the released rows are worth to a model.

    python -m benchmarks.bench_tstr [--datasets titanic,fair,...] [--epsilons 1.0,0.3] [--seeds 3 [--first-seed 0]]
        [--references mst,aim,pgm-mst,pgm-aim | --no-reference] [--ours auto,mwem,independent]
        [--reference-aim-rounds 8,nltcs=16] [--pgm-python PYTHON --pgm-source TREE [--pgm-aim-rounds 64,nltcs=128]]

For each table with a natural target (``TARGETS``: the column, and which of its codes make the label), the
real rows are split once, 80/20, by a fixed seed (``SPLIT_SEED``), before any synthesis. Each generator
then synthesizes from the 80% at (epsilon, delta = 1e-9) and draws as many rows as the 80% holds, as
bench_synth runs it (``bench_synth.generators``: ours, auto told the target (``--target``) and mwem; "naive
bayes" forced whatever z, for tuning auto's threshold; the independent 1-ways; OpenDP's MST and AIM; with
``--pgm-python`` and ``--pgm-source``, Private-PGM's own MST and AIM, benchmarks.private_pgm);
scikit-learn's HistGradientBoostingClassifier (its defaults, random_state 0; every other column a
number, its code) is trained on those rows and scored on the real 20%: AUC (for more than two classes the
mean over the classes of each class's one-against-the-rest AUC, "macro") and accuracy. A model trained on
synthetic rows of one label only predicts that label (AUC 0.5). In the same run, the ceiling: the same
model trained on the real 80%. Medians over the seeds (each seed a new synthesis; the split stays).
Seeds make our draws repeatable and NOT private (OpenDP's noise is its own; Private-PGM's is seeded).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from beam_expmech.accounting import epsilon_to_zcdp
from benchmarks.bench_synth import (
    DELTA,
    aim_rounds,
    counts,
    failures,
    fit_or_report,
    generator_arguments,
    generators,
    load,
    parse_generator_arguments,
)

SPLIT_SEED = 0
# table: (the target column, its codes -> the label; None: the codes themselves)
TARGETS: dict[str, tuple[str, Callable[[np.ndarray, np.ndarray], np.ndarray] | None]] = {
    "titanic": ("Survived", lambda codes, real: codes == 1),  # code 2 (unknown) rows are left out: see load_task
    "fair": ("affairs", lambda codes, real: codes > 0),
    "breast_cancer": ("diagnosis", None),
    "anes96": ("vote", None),
    "penguins": ("species", None),
    "diabetes": ("progression", lambda codes, real: codes > np.median(real)),  # above the real rows' median
    "nltcs": ("bathing", None),
    "payroll": ("pay-rate", None),
}


def load_task(name: str) -> tuple[pa.RecordBatch, dict[str, int], frozenset[str]]:
    """The table as bench_synth loads it; titanic without the passengers whose survival is not known."""
    batch, domain, ordered = load(name)
    if name == "titanic":
        batch = batch.filter(pa.array(batch.column("Survived").to_numpy() < 2))
    return batch, domain, ordered


def features_and_label(rows: dict[str, np.ndarray], target: str, label, real: np.ndarray):
    """(features: every column but the target, as numbers; the label)."""
    x = np.column_stack([np.asarray(v) for c, v in rows.items() if c != target]).astype(np.float64)
    y = np.asarray(rows[target])
    return x, (y if label is None else label(y, real)).astype(np.int64)


def scores(train: tuple, test: tuple) -> tuple[float, float]:
    """(AUC, accuracy) on ``test`` of the classifier trained on ``train``."""
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.metrics import roc_auc_score

    (x_train, y_train), (x_test, y_test) = train, test
    classes = np.unique(y_test)
    if np.unique(y_train).size < 2:  # one label only: it predicts that label for every row
        return 0.5, float(np.mean(y_test == y_train[0]))
    model = HistGradientBoostingClassifier(random_state=0).fit(x_train, y_train)
    proba = np.zeros((y_test.size, int(max(classes.max(), y_train.max())) + 1))
    proba[:, model.classes_] = model.predict_proba(x_test)
    accuracy = float(np.mean(model.predict(x_test) == y_test))
    aucs = [roc_auc_score(y_test == c, proba[:, c]) for c in classes if 0 < np.sum(y_test == c) < y_test.size]
    return float(np.mean(aucs)), accuracy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    generator_arguments(parser, list(TARGETS), ["auto", "mwem", "independent"])
    args = parse_generator_arguments(parser)
    rounds_of, pgm_rounds_of = aim_rounds(args.reference_aim_rounds), aim_rounds(args.pgm_aim_rounds)
    print(f"{'dataset':<13} {'target':<12} {'epsilon':>7} {'trained on':<16} {'AUC':>6} {'accuracy':>8} {'seconds':>8}",
          flush=True)  # fmt: skip
    for name in args.datasets.split(","):
        batch, domain, ordered = load_task(name)
        target, label = TARGETS[name]
        order = np.random.default_rng(SPLIT_SEED).permutation(batch.num_rows)
        cut = int(0.8 * batch.num_rows)
        train, test = batch.take(pa.array(order[:cut])), batch.take(pa.array(order[cut:]))
        real = train.column(target).to_numpy()
        as_dict = {c: train.column(c).to_numpy() for c in domain}
        test_xy = features_and_label({c: test.column(c).to_numpy() for c in domain}, target, label, real)
        auc, accuracy = scores(features_and_label(as_dict, target, label, real), test_xy)
        print(f"{name:<13} {target:<12} {'':>7} {'real 80%':<16} {auc:>6.3f} {accuracy:>8.3f} {'':>8}", flush=True)
        true = counts(train, domain, 3)
        one_way = {m[0]: c for m, c in counts(train, domain, 1).items()}
        for epsilon in (float(e) for e in args.epsilons.split(",")):
            rho = epsilon_to_zcdp(epsilon, delta=DELTA)
            z = train.num_rows * math.sqrt(2 * rho)  # what auto's rule reads, from a noisy count (synth.choice)
            print(f"# {name} {epsilon:g}: {train.num_rows:,} rows, z = {z:.1f}", file=sys.stderr, flush=True)
            runs: dict[str, list] = {}
            failed: dict[str, int] = {}
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                for method, fit in generators(train, domain, ordered, true, one_way, epsilon, rho, seed, args,
                                              rounds_of(name), target=target,
                                              pgm_aim_rounds=pgm_rounds_of(name)):  # fmt: skip
                    start = time.perf_counter()
                    run = f"{name} {epsilon:g} {method} seed {seed}"
                    if (fitted := fit_or_report(fit, method, run, failed)) is None:
                        continue
                    rows = fitted.sample(train.num_rows, seed)
                    seconds = time.perf_counter() - start
                    if name == "titanic":  # as the real rows: survival known
                        known = np.asarray(rows[target]) < 2
                        rows = {c: np.asarray(v)[known] for c, v in rows.items()}
                    result = scores(features_and_label(rows, target, label, real), test_xy)
                    runs.setdefault(method, []).append((*result, seconds))
                    print(f"# {name} {epsilon:g} {method} seed {seed}: AUC {result[0]:.3f} {seconds:.1f} s",
                          file=sys.stderr, flush=True)  # fmt: skip
            for method, values in runs.items():
                auc, accuracy, seconds = np.median(values, axis=0)
                line = f"{name:<13} {target:<12} {epsilon:>7g} {method:<16} {auc:>6.3f} {accuracy:>8.3f}"
                print(f"{line} {seconds:>8.1f}{failures(failed, method)}", flush=True)
            for method in failed.keys() - runs.keys():
                print(f"{name:<13} {target:<12} {epsilon:>7g} {method:<16} not finished in every seed", flush=True)


if __name__ == "__main__":
    main()
